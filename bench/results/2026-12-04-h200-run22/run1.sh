#!/usr/bin/env bash
# Run 22 call 1 (issue 13): (1) the D = 256 work tile's epilogue, Q and first K/V tile (q_early.py) on the 1k and 4k rows;
# (2) run 21's prepared next_causal4.sh (four warpgroups on the D = 64 causal rows). On the H200 from the repository root,
# .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 320 python3 bench/results/2026-12-04-h200-run22/q_early.py /tmp/qe d256-s1k d256-s4k > $OUT/q_early_ab.txt 2>&1; echo "q_early rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/qe/q_early.json $OUT/ 2>/dev/null
grep -v PASS $OUT/q_early_ab.txt | cut -c1-260
timeout $(( 585 - ($(date +%s) - t0) )) python3 bench/gluon_persistent.py --out /tmp/ab --rows d64-s1k-causal,d64-s4k-causal --jobs 14 --rounds 3 \
  --variants BM=256,warps=16,BN=64,qreg=0,persistent=0 BM=256,warps=16,BN=32,qreg=0,stages=6 BM=256,warps=16,BN=32,qreg=0,stages=8 \
  > $OUT/causal_four_sets_ab.txt 2>&1; echo "causal4 rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep "^FAIL mha\|^phase\|^|\|^geomean" $OUT/causal_four_sets_ab.txt | cut -c1-260
