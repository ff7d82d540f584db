#!/usr/bin/env bash
# device call 2 (run 15): the three-warpgroup candidates tuned head to head against the two-warpgroup kernels
# (tune/search.hopper_order: --max-candidates 2 times the first choice against the planner's best at the other warpgroup count)
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc ATTNFORGE_TUNING=$OUT/tuning.json PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 520 python3 bench/tune_rows.py --backend gluon --db $OUT/tuning.json --max-candidates 2 --budget 75 --deadline 440 d64-s4k-full d128-s16k-full d64-s16k-causal d128-s4k-full > $OUT/tune.txt 2>&1
echo "tune rc $? $(( $(date +%s) - t0 )) s, $(grep -c '"backend"' $OUT/tuning.json 2>/dev/null) entries"
cut -c1-300 $OUT/tune.txt | tail -30
