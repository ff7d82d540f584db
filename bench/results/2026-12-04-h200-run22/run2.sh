#!/usr/bin/env bash
# Run 22 call 2 (issue 13): the three four-warpgroup Gluon mutants (spec hopper_four_sets) and their control, natively.
# On the H200 from the repository root, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 420 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants \
  --mutants gluon_four_sets_mask_a_tile_late,gluon_four_sets_q_boxes_at_one_row,gluon_four_sets_o_rows_of_one_warpgroup \
  > $OUT/four_sets_mutants.txt 2>&1; echo "rc $?"
cp /tmp/gm/*.json $OUT/ 2>/dev/null
cut -c1-300 $OUT/four_sets_mutants.txt | tail -12
