#!/usr/bin/env bash
# Run 20 call 4 (issue 12): the mma.sync ceiling (mma_sync_peak.py, cubins built on the CPU into scratch/mma) with
# FlashAttention-2 beside it, then cuda_ab.py's shuffled order and control on the shipped CUDA kernels
# (built on the CPU: PYTHONPATH=src python3 bench/cuda_ab.py build --out scratch/ab --label ship --rows ROWS).
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 120 python3 bench/results/2026-12-04-h200-run20/mma_sync_peak.py time scratch/mma 2>&1 | tee $OUT/mma_sync_peak.txt | tail -14
cp scratch/mma/mma_sync_peak.json $OUT/ 2>/dev/null
timeout 300 python3 bench/cuda_ab.py time scratch/ab --rows d64-s1k d128-s16k d256-s1k d256-s4k-fp16 > $OUT/cuda_ab_control.txt 2>&1; echo "rc $?"
cp scratch/ab/cuda_ab.json $OUT/cuda_ab_control.json 2>/dev/null
tail -22 $OUT/cuda_ab_control.txt | cut -c1-160
