#!/usr/bin/env bash
# Run 20 calls 1 and 2 (issue 13): run 19's next_rowsum.sh with a control copy added (softmax_ab.py here). Call 1 ran
# run 19's rowsum_mma.py (the ones tile [BN, 8], no swizzle); call 2 this directory's (the ones tile [8, BN], 128-byte
# swizzle, permuted: a K-major B operand, as the K tiles are). On the H200 from the repository root, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 540 python3 bench/results/2026-12-04-h200-run20/softmax_ab.py /tmp/rs rowsum d64-s1k d128-s1k-full d128-s4k-causal d256-s1k gqa-bf16-d128-s4k-causal > $OUT/rowsum_ab.txt 2>&1; echo "rc $?"
cp /tmp/rs/softmax_ab_rowsum.json $OUT/ 2>/dev/null
grep -v PASS $OUT/rowsum_ab.txt | tail -30 | cut -c1-220
