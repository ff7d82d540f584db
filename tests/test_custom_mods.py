"""Custom score and mask modifiers: written once as expressions, checked, interpreted and verified."""

from __future__ import annotations

import pytest

from attnforge.spec import AttentionSpec
from attnforge.tl import catalog, check, parse, print_program
from attnforge.tl.harness import Shape, run_and_compare

SCORE = "score + 0.25 * (kv_idx - q_idx) / Sk * (h + 1)"
MASK = "(q_idx + kv_idx) % 3 != 1 or kv_idx == 0"


def custom_program(score: str = SCORE, mask: str = MASK, declared_score: str = SCORE, declared_mask: str = MASK):
    text = catalog.source("gqa_fwd")
    text = text.replace("target sm_90\n", f"target sm_90\ncomputes score_mod = ({declared_score}), mask_mod = ({declared_mask})\n")
    text = text.replace("    Compute Mask S keep kv_idx < Sk\n", f"    Compute ScoreMod S with {score}\n    Compute Mask S keep kv_idx < Sk and ({mask})\n")
    return parse(text)


def test_spec_modifiers_are_valid_tl_expressions():
    # The same text is a valid AttentionSpec field and a valid TL expression over the same names.
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=16, score_mod=SCORE, mask_mod=MASK)
    program = custom_program(spec.score_mod, spec.mask_mod, spec.score_mod, spec.mask_mod)
    assert check(program, "h100").ok
    assert parse(print_program(program)) == program


@pytest.mark.parametrize("shape", ["1,4,2,37,53,16", "2,2,1,1,70,32", "1,8,2,70,9,16,24"])
def test_custom_modifiers_verify_exactly(shape):
    report = run_and_compare(custom_program(), Shape.parse(shape), params={"BM": 16, "BN": 16})
    assert report.passed, report.line()


def test_a_kernel_that_does_not_apply_its_declared_modifier_fails():
    wrong_score = custom_program(score="score")
    report = run_and_compare(wrong_score, Shape.parse("1,4,2,37,53,16"), params={"BM": 16, "BN": 16})
    assert not report.passed and report.err_o > 1e-3
    wrong_mask = custom_program(mask="kv_idx >= 0")
    report = run_and_compare(wrong_mask, Shape.parse("1,4,2,37,53,16"), params={"BM": 16, "BN": 16})
    assert not report.passed and report.err_o > 1e-3


def test_checker_rejects_modifiers_that_read_unknown_names_or_have_the_wrong_kind():
    codes = {f.code for f in check(custom_program(declared_score="score + window_left"), "h100").errors}
    assert "TL203" in codes
    codes = {f.code for f in check(custom_program(declared_mask="kv_idx + 1"), "h100").errors}
    assert "TL310" in codes
    codes = {f.code for f in check(custom_program(score="kv_idx < q_idx"), "h100").errors}
    assert "TL310" in codes
