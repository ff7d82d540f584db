#!/usr/bin/env bash
# call 4 (run 14): the unmasked D = 64 buckets past 1k re-tuned, the first two candidates asked for (three warpgroups, BM = 192,
# spill-free now, then two; within --budget 40 only the first was timed); then the D = 64 bench rows with those entries
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc ATTNFORGE_TUNING=$OUT/tuning.json PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 150 python3 bench/tune_rows.py --backend gluon --db $OUT/tuning.json --max-candidates 2 --budget 40 --deadline 110 d64-s16k-full d64-s4k-full > $OUT/tune.txt 2>&1
echo "tune rc $? $(( $(date +%s) - t0 )) s, $(grep -c '"backend"' $OUT/tuning.json) entries"
cut -c1-250 $OUT/tune.txt | tail -5
left=$(( 235 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$(( left - 15 )) timeout $left bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 1 --rep-ms 30 --head-dim 64 --rows full > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; rm -rf $OUT/bench
grep -E "geomean|^\| attnforge-gluon|^\| mha" $OUT/bench.md | head -10
