#!/usr/bin/env bash
# Run 21 call 4 (issue 13): four compute warpgroups in ping-pong at D = 64 (BM = 256, 16 compute warps, BN = 64), never
# timed before: 1k query rows are 4 such tiles (BM = 192 wastes an eighth of its rows there), and each warpgroup's softmax
# has three others' GEMMs to hide under. Compiled for sm_90a on the CPU: spill-free at 1k and 4k full with and without
# the overlap; under the causal mask only without it (8 B with it).
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 540 python3 bench/gluon_persistent.py --out /tmp/ab --rows d64-s1k,d64-s4k,d64-s16k-full --jobs 14 --rounds 3 \
  --variants BM=256,warps=16,BN=64,qreg=0 BM=256,warps=16,BN=64,qreg=0,overlap=0 BM=256,warps=16,BN=64,qreg=1,overlap=0 \
             BM=256,warps=16,BN=64,qreg=0,stages=6 > $OUT/four_sets_ab.txt 2>&1; echo "rc $?"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep "^FAIL mha\|^phase\|^|\|^geomean" $OUT/four_sets_ab.txt | cut -c1-260
