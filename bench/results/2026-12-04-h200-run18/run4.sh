#!/usr/bin/env bash
# device call 4 (run 18): the rows call 1 left in doubt, qreg = 1 against the same kernel reading Qs through the translator,
# 3 rounds: D = 128 4k full (MHA gained, GQA lost in call 1) and D = 64 4k causal (lost); the database's kernel is one of the two
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 400 python3 bench/gluon_persistent.py --out /tmp/ab --rows d128-s4k-full,d64-s4k-causal --variants qreg=0 qreg=1 --jobs 10 --rounds 3 > $OUT/ab.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep -v "^PASS" $OUT/ab.txt | tail -14 | cut -c1-300
