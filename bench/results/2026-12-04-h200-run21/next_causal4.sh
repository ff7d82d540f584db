#!/usr/bin/env bash
# Prepared in run 21, not run (issue 13; no device time left): four compute warpgroups on the D = 64 causal rows, the
# forms that compile for sm_90a without a spill (persistent with the overlap at BN = 64 spills 8 B): one program per work
# tile at BN = 64 with the overlap, and persistent at BN = 32 with 6 or 8 ring slots. Head to head with the shipped kernels
# (two warpgroups, persistent, BN = 128) on the 1k and 4k causal rows, each verified first, every job with a deadline.
# On the H200 from the repository root, .gpu_deps carried; about 4 minutes.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 540 python3 bench/gluon_persistent.py --out /tmp/ab --rows d64-s1k-causal,d64-s4k-causal --jobs 14 --rounds 3 \
  --variants BM=256,warps=16,BN=64,qreg=0,persistent=0 BM=256,warps=16,BN=32,qreg=0,stages=6 BM=256,warps=16,BN=32,qreg=0,stages=8 \
  > $OUT/causal_four_sets_ab.txt 2>&1; echo "rc $?"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep "^FAIL mha\|^phase\|^|\|^geomean" $OUT/causal_four_sets_ab.txt | cut -c1-260
