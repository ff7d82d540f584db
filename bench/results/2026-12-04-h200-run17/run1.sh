#!/usr/bin/env bash
# device call 1 (run 17): D = 256 persistent without overlap / with O from registers, A/B against the shipped kernels;
# then the Gluon mutants that run 16 did not reach, in the time left
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.backends.cudnn.version())"
t0=$(date +%s)
timeout 330 python3 bench/gluon_persistent.py --out /tmp/ab --rows d256-s1k,d256-s4k --variants persistent=1,ostage=0 persistent=1,overlap=0 --jobs 12 --rounds 3 > $OUT/ab.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json $OUT/ 2>/dev/null
M=gluon_first_turn_never_passed,gluon_softmax_max_units_mixed,gluon_persistent_ring_restarts,gluon_persistent_q_phase_stuck,gluon_causal_bound_a_key_late,gluon_ostage_rows_of_one_warpgroup,gluon_ostage2_stores_the_other_warpgroups_rows,gluon_three_sets_mask_a_tile_late,gluon_three_sets_causal_bound_a_key_late,gluon_three_sets_q_boxes_at_one_row
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants --mutants $M > $OUT/gluon_mutants.txt 2>&1
echo "mutants rc $? end $(( $(date +%s) - t0 )) s"
grep -v "^PASS" $OUT/ab.txt | tail -25 | cut -c1-250
cut -c1-200 $OUT/gluon_mutants.txt | tail -20
