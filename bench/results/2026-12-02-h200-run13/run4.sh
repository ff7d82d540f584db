#!/usr/bin/env bash
# device call 4 (run 13): the decode and decode-verify buckets tuned head to head (triton, gluon) for auto; then the bench's
# decode rows with those entries, auto beside both backends
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc ATTNFORGE_TUNING=$OUT/tuning.json PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 330 python3 bench/tune_rows.py --groups decode,decode-verify --backend triton,gluon --db $OUT/tuning.json --max-candidates 1 --budget 40 --deadline 290 > $OUT/tune.txt 2>&1
echo "tune rc $? $(( $(date +%s) - t0 )) s, $(grep -c '"backend"' $OUT/tuning.json) entries"
left=$(( 540 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$(( left - 50 )) timeout $left bash bench/bench_gpu.sh --no-png --rows decode --providers sdpa-cudnn,attnforge-auto,attnforge-gluon,attnforge-triton --rounds 2 --rep-ms 40 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; rm -rf $OUT/bench
cut -c1-300 $OUT/tune.txt
grep -E "^\| (decode|attnforge|sdpa)" $OUT/bench.md | head -12
