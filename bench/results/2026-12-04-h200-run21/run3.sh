#!/usr/bin/env bash
# Run 21 call 3 (issue 13): what persistence would buy at D = 256 if it did not spill. The first choice (BM 128, BN 64,
# 2 slots, ping-pong, overlap, O through Q's tile) walked persistently spills 16 B a thread (40 B under the causal mask)
# for sm_90a, so the gate refuses it; --allow-spill 64 lets it be verified and timed beside the shipped kernel.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 500 python3 bench/gluon_persistent.py --out /tmp/ab --rows d256-s1k,d256-s4k --jobs 14 --rounds 3 --allow-spill 64 \
  --variants persistent=1 > $OUT/d256_persistent_spill_ab.txt 2>&1; echo "rc $?"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep -v "^ *$" $OUT/d256_persistent_spill_ab.txt | grep -v "^PASS feature" | tail -24 | cut -c1-220
