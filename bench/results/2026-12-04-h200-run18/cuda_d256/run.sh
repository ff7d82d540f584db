#!/usr/bin/env bash
# Prepared in run 18 (issue 12): after prepare.sh on the CPU (scratch/ is neither tracked nor ignored: it travels to the device),
# on the H200: each version verified against SDPA's math backend and timed beside FlashAttention-2 and cuDNN, 3 rounds.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 540 python3 bench/cuda_ab.py time scratch/cuda_ab --rounds 3 --rows d256-s4k d256-s4k-causal d256-s1k-fp16 d256-s1k-causal d256-s16k > $OUT/cuda_ab.txt 2>&1; echo "rc $?"
cp scratch/cuda_ab/cuda_ab.json $OUT/ 2>/dev/null
tail -40 $OUT/cuda_ab.txt | cut -c1-220
