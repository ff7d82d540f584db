#!/usr/bin/env bash
# Run 21 call 6: (1) which text difference breaks the window kernel with Q in registers (call 5's A3; modules in diag/,
# two of them written by diag/make_diag.py; as run, from scratch/diag/); (2) the whole Gluon matrix with this tree's planner and
# tuning database (four warpgroups on the D = 64 1k full rows), as run 18 call 6 (its run3.sh).
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
(timeout 120 python3 scratch/diag/run.py > $OUT/window_qreg_diag.txt 2>&1; echo "diag rc $?") &
timeout 200 python3 bench/prewarm.py --backends gluon --jobs 12 > $OUT/prewarm.txt 2>&1; echo "prewarm rc $? $(( $(date +%s) - t0 )) s"; grep -ci "fail\|error" $OUT/prewarm.txt
wait
cut -c1-600 $OUT/window_qreg_diag.txt | grep "^PASS\|^FAIL"
for f in /tmp/afc/*/kernel.tl; do echo "$(dirname $f | xargs basename) $(grep -m1 '^# Forward\|^# Decode' $f | cut -c1-120) | $(grep -m1 '^param' $f)"; done > $OUT/cached_params.txt; echo "cached kernels with BM = 256: $(grep -c 'BM = 256' $OUT/cached_params.txt) of $(wc -l < $OUT/cached_params.txt)"
left=$(( 520 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$left timeout $(( 585 - ($(date +%s) - t0) )) bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 2 --rep-ms 40 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; cp $OUT/bench/log.txt $OUT/bench_log.txt; rm -rf $OUT/bench
grep -iE "geomean|provider|attnforge-gluon \|" $OUT/bench.md | head -8
grep -E "^\| (mha|gqa|decode)" $OUT/bench.md | head -50
