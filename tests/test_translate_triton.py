"""Stage 2 (TL -> Triton) against the float64 reference, run on CPU in Triton's interpreter.

Every generated module is written to pytest's tmp_path and loaded with
``GeneratedKernel(path, interpret=True)``. Tiles are shrunk to 16 rows (BM = BN = 16) and shapes
stay small with odd lengths, so that several query blocks and K/V tiles with ragged tails run in
a few seconds per case.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnforge.errors import Position, TranslateError
from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.plan.builtin import plan
from attnforge.reference import lse_error, relative_error
from attnforge.spec import AttentionSpec, alibi_slopes_for
from attnforge.targets import get_target
from attnforge.tl import catalog, harness
from attnforge.tl import nodes as n
from attnforge.tl.parser import parse
from attnforge.tl.printer import print_program
from attnforge.backends.triton import translate
from attnforge.dtypes import torch_dtype
from attnforge.numerics import O_TOLERANCE, lse_tolerance, scale_hot_rows
from attnforge.verify import CaseShape, verify

H100 = get_target("h100")
DTYPES = ("fp16", "bf16", "fp32")
HEAD_DIMS = (32, 40, 64, 96, 128, 192, 256)
# The Hopper form (roles, barriers, TMA copies) is the gluon backend's; Triton refuses it (test below).
HOPPER_PROGRAMS = tuple(name for name in catalog.programs() if any(n.hopper_statement(k) for k in catalog.load(name).kernels))
PROGRAMS = tuple(name for name in catalog.programs() if name not in HOPPER_PROGRAMS)
SMALL_TILES = {"BM": 16, "BN": 16}
# Triton's interpreter converts 1-element arrays to ints the way numpy >= 1.25 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")
TL_STATEMENT = re.compile(r"^\s*(Allocate|Copy|Compute|Reshape|for|end)\b")


# ------------------------------------------------------------------------------ helpers

def small_params(program_name: str) -> dict[str, int]:
    """BM = BN = 16; the decode program already has BM = 16 and only its BN shrinks."""
    return {"BN": 16} if program_name.startswith("decode") else dict(SMALL_TILES)


def load_module(source: str, tmp_path: Path, name: str = "kernel_triton.py") -> GeneratedKernel:
    path = tmp_path / name
    path.write_text(source)
    return GeneratedKernel(path, interpret=True)


def make_input(gen: torch.Generator, B: int, H: int, S: int, D: int, dtype: torch.dtype, layout: str, hot: bool = False) -> torch.Tensor:
    """A BHSD-indexed tensor; ``bshd``: made (B, S, H, D) contiguous and passed as a transposed view."""
    if layout == "bshd":
        x = torch.randn(B, S, H, D, generator=gen, dtype=torch.float64).transpose(1, 2)
    else:
        x = torch.randn(B, H, S, D, generator=gen, dtype=torch.float64)
    if hot:  # logits near +-1000: a kernel that skips the running-max subtraction overflows
        scale_hot_rows(x)
    return x.to(dtype)


def poisoned(B: int, H: int, S: int, D: int, dtype: torch.dtype, layout: str) -> torch.Tensor:
    if layout == "bshd":
        return torch.full((B, S, H, D), math.nan, dtype=dtype).transpose(1, 2)
    return torch.full((B, H, S, D), math.nan, dtype=dtype)


def run_program(program, shape: harness.Shape, dtype: str, layout: str, tmp_path: Path, seed: int = 0) -> tuple[float, float]:
    """Translate ``program`` (already specialised), run it in the interpreter, return (err O, err LSE)."""
    module = translate(program, head_dim=shape.D, head_dim_v=shape.Dv)
    kernel = load_module(module.source, tmp_path)
    tdtype = torch_dtype(dtype)
    gen = torch.Generator().manual_seed(seed)
    q = make_input(gen, shape.B, shape.Hq, shape.Sq, shape.D, tdtype, layout, hot=True)
    k = make_input(gen, shape.B, shape.Hkv, shape.Sk, shape.D, tdtype, layout)
    v = make_input(gen, shape.B, shape.Hkv, shape.Sk, shape.Dv, tdtype, layout)
    if layout == "bshd":
        assert q.stride(1) == shape.D and q.stride(2) == shape.Hq * shape.D  # heads inside the sequence stride
    o = poisoned(shape.B, shape.Hq, shape.Sq, shape.Dv, tdtype, layout)
    lse = torch.full((shape.B, shape.Hq, shape.Sq), math.nan, dtype=torch.float32)
    scalars = harness.default_scalars(program, shape)
    slopes = np.array(alibi_slopes_for(shape.Hq))
    arguments = {**scalars, "alibi_slopes": torch.tensor(slopes, dtype=torch.float32)}
    kernel.launch(q, k, v, o, lse, **{name: value for name, value in arguments.items() if name in kernel.accepts})
    ref_o, ref_lse = harness.reference_for(program, shape, *(t.double().numpy() for t in (q, k, v)), scalars, slopes)
    return relative_error(o.double().numpy(), ref_o), lse_error(lse.double().numpy(), ref_lse)


# ------------------------------------------------------------------------------ canonical programs
# Each program runs 7 cases: every head dim once, dtypes rotated so each program sees all three
# (the rotation is offset per program, so each (program, dtype) pair meets different head dims).
# Every third case has Dv != D; odd cases use BSHD strides.

PREFILL_SHAPES = [  # (B, Hq, Hkv, Sq, Sk)
    (1, 4, 2, 37, 53),
    (2, 2, 1, 45, 19),  # Sq > Sk: rows with no visible key under bottom-right causal
    (1, 3, 3, 33, 67),
    (2, 8, 2, 17, 17),
    (1, 6, 2, 1, 49),  # one query row
    (1, 2, 2, 70, 99),
    (2, 4, 4, 29, 31),
]
DECODE_SHAPES = [  # Sq = 1 (and a few queries); the launch-time split count takes 1, 2 and 4 splits over them
    (2, 4, 2, 1, 83),
    (1, 8, 2, 3, 99),
    (1, 2, 1, 1, 1),
    (2, 4, 4, 5, 37),
    (1, 4, 1, 1, 50),  # MQA
    (1, 6, 3, 2, 17),
    (2, 2, 2, 1, 96),
]


def _catalog_cases():
    cases = []
    for p, name in enumerate(PROGRAMS):
        shapes = DECODE_SHAPES if name.startswith("decode") else PREFILL_SHAPES
        for i, d in enumerate(HEAD_DIMS):
            dtype = DTYPES[(p + i) % 3]
            dv = HEAD_DIMS[(i + 3) % len(HEAD_DIMS)] if i % 3 == 2 else d
            layout = "bshd" if i % 2 else "bhsd"
            cases.append(pytest.param(name, dtype, d, dv, shapes[(i + p) % len(shapes)], layout,
                                      id=f"{name[:-3]}-{dtype}-D{d}-Dv{dv}-{layout}"))
    return cases


CATALOG_CASES = _catalog_cases()


def test_catalog_cases_cover_every_dtype_and_head_dim():
    seen: dict[str, tuple[set, set]] = {name: (set(), set()) for name in PROGRAMS}
    for case in CATALOG_CASES:
        name, dtype, d, dv, _, _ = case.values
        seen[name][0].add(dtype)
        seen[name][1].update({d, dv})
    for name, (dtypes, dims) in seen.items():
        assert dtypes == set(DTYPES), name
        assert dims == set(HEAD_DIMS), name
    assert any(c.values[2] != c.values[3] for c in CATALOG_CASES)
    assert any(c.values[5] == "bshd" for c in CATALOG_CASES)
    assert len(PROGRAMS) >= 7 and "decode_split_kv.tl" in PROGRAMS


@pytest.mark.parametrize("name", HOPPER_PROGRAMS)
def test_hopper_form_is_refused_with_the_gluon_message(name):
    program = catalog.load(name)
    with pytest.raises(TranslateError, match="the Hopper form \\(roles, barriers, async copies\\) is translated by the gluon backend only") as info:
        translate(program, head_dim=64)
    first = n.hopper_statement(program.kernels[0])
    assert (info.value.where.line, info.value.where.col) == (first.line, first.col)


@pytest.mark.parametrize("name, dtype, d, dv, sizes, layout", CATALOG_CASES)
def test_catalog_program_matches_reference(name, dtype, d, dv, sizes, layout, tmp_path):
    program = harness.specialize(catalog.load(name), dtype=dtype, params=small_params(name))
    shape = harness.Shape(*sizes, d, dv)
    err_o, err_lse = run_program(program, shape, dtype, layout, tmp_path, seed=d + dv)
    assert err_o <= O_TOLERANCE[dtype], f"{name} {shape} {dtype} {layout}: err(O) = {err_o:.3e}"
    assert err_lse <= lse_tolerance(dtype), f"{name} {shape} {dtype} {layout}: err(LSE) = {err_lse:.3e}"


def test_unwritten_output_is_caught_by_the_nan_poison(tmp_path):
    """The comparison the catalog tests rely on: an output the kernel never writes stays NaN and fails."""
    name = "gqa_fwd.tl"
    program = harness.specialize(catalog.load(name), dtype="fp16", params=small_params(name))
    shape = harness.Shape(1, 2, 1, 37, 41, 32, 32)
    module = translate(program, head_dim=32)
    store = "mask=(O_rows < Sq)[:, None]"
    assert module.source.count(store) == 1
    kernel = load_module(module.source.replace(store, "mask=(O_rows < Sq - 2)[:, None]"), tmp_path)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (make_input(gen, 1, h, s, 32, torch.float16, "bhsd") for h, s in ((2, 37), (1, 41), (1, 41)))
    o = poisoned(1, 2, 37, 32, torch.float16, "bhsd")
    lse = torch.full((1, 2, 37), math.nan)
    kernel.launch(q, k, v, o, lse, scale=1 / math.sqrt(32))
    assert torch.isnan(o[:, :, -2:]).all() and not torch.isnan(o[:, :, :-2]).any()
    ref_o, _ = harness.reference_for(program, shape, q.double().numpy(), k.double().numpy(), v.double().numpy(), {"scale": 1 / math.sqrt(32)}, None)
    assert relative_error(o.double().numpy(), ref_o) == math.inf


# ------------------------------------------------------------------------------ planned programs

def planned_kernel(spec: AttentionSpec, tmp_path: Path, **overrides: int) -> tuple[GeneratedKernel, dict[str, int], str]:
    """The planner's program for ``spec`` on H100 with 16-row tiles, translated and loaded."""
    pl = plan(spec, H100)
    params = {"BN": 16} if pl.kind == "decode" else dict(SMALL_TILES)
    params.update(overrides)
    program = harness.specialize(pl.program, params=params)
    module = translate(program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v)
    return load_module(module.source, tmp_path), {**pl.params, **params}, module.source


def assert_verified(kernel: GeneratedKernel, spec: AttentionSpec, params: dict, shapes: list[CaseShape]) -> None:
    record = verify(kernel, spec, params, shapes=shapes)
    assert len(record.cases) == len(shapes)
    assert record.passed, "\n".join(
        f"{c.shape}: err(O)={c.err_o:.3e}/{c.tol_o:.0e} err(LSE)={c.err_lse:.3e}/{c.tol_lse:.0e} {c.error or ''}" for c in record.cases)


COMPOSED = {
    # causal top-left with Sq != Sk both ways (the keys past Sq are never visible; late rows see all)
    "causal_top_left": (
        dict(heads=4, kv_heads=2, seqlen_q=37, seqlen_k=69, head_dim=64, dtype="bf16", causal=True, causal_align="top_left"),
        [CaseShape(1, 4, 2, 37, 69), CaseShape(2, 4, 2, 69, 37, "bshd"), CaseShape(1, 2, 1, 1, 33)],
    ),
    # a one-sided window (left only, no causal): the K/V loop starts past tile 0 for late blocks
    "window_left_only": (
        dict(heads=4, kv_heads=4, seqlen_q=61, seqlen_k=77, head_dim=32, dtype="fp16", window_left=13),
        [CaseShape(1, 4, 4, 61, 77), CaseShape(1, 2, 1, 83, 41, "bshd")],
    ),
    "window_two_sided": (
        dict(heads=6, kv_heads=2, seqlen_q=53, seqlen_k=53, head_dim=40, head_dim_v=64, dtype="bf16", window_left=9, window_right=5),
        [CaseShape(1, 6, 2, 53, 53), CaseShape(2, 2, 2, 29, 71, "bshd"), CaseShape(1, 2, 1, 71, 29)],
    ),
    "causal_window_left": (
        dict(heads=2, seqlen_q=45, seqlen_k=45, head_dim=64, dtype="fp32", causal=True, window_left=20),
        [CaseShape(1, 2, 2, 45, 67), CaseShape(1, 2, 2, 67, 45, "bshd")],
    ),
    "alibi_softcap_causal": (
        dict(heads=4, kv_heads=2, seqlen_q=41, seqlen_k=57, head_dim=64, dtype="bf16", causal=True, alibi_slopes="auto", softcap=2.0),
        [CaseShape(1, 4, 2, 41, 57), CaseShape(1, 8, 2, 57, 41, "bshd")],
    ),
    "score_mod": (
        dict(heads=4, kv_heads=2, seqlen_q=39, seqlen_k=51, head_dim=32, dtype="fp16", score_mod="score - 0.05 * abs(q_idx - kv_idx)"),
        [CaseShape(1, 4, 2, 39, 51), CaseShape(2, 2, 1, 51, 39, "bshd")],
    ),
    "mask_mod": (
        dict(heads=4, kv_heads=2, seqlen_q=39, seqlen_k=51, head_dim=32, dtype="bf16", mask_mod="(kv_idx + q_idx) % 3 != 0"),
        [CaseShape(1, 4, 2, 39, 51), CaseShape(1, 2, 2, 51, 39, "bshd")],
    ),
    # score_mod reading a negative difference through floor division (the floordiv helper), with causal
    "score_mod_floordiv_causal": (
        dict(heads=2, seqlen_q=35, seqlen_k=49, head_dim=32, dtype="fp32", causal=True, score_mod="score + 0.25 * ((q_idx - kv_idx) // 5)"),
        [CaseShape(1, 2, 2, 35, 49), CaseShape(1, 2, 2, 49, 35, "bshd")],
    ),
    "mqa": (
        dict(heads=8, kv_heads=1, seqlen_q=47, seqlen_k=59, head_dim=96, dtype="fp16"),
        [CaseShape(1, 8, 1, 47, 59), CaseShape(2, 4, 1, 23, 37, "bshd")],
    ),
}


@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_planned_program_matches_reference(name, tmp_path):
    fields, shapes = COMPOSED[name]
    spec = AttentionSpec(**fields)
    kernel, params, _ = planned_kernel(spec, tmp_path)
    assert_verified(kernel, spec, params, shapes)


@pytest.mark.parametrize("nsplit", [None, 4])
def test_planned_decode_matches_reference(nsplit, tmp_path):
    """Split-KV decode: the split count chosen at launch, and NSPLIT fixed at 4 (a compile-time
    parameter) with more splits than some shapes have tiles."""
    spec = AttentionSpec(batch=2, heads=8, kv_heads=2, seqlen_q=1, seqlen_k=90, head_dim=64, dtype="bf16")
    overrides = {} if nsplit is None else {"NSPLIT": nsplit}
    kernel, params, source = planned_kernel(spec, tmp_path, **overrides)
    assert "def attn_decode_partial(" in source and "def attn_decode_combine(" in source
    assert_verified(kernel, spec, params, [CaseShape(2, 8, 2, 1, 90), CaseShape(1, 4, 1, 1, 37, "bshd"),
                                           CaseShape(1, 2, 2, 1, 1), CaseShape(1, 4, 4, 3, 65, "bshd")])


def test_planned_decode_picks_its_split_count_per_launch(tmp_path):
    """One module, one compiled kernel, for every split count: the launcher computes NSPLIT for
    each call's sizes (``splits.split_count``, 4 SMs in the interpreter) and passes it to both
    kernels as a run-time argument the JIT does not specialise on."""
    spec = AttentionSpec(heads=8, kv_heads=2, seqlen_q=1, seqlen_k=64, head_dim=32, dtype="bf16")
    kernel, params, source = planned_kernel(spec, tmp_path)
    assert "NSPLIT = split_count(" in source and "NSPLIT: tl.constexpr" not in source
    assert source.count('"Sk", "NSPLIT"))') == 2 and "for s in range(0, NSPLIT):" in source
    # the ahead-of-time compile takes the same specialisation: a plain i32, not a constant
    for info in translate(harness.specialize(plan(spec, H100).program, params={"BN": 16}), head_dim=32).kernels:
        sig, const = info.signature()
        assert info.launch == ("NSPLIT",) and sig["NSPLIT"] == "i32" and "NSPLIT" not in const and "NSPLIT" in info.unspecialised
    rule, seen = kernel.module.split_count, []
    kernel.module.split_count = lambda *args: seen.append(rule(*args)) or seen[-1]
    # B * Hkv programs a split: 8 (1 split of 3 tiles), 4 (2 splits of 2), 2 (4 splits of 3, 3, 3 and 1 tiles of 16 keys)
    assert_verified(kernel, spec, params, [CaseShape(4, 8, 2, 1, 40), CaseShape(2, 8, 2, 1, 61, "bshd"), CaseShape(1, 8, 2, 1, 150)])
    assert seen == [1, 2, 4]


def test_decode_compiles_ahead_of_time_with_its_split_count_a_run_time_argument(tmp_path):
    from attnforge.generate import generate

    spec = AttentionSpec(batch=3, heads=8, kv_heads=2, seqlen_q=1, seqlen_k=3000, head_dim=64, dtype="bf16")
    result = generate(spec, H100, tmp_path / "out", run_verification=False)
    assert result.ok and [r.kernel for r in result.compile_reports] == ["attn_decode_partial", "attn_decode_combine"]
    assert "NSPLIT" not in result.plan.params and "launch NSPLIT = splits(" in (tmp_path / "out" / "kernel.tl").read_text()


def test_planned_decode_with_alibi_causal_score_mod_matches_reference(tmp_path):
    spec = AttentionSpec(heads=4, kv_heads=1, seqlen_q=1, seqlen_k=97, head_dim=32, dtype="fp16", causal=True,
                         alibi_slopes="auto", score_mod="score - 0.01 * kv_idx")
    kernel, params, _ = planned_kernel(spec, tmp_path, NSPLIT=2)
    assert_verified(kernel, spec, params, [CaseShape(1, 4, 1, 1, 97), CaseShape(2, 4, 1, 1, 15, "bshd")])


@pytest.mark.parametrize("fields", [dict(causal=True, window_left=21), dict(window_left=9, window_right=4), dict(softcap=2.0)],
                         ids=["causal_window_left", "window_two_sided", "softcap"])
def test_planned_decode_with_runtime_scalar_feature_matches_reference(fields, tmp_path):
    spec = AttentionSpec(heads=4, kv_heads=1, seqlen_q=1, seqlen_k=97, head_dim=32, dtype="fp16", **fields)
    kernel, params, _ = planned_kernel(spec, tmp_path, NSPLIT=2)
    assert_verified(kernel, spec, params, [CaseShape(1, 4, 1, 1, 97), CaseShape(2, 4, 1, 1, 15, "bshd")])


# Modifier expressions with TL's Python semantics that C-style Triton would get wrong without
# care: floor division and modulo of negative and float operands, ceiling division of negative
# numbers, and float functions of integer indices.
EXPRESSIONS = [
    pytest.param("score + cdiv(kv_idx - q_idx, 4)", id="cdiv_negative"),
    pytest.param("score + (q_idx - 20) // 2.5", id="float_floordiv"),
    pytest.param("score % 1.0", id="float_floormod"),
    pytest.param("score + exp(-kv_idx)", id="exp_of_index"),
    pytest.param("score - 0.5 * sqrt(abs(q_idx - kv_idx))", id="sqrt_of_index"),
    pytest.param("score + (kv_idx - q_idx) % 5 - (q_idx - kv_idx) // 4", id="int_floor_ops"),
    pytest.param("score + abs(score) % 2.0 + tanh(q_idx - kv_idx) + 1 / (kv_idx + 1)", id="float_ops"),
    pytest.param("where(q_idx > kv_idx, 1, 2) * score - min(kv_idx, 5.5) + cdiv(Sk, 7)", id="where_min_cdiv"),
]


@pytest.mark.parametrize("score_mod", EXPRESSIONS)
def test_score_mod_expression_matches_reference(score_mod, tmp_path):
    spec = AttentionSpec(heads=2, seqlen_q=29, head_dim=32, dtype="fp32", score_mod=score_mod)
    kernel, params, _ = planned_kernel(spec, tmp_path)
    assert_verified(kernel, spec, params, [CaseShape(1, 2, 2, 29, 37)])


@settings(max_examples=15, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    sq=st.integers(1, 70),
    sk=st.integers(1, 70),
    group=st.sampled_from([1, 2, 4]),
    hkv=st.integers(1, 2),
    d=st.sampled_from([16, 24, 32, 48, 64]),
    causal=st.booleans(),
    dtype=st.sampled_from(DTYPES),
    bshd=st.booleans(),
)
def test_planned_kernel_property(tmp_path_factory, sq, sk, group, hkv, d, causal, dtype, bshd):
    spec = AttentionSpec(heads=group * hkv, kv_heads=hkv, seqlen_q=sq, seqlen_k=sk, head_dim=d, dtype=dtype, causal=causal)
    kernel, params, _ = planned_kernel(spec, tmp_path_factory.mktemp("prop"))
    assert_verified(kernel, spec, params, [CaseShape(1, group * hkv, hkv, sq, sk, "bshd" if bshd else "bhsd")])


# ------------------------------------------------------------------------------ translator errors

def _gqa_fwd_text() -> str:
    return catalog.source("gqa_fwd")


def test_non_power_of_two_tile_is_refused_with_a_position():
    program = harness.specialize(catalog.load("gqa_fwd"), params={"BM": 24, "BN": 16})
    with pytest.raises(TranslateError) as info:
        translate(program, head_dim=64, file="gqa_fwd.tl")
    err = info.value
    assert "power of two" in err.message and "BM = 24" in err.message
    assert isinstance(err.where, Position) and err.where.line > 0 and err.where.col > 0
    assert err.where.file == "gqa_fwd.tl"
    line = _gqa_fwd_text().splitlines()[err.where.line - 1]
    assert "BM" in line and line.lstrip().startswith(("Allocate", "Copy")), line
    assert err.hint and "16" in err.hint


def test_non_power_of_two_kv_tile_is_refused():
    program = harness.specialize(catalog.load("gqa_causal_fwd"), params={"BN": 48})
    with pytest.raises(TranslateError, match="power of two"):
        translate(program, head_dim=64)


def test_grid_extent_depending_on_another_axis_is_refused():
    grid = "grid b : B, h : Hq, m : cdiv(Sq, BM)"
    text = _gqa_fwd_text()
    assert text.count(grid) == 1
    bad = text.replace(grid, "grid b : B, h : Hq, m : cdiv(Sq, BM) + h")
    program = parse(bad, file="ragged_grid.tl")
    with pytest.raises(TranslateError) as info:
        translate(program, head_dim=64, file="ragged_grid.tl")
    err = info.value
    assert "grid extent of m depends on another grid axis" in err.message
    assert isinstance(err.where, Position) and err.where.file == "ragged_grid.tl"
    assert bad.splitlines()[err.where.line - 1].startswith("grid ")


def test_open_parameter_is_refused():
    path = Path(__file__).parent / "tl_faults" / "tl106_open_parameter.tl"
    program = parse(path.read_text(), file=path.name)
    with pytest.raises(TranslateError) as info:
        translate(program, head_dim=128)
    assert "parameter BN is open" in info.value.message
    assert isinstance(info.value.where, Position)


@pytest.mark.parametrize("head_dim", [0, 1025])
def test_head_dim_outside_range_is_refused(head_dim):
    with pytest.raises(TranslateError, match="outside 16..512"):
        translate(catalog.load("gqa_fwd"), head_dim=head_dim)


# ------------------------------------------------------------------------------ generated source

def _statement_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if TL_STATEMENT.match(line)]


@pytest.mark.parametrize("name", PROGRAMS)
def test_generated_source_comments_every_tl_statement_and_compiles(name):
    program = harness.specialize(catalog.load(name), params=small_params(name))
    module = translate(program, head_dim=40, head_dim_v=48)
    src = module.source
    comments = [line.strip()[len("# TL: "):] for line in src.splitlines() if line.strip().startswith("# TL: ")]
    statements = _statement_lines(catalog.source(name))
    assert statements, name
    assert comments == statements  # every statement, once, in order
    compile(src, f"{name}.py", "exec")
    for generated in ("O_acc", "m_i", "l_i", "def launch(", "check_arguments(", "@triton.jit", "D_PAD", "DV_PAD"):
        assert generated in src, generated
    assert "HEAD_DIM = 40" in src and "HEAD_DIM_V = 48" in src
    assert [k.name for k in module.kernels] == [k.name for k in program.kernels]
    for k in module.kernels:
        assert f"def {k.name}(" in src
        assert k.constexprs["D_PAD"] == 64 and k.constexprs["DV_PAD"] == 64


def test_planned_source_comments_every_tl_statement():
    spec = AttentionSpec(heads=4, seqlen_q=33, head_dim=64, causal=True, alibi_slopes="auto", softcap=3.0,
                         window_left=7, score_mod="score * 0.5", mask_mod="kv_idx != 3")
    pl = plan(spec, H100)
    program = harness.specialize(pl.program, params=SMALL_TILES)
    module = translate(program, head_dim=64)
    comments = [line.strip()[len("# TL: "):] for line in module.source.splitlines() if line.strip().startswith("# TL: ")]
    # comments are TL's canonical printing (redundant parentheses dropped), statement for statement
    assert comments == _statement_lines(print_program(program))
    assert len(comments) == len(_statement_lines(pl.source))
    compile(module.source, "planned.py", "exec")


def test_generated_module_loads_and_reports_its_specialisation(tmp_path):
    program = harness.specialize(catalog.load("gqa_fwd"), dtype="fp16", params=SMALL_TILES)
    kernel = load_module(translate(program, head_dim=40, head_dim_v=96).source, tmp_path)
    assert (kernel.head_dim, kernel.head_dim_v) == (40, 96)
    assert kernel.dtypes["q"] == torch.float16 and kernel.dtypes["lse"] == torch.float32
    q = torch.zeros(1, 2, 5, 64, dtype=torch.float16)  # wrong head dim: refused before launching
    with pytest.raises(ValueError, match="head dims"):
        kernel(q, q, torch.zeros(1, 2, 5, 96, dtype=torch.float16))


# ---------------------------------------------------------------- the base-2 online softmax

def _base2(source: str):
    from attnforge.analysis import base2_softmax

    kernel = parse(source).kernels[0]
    return base2_softmax(kernel, frozenset(kernel.scalars) | {"BM", "BN"})


_SOFTMAX_TL = """kernel k
target sm_90
dtype qkv = fp16, acc = fp32, out = fp16
param BM = 64, BN = 64, warps = 4, stages = 1
scalar scale
grid b : B, h : Hq, m : cdiv(Sq, BM)

Allocate Q in global (Sq, D) at q[b, h]
Allocate K in global (Sk, D) at k[b, h]
Allocate V in global (Sk, Dv) at v[b, h]
Allocate O in global (Sq, Dv) at o[b, h]
Allocate LSE in global (Sq) at lse[b, h]
Allocate m_i in register (BM) : acc = -inf
Allocate l_i in register (BM) : acc = 0
Allocate O_acc in register (BM, Dv) : acc = 0
Copy Q (BM, D) at [m, 0] from global to register Qr
for j = 0 : cdiv(Sk, BN)
    Copy K (BN, D) at [j, 0] from global to register Kr
    Compute GEMM Qr, Kr^T and get S
    MODS
    Compute OnlineSoftmax S state m_i, l_i rescale O_acc and get P
    Compute Cast P to qkv
    Copy V (BN, Dv) at [j, 0] from global to register Vr
    Compute GEMM P, Vr and accumulate O_acc
end
Compute Normalize O_acc by l_i and get O_r
Compute LogSumExp m_i, l_i and get lse_r
Copy O_r (BM, Dv) at [m, 0] from register to global O
Copy lse_r (BM) at [m] from register to global LSE
"""


@pytest.mark.parametrize("mods, base2", [
    ("Compute Multiply S, scale\n    Compute Mask S keep kv_idx < Sk", True),  # masks keep -inf under a positive factor
    ("Compute Multiply S, scale", True),
    ("Compute Multiply S, scale\n    Compute ScoreMod S with 30 * tanh(score / 30)", False),  # a softcap after the scale: exp of the capped score
    ("Compute Mask S keep kv_idx < Sk", False),  # no scale to fold log2(e) into
    ("Compute Multiply S, m_i", False),  # a factor that is a tile, not a scale
])
def test_an_online_softmax_runs_in_base_2_only_behind_a_scale(mods, base2):
    plan = _base2(_SOFTMAX_TL.replace("MODS", mods))
    assert bool(plan.softmaxes) == base2 and (plan.states == {"m_i"}) == base2


def test_scores_read_after_the_loop_keep_their_natural_units():
    source = _SOFTMAX_TL.replace("MODS", "Compute Multiply S, scale").replace(
        "Compute Normalize O_acc by l_i and get O_r", "Compute RowMax S and get s_last\nCompute Normalize O_acc by l_i and get O_r")
    assert not _base2(source).states


def test_a_running_max_read_elsewhere_stays_in_nats():
    source = _SOFTMAX_TL.replace("MODS", "Compute Multiply S, scale").replace(
        "Compute Normalize O_acc by l_i and get O_r", "Compute Normalize O_acc by l_i and get O_r\nCompute Add m_i, 1.0 and get m_next")
    assert not _base2(source).states


def test_base_2_kernels_match_the_reference_in_the_interpreter(tmp_path):
    """The folded scale, exp2 and the LSE converted back: the same O and LSE as the spec's reference."""
    spec = AttentionSpec(heads=2, kv_heads=1, head_dim=32, dtype="fp16", causal=True, seqlen_q=40, seqlen_k=70, scale=-0.3)  # any sign
    from attnforge.generate import generate

    result = generate(spec, H100, tmp_path / "out")
    source = (tmp_path / "out" / "kernel_triton.py").read_text()
    assert "tl.math.exp2(S - m_i_safe[:, None])" in source and "m_i * 0.6931471805599453 + tl.log(l_i)" in source
    assert result.verified, result.error
