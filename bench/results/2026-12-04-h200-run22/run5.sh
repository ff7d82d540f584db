#!/usr/bin/env bash
# Run 22 call 5 (issue 13): the translator's ostage = 3 (O through the last K/V tile's ring slots, persistent) head to head with
# the shipped D = 256 1k full kernels, each verified by the gate's cases first; then its two Gluon mutants and their control
# (the planner's kernel for spec hopper_o_via_kv) natively. On the H200 from the repository root, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 260 python3 bench/gluon_persistent.py --out /tmp/ab --rows d256-s1k-full --jobs 12 --rounds 3 --variants persistent=1,ostage=3 \
  > $OUT/ostage3_ab.txt 2>&1; echo "ab rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
grep "^FAIL mha\|^phase\|^|\|^geomean" $OUT/ostage3_ab.txt | cut -c1-300
timeout $(( 470 - ($(date +%s) - t0) )) python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants \
  --mutants gluon_o_via_kv_set0_writes_the_v_slot,gluon_o_via_kv_store_from_qs > $OUT/ostage3_mutants.txt 2>&1; echo "mutants rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/gm/gluon_gpucheck.json $OUT/ostage3_mutants.json 2>/dev/null
cut -c1-300 $OUT/ostage3_mutants.txt | tail -5
