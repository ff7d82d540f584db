#!/usr/bin/env bash
# device call 3 (run 17): D = 256 without ping-pong, with BN = 32 in 3 slots, with O from registers, A/B against the shipped kernels
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 450 python3 bench/gluon_persistent.py --out /tmp/ab --rows d256-s1k,d256-s4k --variants pingpong=0 BN=32,stages=3 ostage=0 --jobs 14 --rounds 3 > $OUT/ab.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep -v "^PASS" $OUT/ab.txt | tail -16 | cut -c1-300
