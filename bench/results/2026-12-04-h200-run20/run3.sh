#!/usr/bin/env bash
# Run 20 call 3 (issue 13): the lazy rescale (lazy_rescale.py, 32 registers a branch) and a control copy beside the shipped
# Gluon kernels on every prefill row. On the H200 from the repository root, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 560 python3 bench/results/2026-12-04-h200-run20/softmax_ab.py /tmp/lz lazy mha gqa > $OUT/lazy_ab.txt 2>&1; echo "rc $?"
cp /tmp/lz/softmax_ab_lazy.json $OUT/ 2>/dev/null
grep -v PASS $OUT/lazy_ab.txt | tail -48 | cut -c1-200
