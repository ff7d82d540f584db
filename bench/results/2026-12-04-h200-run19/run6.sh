#!/usr/bin/env bash
# run 19 call 6: call 5's A/B again, each round in a turned order, with a second copy of the old kernel as a control of order
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
R="d256-s1k d256-s1k-fp16 d256-s1k-causal d256-s4k d256-s4k-fp16 d256-s4k-causal d256-s16k d256-s16k-causal-fp16"
timeout 300 python3 bench/cuda_ab.py time scratch/cuda_ab --rounds 4 --rows $R > $OUT/cuda_ab.txt 2>&1; echo "ab rc $?"
cp scratch/cuda_ab/cuda_ab.json $OUT/ 2>/dev/null
tail -5 $OUT/cuda_ab.txt; grep -v "^ " $OUT/cuda_ab.txt | head -3
