#!/usr/bin/env bash
# Run 21 call 2 (issue 13): D = 64 with BN = 256 keys a tile and no intra-warpgroup overlap (two S tiles of 256 do not fit
# beside O: with the overlap it spills 368 B), head to head with the shipped kernels (the tuning database's). Compiled for
# sm_90a on the CPU, spill-free at 1k full (2 and 3 slots), at 4k causal only one program per work tile (persistent it
# spills 24 B). From the repository root on the H200, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 540 python3 bench/gluon_persistent.py --out /tmp/ab --rows d64-s1k,d64-s4k --jobs 14 --rounds 3 \
  --variants BM=128,warps=8,BN=256,stages=2,overlap=0 BM=128,warps=8,BN=256,stages=3,overlap=0 \
             BM=128,warps=8,BN=256,stages=2,overlap=0,persistent=0 > $OUT/bn256_ab.txt 2>&1; echo "rc $?"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep -v "PASS\|^ *$" $OUT/bn256_ab.txt | tail -30 | cut -c1-200
