#!/usr/bin/env bash
# Prepared in run 22, not run (issue 13; no device time left): the whole Gluon matrix with this tree (ostage = 3 on the D = 256
# 1k full rows), as run 21 call 6, then the Gluon grid (32 specs with run 22's two ostage = 3 ones) if time is left.
# On the H200 from the repository root, .gpu_deps carried; about 9-10 minutes (the grid alone: JOBS=10, about 150 s).
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 bench/prewarm.py --backends gluon --jobs 12 > $OUT/prewarm.txt 2>&1; echo "prewarm rc $? $(( $(date +%s) - t0 )) s"; grep -ci "fail\|error" $OUT/prewarm.txt
left=$(( 520 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$left timeout $(( 585 - ($(date +%s) - t0) )) bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 2 --rep-ms 40 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; cp $OUT/bench/log.txt $OUT/bench_log.txt 2>/dev/null; rm -rf $OUT/bench
grep -iE "geomean|provider|attnforge-gluon \|" $OUT/bench.md | head -8
grep -E "^\| (mha|gqa|decode)" $OUT/bench.md | head -50
