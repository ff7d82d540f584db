#!/usr/bin/env bash
# device call 3 (run 18): the whole bench matrix, gluon beside cuDNN, with the qreg = 1 tuning entries of call 1 (12 rows);
# beside the prewarm, one grid spec generated again with its report kept (which candidate generate took)
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
(timeout 150 python3 -m attnforge generate --target auto --backend gluon --out /tmp/gen_d64c --dtype fp16 --head-dim 64 --heads 4 --kv-heads 2 --seqlen-q 1000 --seqlen-k 1000 --causal > $OUT/generate_d64_causal.txt 2>&1; echo "generate rc $?"; cp /tmp/gen_d64c/report.md $OUT/generate_d64_causal_report.md; grep -m1 "^param" /tmp/gen_d64c/kernel.tl) &
timeout 200 python3 bench/prewarm.py --backends gluon --jobs 14 > $OUT/prewarm.txt 2>&1; echo "prewarm rc $? $(( $(date +%s) - t0 )) s"; grep -ci "fail\|error" $OUT/prewarm.txt
wait
for f in /tmp/afc/*/kernel.tl; do echo "$(dirname $f | xargs basename) $(grep -m1 '^# Forward\|^# Decode' $f | cut -c1-120) | $(grep -m1 '^param' $f)"; done > $OUT/cached_params.txt; echo "cached kernels with qreg: $(grep -c 'qreg = 1' $OUT/cached_params.txt) of $(wc -l < $OUT/cached_params.txt)"
left=$(( 520 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$left timeout $(( 585 - ($(date +%s) - t0) )) bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 2 --rep-ms 40 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; cp $OUT/bench/log.txt $OUT/bench_log.txt; rm -rf $OUT/bench
grep -iE "geomean|provider|attnforge-gluon \|" $OUT/bench.md | head -8
grep -E "^\| (mha|gqa|decode)" $OUT/bench.md | head -50
