#!/usr/bin/env bash
# device call 1 (run 16): chain = 1 verified (the gluon grid, the A/B tool's gate, the two chain mutants), then timed against
# the shipped D = 64 kernels
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.backends.cudnn.version())"
t0=$(date +%s)
(JOBS=6 timeout 330 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid.txt 2>&1; echo "grid done $(( $(date +%s) - t0 )) s") &
(timeout 330 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants --mutants gluon_chain_next_q_from_this_tiles_slots,gluon_chain_next_q_wait_a_phase_early > $OUT/gluon_mutants.txt 2>&1; echo "gluon mutants rc $? $(( $(date +%s) - t0 )) s") &
wait
for f in /tmp/grid/*.log; do n=$(basename $f .log); grep -q PASS /tmp/grid/$n.status 2>/dev/null || cp $f $OUT/fail_$n.log; done
echo "A/B start $(( $(date +%s) - t0 )) s"
timeout $(( 540 - ($(date +%s) - t0) )) python3 bench/gluon_persistent.py --out /tmp/ab --rows d64-s1k-full,d64-s4k-full,d64-s16k-full --variants chain=1 chain=1,BM=128,warps=8 --jobs 10 --rounds 3 > $OUT/ab.txt 2>&1
cp /tmp/ab/*.json $OUT/ 2>/dev/null
echo "end $(( $(date +%s) - t0 )) s"
tail -3 $OUT/grid.txt; grep '^FAIL' $OUT/grid.txt
tail -8 $OUT/gluon_mutants.txt | cut -c1-250
grep -v "^PASS" $OUT/ab.txt | tail -25 | cut -c1-250
