#!/usr/bin/env bash
# device call 2 (run 17): the Gluon mutants run 16 and call 1 did not reach, in two sequential streams side by side
# (the decode spec's, and the rest), each child in a Triton cache of its own
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
A=gluon_persistent_q_phase_stuck,gluon_causal_bound_a_key_late,gluon_ostage_rows_of_one_warpgroup,gluon_ostage2_stores_the_other_warpgroups_rows,gluon_three_sets_mask_a_tile_late,gluon_three_sets_causal_bound_a_key_late,gluon_three_sets_q_boxes_at_one_row
B=gluon_decode_split_ends_a_tile_early,gluon_decode_packed_row_head_lost,gluon_decode_one_split_for_every_count,gluon_decode_merge_rescale_dropped,gluon_decode_merge_a_split_early,gluon_decode_merge_counter_kept
(timeout 570 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gmA --phase mutants --mutants $A > $OUT/mutants-a.txt 2>&1; echo "A rc $? $(( $(date +%s) - t0 )) s") &
(timeout 570 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gmB --phase mutants --mutants $B > $OUT/mutants-b.txt 2>&1; echo "B rc $? $(( $(date +%s) - t0 )) s") &
wait
cp /tmp/gmA/gluon_gpucheck.json $OUT/mutants-a.json 2>/dev/null; cp /tmp/gmB/gluon_gpucheck.json $OUT/mutants-b.json 2>/dev/null
cut -c1-200 $OUT/mutants-a.txt $OUT/mutants-b.txt
