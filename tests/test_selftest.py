"""The mutation suite in CI: every planted bug is killed by some step of the gate, in the interpreter."""

from __future__ import annotations

import re

from attnforge.cli import main
from attnforge.selftest import MUTANTS


def test_selftest_quick_kills_every_non_equivalent_mutant(capsys):
    code = main(["selftest", "--quick", "--jobs", "2"])
    out = capsys.readouterr().out
    real = sum(1 for m in MUTANTS if not m.equivalent)
    assert code == 0, out
    assert re.search(rf"^mutants: {real} of {real} killed", out.strip().splitlines()[-1]), out
    assert "SURVIVED" not in out and "FAIL" not in out


def test_the_suite_covers_the_kinds_of_bug_the_gate_must_see():
    assert len(MUTANTS) >= 20
    names = {m.name for m in MUTANTS}
    for needed in ("causal_alignment_swapped", "window_left_off_by_one", "gqa_map_changed", "o_strides_swapped", "lse_not_stored",
                   "rows_past_sq_written", "rescale_dropped", "normalize_dropped", "decode_combine_weights_dropped",
                   "causal_split_plus_one", "exp_for_exp2", "tma_box_wrong", "kv_loop_end_minus_one", "accumulator_rounded_to_bf16",
                   "hopper_k_wait_dropped", "hopper_free_wait_wrong_phase", "hopper_v_stage_wrong", "hopper_slot_released_early"):
        assert needed in names
    assert {m.where for m in MUTANTS} == {"tl", "kernel", "model"}


def test_a_selftest_base_follows_its_spec_plan():
    """SPEC_PLAN's parameters decide the selftest's base as they do the GPU check's (the 'hopper' spec: the two-warpgroup
    kernel, no longer the planner's first choice there), so its TL mutants keep the kernel they were written for."""
    from attnforge.selftest.mutants import SPEC_PLAN
    from attnforge.selftest.run import _planned

    assert _planned("causal") is True
    chosen = _planned("hopper")
    assert all(chosen.params[k] == v for k, v in SPEC_PLAN["hopper"].items()) and {"BN", "stages"} <= set(chosen.params)
