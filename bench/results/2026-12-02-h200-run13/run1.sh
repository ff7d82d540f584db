#!/usr/bin/env bash
# device call 1 (run 13): the splits merged by the last split (gluon/merge.py): decode A/B against the two-kernel
# modules (graphs, then eager); the Gluon feature+decode grid; the decode mutants; the bench's decode rows
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 140 python3 bench/gluon_decode_tiles.py time scratch/decab --per-sm 1 > $OUT/decode_ab_graph.txt 2>&1
cp scratch/decab/gluon_decode_tiles.json $OUT/decode_ab_graph.json 2>/dev/null
timeout 100 python3 bench/gluon_decode_tiles.py time scratch/decab --per-sm 1 --eager > $OUT/decode_ab_eager.txt 2>&1
(ONLY_FEATURES=1 JOBS=8 timeout 200 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid_features.txt 2>&1) &
GRID=$!
timeout 200 python3 -m attnforge.backends.gluon.gpucheck --phase mutants --mutants gluon_decode_one_split_for_every_count,gluon_decode_merge_rescale_dropped,gluon_decode_merge_a_split_early,gluon_decode_merge_counter_kept,gluon_decode_split_ends_a_tile_early,gluon_decode_packed_row_head_lost > $OUT/gluon_mutants.txt 2>&1
wait $GRID
BENCH_TIME_LIMIT=120 timeout 170 bash bench/bench_gpu.sh --no-png --rows decode --providers sdpa-cudnn,attnforge-gluon,attnforge-triton --rounds 3 --rep-ms 40 > $OUT/bench_decode.txt 2>&1
tail -3 $OUT/grid_features.txt; grep '^FAIL' -A3 $OUT/grid_features.txt; tail -8 $OUT/gluon_mutants.txt
grep -v Warning $OUT/decode_ab_graph.txt | grep -v warn_once | tail -14
grep -v Warning $OUT/decode_ab_eager.txt | grep -v warn_once | tail -14
tail -14 $OUT/bench_decode.txt
