#!/usr/bin/env bash
# run 19 call 5 (issue 12): the D = 256 CUDA first choice (BN 32, Q kept, qreg = 1) against the one before (BN 64, Q re-read):
# A/B on the 12 D = 256 bench rows, the CUDA GPU check's verify phase, then the bench's D = 256 rows.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
R="d256-s1k d256-s1k-fp16 d256-s1k-causal d256-s1k-causal-fp16 d256-s4k d256-s4k-fp16 d256-s4k-causal d256-s4k-causal-fp16 d256-s16k d256-s16k-fp16 d256-s16k-causal d256-s16k-causal-fp16"
timeout 150 python3 bench/prewarm.py --backends cuda --rows d256 --jobs 12 > $OUT/prewarm.txt 2>&1; echo "prewarm rc $?" >> $OUT/prewarm.txt
timeout 200 python3 bench/cuda_ab.py time scratch/cuda_ab --rounds 3 --rows $R > $OUT/cuda_ab.txt 2>&1; echo "ab rc $?"
cp scratch/cuda_ab/cuda_ab.json $OUT/ 2>/dev/null

tail -2 $OUT/prewarm.txt
BENCH_TIME_LIMIT=120 timeout 170 bash bench/bench_gpu.sh --no-png --head-dim 256 --providers sdpa-cudnn,sdpa-flash,attnforge-cuda --rounds 2 --rep-ms 40 > $OUT/bench.txt 2>&1; echo "bench rc $?"
cp -r /tmp/bench-out/bench $OUT/bench 2>/dev/null
timeout 150 python3 -m attnforge.backends.cuda.gpucheck --out $OUT/gc --phase verify --budget 110 > $OUT/gpucheck.txt 2>&1; echo "gpucheck rc $?"
tail -16 $OUT/cuda_ab.txt | cut -c1-200
grep -A3 "Summary" $OUT/bench.txt | head -8; grep "d256" $OUT/bench.txt | head -14 | cut -c1-200
tail -8 $OUT/gpucheck.txt | cut -c1-200
