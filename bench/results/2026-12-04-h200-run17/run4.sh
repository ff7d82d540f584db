#!/usr/bin/env bash
# device call 4 (run 17): fp16 against bf16 at D = 128, 1k full, on random and on short-mantissa inputs, SM clock and power sampled
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 200 python3 bench/results/2026-12-04-h200-run17/fp16_power.py $OUT/p > $OUT/fp16_power.txt 2>&1; echo "rc $?"
tail -14 $OUT/fp16_power.txt | cut -c1-200
