#!/usr/bin/env bash
# Run 22 call 4 (issue 13): O through the last K/V tile's ring slots in the persistent D = 256 kernel (q_early.py --kv-stage),
# beside the persistent and the shipped kernels, on the 12 D = 256 rows. On the H200 from the repository root, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 500 python3 bench/results/2026-12-04-h200-run22/q_early.py /tmp/qe --kv-stage d256 > $OUT/kv_stage_ab.txt 2>&1; echo "rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/qe/q_early.json $OUT/kv_stage_ab.json 2>/dev/null
grep -v PASS $OUT/kv_stage_ab.txt | cut -c1-260
