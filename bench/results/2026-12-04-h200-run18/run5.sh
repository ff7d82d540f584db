#!/usr/bin/env bash
# device call 5 (run 18): Q in registers for the causal D = 128 kernels of one program per work tile (4k and 16k keys), which
# spilled 8 bytes in call 1 and no more with the Mask comparing the keys' indices (compute._by_key_index), head to head, 3 rounds
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 400 python3 bench/gluon_persistent.py --out /tmp/ab --rows d128-s4k-causal,d128-s16k-causal --variants qreg=1 --jobs 12 --rounds 3 > $OUT/ab.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep -E "^(PASS|FAIL)" $OUT/ab.txt | cut -c1-90
grep -v "^PASS\|^FAIL" $OUT/ab.txt | tail -9 | cut -c1-300
