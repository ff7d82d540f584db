#!/usr/bin/env bash
# device call 7 (run 18): the other two mutants planted in the persistent D = 64 causal kernel, whose base has qreg = 1 since this stop
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 280 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants --mutants gluon_persistent_ring_restarts,gluon_ostage_rows_of_one_warpgroup > $OUT/gluon_mutants.txt 2>&1; echo "gluon mutants rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/gm/gluon_gpucheck.json $OUT/mutants.json 2>/dev/null
tail -5 $OUT/gluon_mutants.txt | cut -c1-250
