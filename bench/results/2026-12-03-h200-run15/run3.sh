#!/usr/bin/env bash
# device call 3 (run 15): the Gluon mutants of call 1 that ran out the fixed 40 s deadline, again with the deadline taken from
# their control's time, beside the prewarm's compiles of the D = 64 rows (nothing timed meanwhile); then the D = 64 bench rows
# with call 2's tuning entries merged into tune/shipped.json
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
(timeout 150 python3 bench/prewarm.py --backends gluon --jobs 8 --rows d64 > $OUT/prewarm.txt 2>&1; echo "prewarm rc $? $(( $(date +%s) - t0 )) s") &
timeout 230 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants --mutants gluon_first_turn_never_passed,gluon_three_sets_mask_a_tile_late,gluon_three_sets_q_boxes_at_one_row,gluon_three_sets_causal_bound_a_key_late > $OUT/gluon_mutants.txt 2>&1
echo "mutants rc $? $(( $(date +%s) - t0 )) s"
wait
mkdir -p $OUT/mutant_logs; cp /tmp/gm/src/*.log $OUT/mutant_logs/ 2>/dev/null
left=$(( 440 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$(( left - 30 )) timeout $left bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 2 --rep-ms 40 --head-dim 64 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; rm -rf $OUT/bench
cut -c1-250 $OUT/gluon_mutants.txt
grep -E "geomean|^\| attnforge-gluon|^\| mha" $OUT/bench.md | head -16
