#!/usr/bin/env bash
# device call 2 (run 12): the one-split launch: decode A/B (alone on the GPU); Gluon feature+decode grid; decode mutants; bench decode rows
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 150 python3 bench/gluon_decode_tiles.py time AB --per-sm 1 2 > $OUT/decode_ab.txt 2>&1
cp scratch/decab/gluon_decode_tiles.json $OUT/decode_ab.json 2>/dev/null
(ONLY_FEATURES=1 JOBS=8 timeout 200 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid_features.txt 2>&1) &
GRID=$!
timeout 200 python3 -m attnforge.backends.gluon.gpucheck --phase mutants --mutants gluon_decode_one_split_for_every_count,gluon_decode_combine_rescale_dropped,gluon_decode_split_ends_a_tile_early,gluon_decode_packed_row_head_lost > $OUT/gluon_mutants.txt 2>&1
wait $GRID
BENCH_TIME_LIMIT=150 timeout 200 bash bench/bench_gpu.sh --no-png --rows decode --providers sdpa-cudnn,attnforge-gluon --rounds 3 --rep-ms 40 > $OUT/bench_decode.txt 2>&1
ls bench/results 2>/dev/null | tail -2
tail -3 $OUT/grid_features.txt; grep '^FAIL' -A3 $OUT/grid_features.txt; tail -6 $OUT/gluon_mutants.txt
grep -v Warning $OUT/decode_ab.txt | grep -v warn_once | tail -30
tail -25 $OUT/bench_decode.txt
