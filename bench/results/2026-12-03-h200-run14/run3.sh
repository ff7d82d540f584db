#!/usr/bin/env bash
# call 3 (run 14): the D = 64 buckets where the planner's first choice is now three warpgroups (BM = 192) re-tuned head to
# head against the two-warpgroup kernel (its second); the two mutants whose patterns moved; then the D = 64 bench rows
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc ATTNFORGE_TUNING=$OUT/tuning.json PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 90 python3 -m attnforge.backends.gluon.gpucheck --phase mutants --mutants gluon_first_turn_never_passed,gluon_ostage2_stores_the_other_warpgroups_rows > $OUT/gluon_mutants.txt 2>&1
echo "mutants rc $? $(( $(date +%s) - t0 )) s"
timeout 260 python3 bench/tune_rows.py --backend gluon --db $OUT/tuning.json --max-candidates 2 --deadline 200 d64-s4k-full d64-s16k > $OUT/tune.txt 2>&1
echo "tune rc $? $(( $(date +%s) - t0 )) s, $(grep -c '"backend"' $OUT/tuning.json) entries"
left=$(( 540 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$(( left - 30 )) timeout $left bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 2 --rep-ms 40 --head-dim 64 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; rm -rf $OUT/bench
tail -5 $OUT/gluon_mutants.txt | cut -c1-250
cut -c1-330 $OUT/tune.txt | tail -14
grep -E "geomean|^\| attnforge-gluon|^\| mha" $OUT/bench.md | head -16
