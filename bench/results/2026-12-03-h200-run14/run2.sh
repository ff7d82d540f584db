#!/bin/bash
# call 2: three warpgroups, one tile loop (b30c598, scratch/old_src) against two (unmasked, then masked), and their variants
export ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
B=$PWD/bench:$PWD/tests:$PWD/.gpu_deps
PYTHONPATH=$PWD/scratch/old_src:$B timeout 200 python3 bench/gluon_persistent.py --out $OUT/old --rows d64-s16k,d64-s4k-full --jobs 14 --rounds 2 \
  --variants "BM=192,warps=12" > $OUT/call2-one-loop.txt 2>&1
echo rc=$?
PYTHONPATH=$PWD/src:$B timeout 380 python3 bench/gluon_persistent.py --out $OUT/new --rows d64 --jobs 15 --rounds 2 \
  --variants "BM=192,warps=12" "BM=192,warps=12,persistent=0" "BM=192,warps=12,stages=4,persistent=1" > $OUT/call2-two-loops.txt 2>&1
echo rc=$?
rm -rf $OUT/old/src $OUT/new/src
grep -v "^PASS" $OUT/call2-one-loop.txt | tail -12
grep -v "^PASS" $OUT/call2-two-loops.txt | grep -v "^FAIL feature-d256\|^FAIL feature-window_d128" | tail -20
