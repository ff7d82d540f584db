#!/usr/bin/env bash
# Run 20 call 5 (issue 13), as run: it hung (see raw_arrive.py: the offsets of one specialisation); next_raw.sh is its mended form.
# Call 5: K/V slots given back (arrive) and waited for (waits) in inline asm, without the bar.sync
# Triton's membar pass puts before each mbarrier op (raw_arrive.py), and a control copy, beside the shipped Gluon kernels
# on the rows below or near 0.95x and two long rows. On the H200 from the repository root, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 470 python3 bench/results/2026-12-04-h200-run20/softmax_ab.py /tmp/raw raw s1k d64-s4k-causal bf16-d128-s16k-full gqa-bf16-d128-s4k-causal > $OUT/raw_ab.txt 2>&1; echo "rc $?"
cp /tmp/raw/softmax_ab_raw.json $OUT/ 2>/dev/null
grep -v PASS $OUT/raw_ab.txt | tail -24 | sed 's/{.BM[^}]*} |//' | cut -c1-160
