#!/usr/bin/env bash
# device call 2 (run 16): the whole bench matrix, gluon beside cuDNN (the shipped tuning entries of run 15 merged)
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 bench/prewarm.py --backends gluon --jobs 14 > $OUT/prewarm.txt 2>&1; echo "prewarm rc $? $(( $(date +%s) - t0 )) s"; grep -ci "fail\|error" $OUT/prewarm.txt
left=$(( 520 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$left timeout $(( 585 - ($(date +%s) - t0) )) bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 2 --rep-ms 40 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; cp $OUT/bench/log.txt $OUT/bench_log.txt; rm -rf $OUT/bench
grep -iE "geomean|provider|attnforge-gluon \|" $OUT/bench.md | head -8
grep -E "^\| (mha|gqa|decode)" $OUT/bench.md | head -50
