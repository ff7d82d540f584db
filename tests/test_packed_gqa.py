"""Packed GQA (issue 11, item 3): a TL view that packs the query heads of a K/V group, and their
positions, into the rows of one tile (``Allocate ... pack P``, docs/TL.md section 5.1).

The programs check clean and interpret exactly against the float64 reference for group sizes 1,
2, 4, 8, 16 and Sq 1..16 with causal, window, ALiBi, softcap and modifiers that read the head;
the planner packs decode and small-Sq prefill when G > 1 (and only then); the Triton translation of
the planned kernels runs correctly in Triton's CPU interpreter; malformed packed views get precise
findings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnforge.backends.triton import translate
from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.errors import TLRuntimeError
from attnforge.plan.builtin import PACK_MAX_SQ, packed_decode_source, packs_gqa, plan
from attnforge.selftest.mutants import MUTANTS, SPECS
from attnforge.spec import AttentionSpec
from attnforge.targets import get_target
from attnforge.tl import catalog, harness
from attnforge.tl.checker import check
from attnforge.tl.harness import Shape, run_and_compare
from attnforge.tl.parser import parse
from attnforge.tl.printer import print_program
from attnforge.verify import CaseShape, verify

H100 = get_target("h100")
# Triton's interpreter converts 1-element arrays to ints the way numpy >= 1.25 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")

# Feature sets of the packed programs: every mask and modifier that depends on a row's position
# (causal, window) or head (ALiBi, score_mod / mask_mod reading h), softcap, and none.
VARIANTS: dict[str, dict] = {
    "plain": {},
    "causal": dict(causal=True),
    "causal_window": dict(causal=True, window_left=5),
    "window_two_sided": dict(window_left=4, window_right=2),
    "alibi_softcap_causal": dict(causal=True, alibi_slopes="auto", softcap=2.0),
    "mods_by_head": dict(score_mod="score - 0.125 * h * abs(q_idx - kv_idx)", mask_mod="(kv_idx + h) % 3 != 0"),
    "top_left": dict(causal=True, causal_align="top_left"),
}
WINDOW = {"window_left": 5, "window_right": 2}  # narrow windows, so the bounds bite on small Sk


def packed_program(variant: str):
    """The planner's packed split-KV program for ``variant`` (its Sq, G and split count are runtime values)."""
    spec = AttentionSpec(heads=8, kv_heads=2, seqlen_q=3, seqlen_k=64, head_dim=16, dtype="bf16", **VARIANTS[variant])
    return parse(packed_decode_source(spec, H100, dict(BM=16, BN=16, warps=4, stages=2)), file=f"{variant}.tl")


@pytest.fixture(scope="module")
def programs():
    return {name: packed_program(name) for name in VARIANTS}


def test_packed_programs_check_clean(programs):
    for name, program in programs.items():
        result = check(program, H100, head_dim=128)
        assert result.ok and not [f for f in result.findings if f.severity != "info"], (name, [str(f) for f in result.findings])
        assert " pack Hq // Hkv" in print_program(program)
    assert "alibi_slopes[h_idx]" in print_program(programs["alibi_softcap_causal"])
    assert "0.125 * h_idx" in print_program(programs["mods_by_head"]) and "(kv_idx + h_idx) % 3" in print_program(programs["mods_by_head"])


# Every group size and every Sq in 1..16, each (G, Sq) once, the feature sets rotated over them;
# BM 16, 32, 64 rotated too (several row blocks, and blocks wider than the group's rows); Sk below
# Sq in some cases, so bottom-right causal rows see no key at all.
GRID = [(g, sq) for g in (1, 2, 4, 8, 16) for sq in range(1, 17)]


def _case(i: int, g: int, sq: int) -> tuple[str, Shape, dict]:
    variant = list(VARIANTS)[i % len(VARIANTS)]
    hkv = 2 if g <= 4 else 1  # two K/V heads where the group allows it, so a wrong group shows
    sk = max(1, sq // 2) if i % 5 == 3 else 9 + 3 * sq + i % 7
    bm = (16, 32, 64)[i % 3]
    # the split count: the interpreter's launch rule every fourth case, else fixed at 1, 2 or 3
    splits = {} if i % 4 == 0 else {"NSPLIT": 1 + i % 3}
    return variant, Shape(1, g * hkv, hkv, sq, sk, 16, 8 if i % 4 == 1 else 16), {"BM": bm, **splits}


@pytest.mark.parametrize("g", (1, 2, 4, 8, 16))
def test_packed_programs_interpret_exactly(programs, g):
    for i, (gg, sq) in enumerate(GRID):
        if gg != g:
            continue
        variant, shape, params = _case(i, g, sq)
        declared = {name for k in programs[variant].kernels for name in k.scalars}
        scalars = {k: v for k, v in WINDOW.items() if k in declared}
        report = run_and_compare(programs[variant], shape, params=params, scalars=scalars, seed=i)
        assert report.passed and report.err_o <= 1e-10 and report.err_lse <= 1e-10, f"{variant} {params}: {report.line()}"


def test_library_packed_program_matches_decode_split_kv_numbers():
    """The shipped packed program and the one-head-per-program decode give the same rows."""
    packed, plain = catalog.load("decode_packed_gqa"), catalog.load("decode_split_kv")
    assert check(packed, H100).ok
    for shape in ("1,8,2,1,77,16", "2,12,3,5,40,16,8", "1,16,1,16,33,16"):
        a = run_and_compare(packed, Shape.parse(shape), params={"BN": 16, "NSPLIT": 3})
        assert a.passed, a.line()
    b = run_and_compare(plain, Shape.parse("1,8,2,1,77,16"), params={"BN": 16, "NSPLIT": 3})
    assert b.passed  # the same reference: both programs are judged by it


# ------------------------------------------------------------------------------ the planner

def test_planner_packs_decode_and_small_sq_when_grouped():
    for sq in (1, 2, 9, PACK_MAX_SQ):
        spec = AttentionSpec(batch=4, heads=32, kv_heads=8, seqlen_q=sq, seqlen_k=4096, head_dim=128, dtype="bf16", causal=True)
        assert packs_gqa(spec)
        pl = plan(spec, H100)
        assert pl.kind == "decode" and "pack Hq // Hkv" in pl.source and "grid b : B, hk : Hkv, s : NSPLIT" in pl.source
        assert pl.params["BM"] == min(64, max(16, 1 << (4 * sq - 1).bit_length()))
        assert "cdiv((m + 1) * BM, Hq // Hkv)" in pl.source  # the block's last position bounds the causal loop
    for fields in (dict(heads=32, kv_heads=32, seqlen_q=1), dict(heads=32, kv_heads=8, seqlen_q=PACK_MAX_SQ + 1)):
        spec = AttentionSpec(seqlen_k=4096, head_dim=128, dtype="bf16", **fields)
        assert not packs_gqa(spec) and " pack " not in plan(spec, H100).source


def test_planner_splits_packed_programs_over_the_sms():
    """B * Hkv * NSPLIT programs (not B * Hq): fewer programs per split, so more splits; the count
    is chosen at launch, and the plan's reason says what the rule gives for the spec's sizes."""
    spec = AttentionSpec(batch=8, heads=32, kv_heads=8, seqlen_q=1, seqlen_k=32768, head_dim=128, dtype="bf16")
    pl = plan(spec, H100)
    assert "NSPLIT" not in pl.params and pl.params["BM"] == 16
    assert pl.source.count("launch NSPLIT = splits(B * Hkv * cdiv(Hq // Hkv * Sq, BM), cdiv(Sk, BN))") == 2
    assert "NSPLIT=8 at B=8, Sk=32768 on h100's 132 SMs" in pl.reasons[0]


# ------------------------------------------------------------------------------ Triton, in its interpreter

def planned_kernel(spec: AttentionSpec, tmp_path: Path, **params: int) -> tuple[GeneratedKernel, dict]:
    pl = plan(spec, H100)
    assert " pack Hq // Hkv" in pl.source
    program = harness.specialize(pl.program, params={"BN": 16, **params})
    module = translate(program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v)
    assert "_pos = " in module.source and "_slot = " in module.source
    path = tmp_path / "kernel_triton.py"
    path.write_text(module.source)
    return GeneratedKernel(path, interpret=True), {**pl.params, "BN": 16, **params}


TRITON_CASES = {
    # decode (Sq = 1): ALiBi slopes per packed row, causal, a modifier reading the head
    "decode_alibi_causal_mod": (  # the split count chosen at launch: 2, 4 (one split empty) and 2 in the interpreter
        dict(batch=2, heads=8, kv_heads=2, seqlen_q=1, seqlen_k=90, head_dim=32, dtype="bf16", causal=True, alibi_slopes="auto",
             mask_mod="h != 5"),
        dict(),
        [CaseShape(2, 8, 2, 1, 90), CaseShape(1, 12, 3, 1, 37, "bshd"), CaseShape(1, 4, 4, 3, 20)],
    ),
    # a launch of one split (8 programs fill the interpreter's 4 SMs twice over): the partial kernel alone stores into
    # o and lse (a BSHD o too: its views keep o's strides); the 2-program shape takes several splits and the merge
    "decode_one_split": (
        dict(batch=4, heads=8, kv_heads=2, seqlen_q=1, seqlen_k=40, head_dim=32, dtype="bf16"),
        dict(),
        [CaseShape(4, 8, 2, 1, 40), CaseShape(4, 8, 2, 1, 40, "bshd"), CaseShape(1, 8, 2, 1, 40)],
    ),
    # speculative decoding (Sq = 5, G = 4): positions per packed row under a causal window and softcap
    "small_sq_window_softcap": (  # the split count fixed at compile time
        dict(heads=8, kv_heads=2, seqlen_q=5, seqlen_k=70, head_dim=40, dtype="fp16", causal=True, window_left=21, softcap=2.0),
        dict(NSPLIT=2),
        [CaseShape(1, 8, 2, 5, 70), CaseShape(1, 16, 1, 7, 43, "bshd"), CaseShape(1, 6, 2, 9, 4)],
    ),
}


@pytest.mark.parametrize("name", sorted(TRITON_CASES))
def test_planned_packed_kernel_in_triton_interpreter(name, tmp_path):
    fields, params, shapes = TRITON_CASES[name]
    spec = AttentionSpec(**fields)
    kernel, all_params = planned_kernel(spec, tmp_path, **params)
    record = verify(kernel, spec, all_params, shapes=shapes)
    assert record.passed, "\n".join(f"{c.shape}: err(O)={c.err_o:.3e}/{c.tol_o:.0e} err(LSE)={c.err_lse:.3e} {c.error or ''}" for c in record.cases)


def test_packed_views_are_not_read_through_tma():
    spec = AttentionSpec(heads=8, kv_heads=2, seqlen_q=1, seqlen_k=512, head_dim=64, dtype="bf16")
    pl = plan(spec, H100)
    assert pl.params.get("tma") == 1
    source = translate(pl.program, head_dim=64).source
    assert "k_desc.load(" in source and "q_desc" not in source
    assert "tl.cast(Qs_slot, tl.int64)[:, None] * stride_q1 + Qs_pos[:, None] * stride_q2" in source


# ------------------------------------------------------------------------------ the language

LIB = catalog.source("decode_packed_gqa")
Q_VIEW = "Allocate Q in global (Hq // Hkv * Sq, D) at q[b, hk * (Hq // Hkv)] pack Hq // Hkv"
O_VIEW = "Allocate O_s in global (Hq // Hkv * Sq, Dv) at o_part[b, s, hk * (Hq // Hkv)] pack Hq // Hkv"


def _line_col(text: str, needle: str) -> tuple[int, int]:
    i = text.index(needle)
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


def _findings(text: str, code: str):
    return [f for f in check(parse(text), H100).findings if f.code == code]


def test_pack_round_trips_and_keeps_its_keyword_contextual():
    program = parse(LIB)
    assert parse(print_program(program)) == program
    view = program.kernels[0].body[0]
    assert view.pack is not None and print_program(program).count(" pack Hq // Hkv") == 7
    assert parse("kernel k\nAllocate pack in global (Sq, D) at q[b, pack] pack pack\n").kernels[0].body[0].name == "pack"


@pytest.mark.parametrize("new, at, words", [
    # the first dimension is not P times the packed one (reported at that dimension)
    ("Allocate Q in global (Sq, D) at q[b, hk * (Hq // Hkv)] pack Hq // Hkv", "Sq, D)", ("its first dimension is 3000, not Sq = 1000",)),
    # heads of two K/V groups in one packed tile (at the pack factor)
    ("Allocate Q in global (2 * Sq, D) at q[b, hk * 2] pack 2", "2\n", ("query heads 0..1 of q, which read different K/V heads", "Hq // Hkv = 3")),
    # the slices leave the tensor in the last program instance (at the offset)
    ("Allocate Q in global (Hq // Hkv * Sq, D) at q[b, hk * (Hq // Hkv) + 1] pack Hq // Hkv", "hk * (Hq // Hkv) + 1]",
     ("= 9..10 of dimension 1 of q (Hq = 10), which leave the tensor in the last program instance",)),
    ("Allocate Q in global (Hq // Hkv * Sq, D) at q[b, hk * (Hq // Hkv)] pack 0", "0\n", ("pack factor 0 is not positive",)),
])
def test_malformed_packed_view_is_refused_precisely(new, at, words):
    text = LIB.replace(Q_VIEW, new, 1)
    line, col = _line_col(text, new)
    where = (line, col + (new.rindex(at.rstrip()) if at.endswith("\n") else new.index(at)))  # "X\n": X at the end of the line
    found = [f for f in _findings(text, "TL313") if (f.line, f.col) == where]
    assert found, [str(f) for f in check(parse(text), H100).findings]
    assert all(w in found[0].message for w in words), found[0].message
    assert found[0].severity == "error" and "Hq // Hkv" in found[0].hint  # the hint shows the right view


def test_packed_rows_stored_into_a_plain_view_are_refused():
    text = LIB.replace(O_VIEW, "Allocate O_s in global (Sq, Dv) at o_part[b, s, hk * (Hq // Hkv)]", 1)
    [f] = _findings(text, "TL413")
    assert (f.line, f.col) == _line_col(text, "Copy O_r (BM, Dv) at [m, 0] from register to global O_s")
    assert "packed rows" in f.message and "r % 3" in f.message and "pack Hq // Hkv" in f.hint


def test_h_idx_needs_packed_rows():
    text = catalog.source("alibi_causal_fwd").replace("alibi_slopes[h]", "alibi_slopes[h_idx]")
    [f] = _findings(text, "TL203")
    assert "h_idx" in f.message and "packed view" in f.hint
    assert (f.line, f.col) == _line_col(text, "score - alibi_slopes[h_idx]")  # at the ScoreMod's expression


def test_interpreter_refuses_a_packed_view_outside_the_tensor():
    text = LIB.replace(Q_VIEW, "Allocate Q in global (Hq // Hkv * Sq, D) at q[b, hk * (Hq // Hkv) + 1] pack Hq // Hkv", 1)
    with pytest.raises(TLRuntimeError, match="packed slices"):
        run_and_compare(parse(text), Shape.parse("1,4,2,1,20,16"), params={"BN": 16})


# ------------------------------------------------------------------------------ the mutation suite

def test_packed_mutants_apply_to_the_planned_programs():
    packed = [m for m in MUTANTS if m.name.startswith("packed_")]
    assert len(packed) >= 3 and {m.where for m in packed} == {"tl", "kernel"}
    for m in packed:
        spec, target = SPECS[m.spec]
        assert packs_gqa(spec)
        pl = plan(spec, get_target(target))
        text = pl.source if m.where == "tl" else translate(pl.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
        assert m.apply(text) != text and not m.equivalent
