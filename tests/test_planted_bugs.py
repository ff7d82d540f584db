"""Verification catches planted bugs in generated Triton source.

The translator's module for a planned causal GQA spec (bf16, D = 64, BM = BN = 16) is edited as
text into three wrong kernels, each a classic FlashAttention mistake. ``attnforge.verify.verify``
must fail every one of them on small shapes, and pass the unmutated module on the same shapes, so
a failure is the bug's doing and not the shapes'.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.plan.builtin import plan
from attnforge.spec import AttentionSpec
from attnforge.targets import get_target
from attnforge.tl import harness
from attnforge.backends.triton import translate
from attnforge.verify import CaseShape, verify

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")

SPEC = AttentionSpec(batch=1, heads=4, kv_heads=2, seqlen_q=53, seqlen_k=67, head_dim=64, dtype="bf16", causal=True)
PARAMS = {"BM": 16, "BN": 16}
BN = PARAMS["BN"]

# Odd lengths with ragged tails, Sq < Sk and Sq > Sk (rows with no visible key), GQA and MQA, both
# layouts; every shape has Sk >= 3 * BN, so rows see several K/V tiles and a rescale matters.
SHAPES = [
    CaseShape(1, 4, 2, 37, 3 * BN + 5),
    CaseShape(1, 2, 1, 53, 67, "bshd"),
    CaseShape(2, 4, 2, 61, 3 * BN + 1),
]
assert all(s.Sk >= 3 * BN for s in SHAPES)

# name -> (text in the generated module, what the bug puts there), replaced wherever it occurs,
# as a translator bug would be (the rescale is in both K/V loops: the off-diagonal and the masked
# one). The test asserts that ``old`` occurs, so a translator change that renames things fails
# loudly here instead of silently testing an unmutated kernel.
MUTATIONS: dict[str, tuple[str, str]] = {
    # (a) Off-by-one causal mask: ``kv_idx < diag`` instead of ``kv_idx <= diag`` drops the diagonal
    # key, so the first visible row of every head sees nothing and each other row loses one key.
    "off_by_one_causal": (
        "(Ks_rows[None, :] <= ((Qs_rows[:, None] + Sk) - Sq))",
        "(Ks_rows[None, :] < ((Qs_rows[:, None] + Sk) - Sq))",
    ),
    # (b) Missing rescale: the online softmax raises the running max but leaves the accumulator
    # scaled by the old one, so the output of every row that sees a larger score in a later K/V
    # tile is too large (l_i is still rescaled; O / l is wrong).
    "missing_rescale": (
        "        O_acc = O_acc * m_i_alpha[:, None]\n",
        "",
    ),
    # (c) Unwritten tail: the store of O is masked one row short, so the last query row of each
    # (batch, head) keeps the NaN the verifier poisoned it with.
    "unwritten_tail": (
        "mask=(O_rows < Sq)[:, None]",
        "mask=(O_rows < Sq - 1)[:, None]",
    ),
}


@pytest.fixture(scope="module")
def base_source() -> str:
    pl = plan(SPEC, get_target("h100"))
    assert pl.kind == "prefill"
    program = harness.specialize(pl.program, params=PARAMS)
    return translate(program, head_dim=SPEC.head_dim, head_dim_v=SPEC.head_dim_v).source


def load(source: str, directory: Path) -> GeneratedKernel:
    path = directory / "kernel_triton.py"
    path.write_text(source)
    return GeneratedKernel(path, interpret=True)


def describe(record) -> str:
    return "; ".join(f"{c.shape}: O {c.err_o:.2e}/{c.tol_o:.0e} LSE {c.err_lse:.2e}/{c.tol_lse:.0e}" + (f" {c.error}" if c.error else "")
                     for c in record.cases)


def test_unmutated_source_passes(base_source, tmp_path):
    record = verify(load(base_source, tmp_path), SPEC, PARAMS, shapes=SHAPES)
    assert len(record.cases) == len(SHAPES)
    assert record.passed, describe(record)


@pytest.mark.parametrize("bug", sorted(MUTATIONS))
def test_planted_bug_fails_verification(bug, base_source, tmp_path):
    old, new = MUTATIONS[bug]
    assert base_source.count(old) >= 1, f"{bug}: {old!r} is not in the generated source"
    mutated = base_source.replace(old, new)
    assert mutated != base_source
    compile(mutated, f"{bug}.py", "exec")  # still a valid module: the bug is in what it computes
    record = verify(load(mutated, tmp_path), SPEC, PARAMS, shapes=SHAPES)
    assert len(record.cases) == len(SHAPES)
    assert not record.passed, f"{bug} was not caught: {describe(record)}"
    assert all(c.error is None for c in record.cases), "the mutant should run and compute a wrong answer, not crash"
    # every bug here is visible on each shape, not just on one lucky case
    assert not any(c.passed for c in record.cases), describe(record)


def test_unwritten_tail_leaves_nan_and_fails_with_infinite_error(base_source, tmp_path):
    old, new = MUTATIONS["unwritten_tail"]
    record = verify(load(base_source.replace(old, new), tmp_path), SPEC, PARAMS, shapes=SHAPES[:1])
    assert record.cases[0].err_o == float("inf")


def test_missing_rescale_needs_several_kv_tiles(base_source, tmp_path):
    """With a single K/V tile there is nothing to rescale: the bug is invisible, which is why SHAPES
    all have Sk >= 3 * BN."""
    old, new = MUTATIONS["missing_rescale"]
    record = verify(load(base_source.replace(old, new), tmp_path), SPEC, PARAMS,
                    shapes=[CaseShape(1, 4, 2, 9, BN - 3), CaseShape(1, 2, 1, 13, BN)])
    assert record.passed, describe(record)
