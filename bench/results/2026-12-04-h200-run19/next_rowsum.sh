#!/usr/bin/env bash
# Prepared in run 19, not run (issue 13): the row sum by the tensor cores (rowsum_mma.py) head to head with the shipped
# kernels, on the rows whose kernels it compiles without a spill (for sm_90a on the CPU: the D = 64 1k rows, D = 128 1k full
# and 4k causal, the D = 256 1k rows, GQA 4k causal; the three-warpgroup kernels spill 64 B, D = 64 4k causal 40 B,
# D = 128 16k full 16 B). On the H200 from the repository root, .gpu_deps carried; about 4 minutes.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 540 python3 bench/results/2026-12-04-h200-run19/softmax_ab.py /tmp/rs rowsum d64-s1k d128-s1k-full d128-s4k-causal d256-s1k gqa-bf16-d128-s4k-causal > $OUT/rowsum_ab.txt 2>&1; echo "rc $?"
cp /tmp/rs/softmax_ab_rowsum.json $OUT/ 2>/dev/null
grep -v PASS $OUT/rowsum_ab.txt | tail -30 | cut -c1-220
