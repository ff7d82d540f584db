#!/usr/bin/env bash
# device call 3 (run 13): decode at two programs an SM (TL occupancy = 2): the planner's module A/B; the Gluon feature+decode
# grid; the decode mutants; the bench's decode rows
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 120 python3 bench/gluon_decode_tiles.py time scratch/decab --per-sm 1 --eager > $OUT/decode_occ_eager.txt 2>&1
(ONLY_FEATURES=1 JOBS=8 timeout 200 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid_features.txt 2>&1) &
GRID=$!
timeout 200 python3 -m attnforge.backends.gluon.gpucheck --phase mutants --mutants gluon_decode_one_split_for_every_count,gluon_decode_merge_rescale_dropped,gluon_decode_merge_a_split_early,gluon_decode_merge_counter_kept,gluon_decode_split_ends_a_tile_early,gluon_decode_packed_row_head_lost > $OUT/gluon_mutants.txt 2>&1
wait $GRID
BENCH_TIME_LIMIT=120 timeout 170 bash bench/bench_gpu.sh --no-png --rows decode --providers sdpa-cudnn,attnforge-gluon,attnforge-triton --rounds 3 --rep-ms 40 > $OUT/bench_decode.txt 2>&1
tail -2 $OUT/grid_features.txt; grep '^FAIL' -A3 $OUT/grid_features.txt; grep -E "PASS|KILL|SURV|FAIL" $OUT/gluon_mutants.txt | cut -c1-90
grep -v Warning $OUT/decode_occ_eager.txt | grep -v warn_once | tail -8
grep -E "^\| (decode|attnforge|sdpa)" $OUT/bench/bench.md | head -14
