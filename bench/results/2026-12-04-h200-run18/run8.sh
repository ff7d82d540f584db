#!/usr/bin/env bash
# device call 8 (run 18): three warpgroups (BM = 192, one program per work tile, the planner's last candidate) against the shipped
# two-warpgroup persistent kernel on the D = 64 4k causal rows: not timed since its Mask compares the keys' indices (run 15)
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 150 python3 bench/gluon_persistent.py --out /tmp/ab --rows d64-s4k-causal --variants BM=192,warps=12,persistent=0 --jobs 14 --rounds 3 > $OUT/ab.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep -E "^(PASS|FAIL)" $OUT/ab.txt | cut -c1-70
grep -v "^PASS\|^FAIL" $OUT/ab.txt | tail -6 | cut -c1-300
