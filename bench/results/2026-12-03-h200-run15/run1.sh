#!/usr/bin/env bash
# device call 1 (run 15): verify what stop 30 changed: the Gluon grid (three-warpgroup rows, decode with hot slices), the five
# Gluon mutants whose kernels moved, the CUDA gate (decode with hot slices); all three side by side (no timing in this call)
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.backends.cudnn.version())"
t0=$(date +%s)
(JOBS=7 timeout 420 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid.txt 2>&1; echo "grid done $(( $(date +%s) - t0 )) s") &
(timeout 420 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants --mutants gluon_first_turn_never_passed,gluon_ostage2_stores_the_other_warpgroups_rows,gluon_three_sets_mask_a_tile_late,gluon_three_sets_q_boxes_at_one_row,gluon_three_sets_causal_bound_a_key_late > $OUT/gluon_mutants.txt 2>&1; echo "gluon mutants rc $? $(( $(date +%s) - t0 )) s") &
(timeout 420 python3 -m attnforge.backends.cuda.gpucheck --out /tmp/gc --phase verify --budget 300 > $OUT/cuda_verify.txt 2>&1; echo "cuda verify rc $? $(( $(date +%s) - t0 )) s") &
wait
for f in /tmp/grid/*.log; do n=$(basename $f .log); grep -q PASS /tmp/grid/$n.status 2>/dev/null || cp $f $OUT/fail_$n.log; done
tail -3 $OUT/grid.txt; grep '^FAIL' $OUT/grid.txt
tail -12 $OUT/gluon_mutants.txt | cut -c1-250
tail -8 $OUT/cuda_verify.txt | cut -c1-250
