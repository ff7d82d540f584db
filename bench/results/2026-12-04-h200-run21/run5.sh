#!/usr/bin/env bash
# Run 21 call 5 (issue 13): four_sets.py (see its docstring). From the repository root on the H200, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 420 python3 bench/results/2026-12-04-h200-run21/four_sets.py /tmp/fs > $OUT/four_sets.txt 2>&1; echo "rc $?"
cp /tmp/fs/four_sets.json $OUT/ 2>/dev/null
cut -c1-230 $OUT/four_sets.txt | tail -40
