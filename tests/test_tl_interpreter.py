"""TL reference interpreter: the library matches the float64 reference, emulated precision holds its
tolerance, and faults the checker cannot see are caught numerically."""

from __future__ import annotations

import math
from importlib import resources

import numpy as np
import pytest

from attnforge.errors import AttnforgeError, TLRuntimeError
from attnforge.reference import relative_error
from attnforge.tl import nodes as n
from attnforge.tl.checker import check
from attnforge.numerics import O_TOLERANCE
from attnforge.tl.harness import Shape, default_scalars, reference_for, run_and_compare
from attnforge.tl.interpreter import run_program
from attnforge.tl.parser import parse

LIBRARY_DIR = resources.files("attnforge.tl").joinpath("library")
LIBRARY = sorted(p.name for p in LIBRARY_DIR.iterdir() if p.name.endswith(".tl"))
SMALL = {"BM": 16, "BN": 16}


def library_text(name: str) -> str:
    return LIBRARY_DIR.joinpath(name).read_text()


def program(name: str) -> n.Program:
    return parse(library_text(name), file=name)


def edited(name: str, old: str, new: str, count: int = 1) -> n.Program:
    text = library_text(name)
    assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times in {name}"
    return parse(text.replace(old, new))


def run_full(prog: n.Program, shape: Shape, *, scalars=None, params=None, seed: int = 0):
    """Like run_and_compare, but returns the outputs and the reference themselves."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((shape.B, shape.Hq, shape.Sq, shape.D))
    k = rng.standard_normal((shape.B, shape.Hkv, shape.Sk, shape.D))
    v = rng.standard_normal((shape.B, shape.Hkv, shape.Sk, shape.Dv))
    values = default_scalars(prog, shape)
    values.update(scalars or {})
    slopes = rng.uniform(0.01, 1.0, shape.Hq)  # any positive slopes: the same go to the program and the reference
    inputs = {"q": q, "k": k, "v": v, "alibi_slopes": slopes}
    tensors = {**{name: x.copy() for name, x in inputs.items()},
               "o": np.full((shape.B, shape.Hq, shape.Sq, shape.Dv), np.nan), "lse": np.full((shape.B, shape.Hq, shape.Sq), np.nan)}
    result = run_program(prog, shape.sizes(), tensors, scalars=values, params=params)
    for name, x in inputs.items():  # inputs are read, never written
        assert np.array_equal(result.tensors[name], x), name
    ref_o, ref_lse = reference_for(prog, shape, q, k, v, values, slopes)
    return result, ref_o, ref_lse


# ---------------------------------------------------------------- exact float64 against the reference

# (shape B,Hq,Hkv,Sq,Sk,D[,Dv], params). GQA ratios 1, 2, 4, 8; odd lengths 1, 17, 113, 203;
# Sq < Sk and Sq > Sk; head dims 16, 32, 40, 64 and Dv != D.
CASES = [
    ("1,1,1,1,1,16", SMALL),
    ("1,2,1,17,17,16", SMALL),
    ("2,2,2,1,113,40", SMALL),
    ("1,4,1,113,17,32", SMALL),
    ("1,8,1,33,203,16,8", SMALL),
    ("1,8,4,203,33,64,48", SMALL),
    ("1,2,1,203,1,16", SMALL),
    ("1,6,3,17,113,40", SMALL),
    ("1,4,2,113,203,64,48", {"BM": 32, "BN": 16}),
    ("1,4,4,64,64,64", None),  # the header's own BM = 128, BN = 64 (one partial block)
    ("1,2,1,130,150,16", {"BM": 64, "BN": 32}),
]


@pytest.mark.parametrize("shape, params", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("name", LIBRARY)
def test_library_matches_reference_exactly(name: str, shape: str, params) -> None:
    prog = program(name)
    report = run_and_compare(prog, Shape.parse(shape), params=params)
    assert report.tolerance == 1e-10
    assert report.passed, report.line()
    assert report.err_o <= 1e-10 and report.err_lse <= 1e-10
    result, ref_o, ref_lse = run_full(prog, Shape.parse(shape), params=params)
    o, lse = result.tensors["o"], result.tensors["lse"]
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    masked = np.isneginf(ref_lse)
    assert np.array_equal(np.isneginf(lse), masked)
    assert (o[masked] == 0).all()


WINDOWS = [(0, 0), (5, 0), (0, 3), (37, 11), (1000, 1000), (1, 40)]


@pytest.mark.parametrize("window", WINDOWS, ids=[f"w{l}_{r}" for l, r in WINDOWS])
@pytest.mark.parametrize("shape", ["1,2,1,17,113,16", "1,4,2,113,17,32,16", "1,2,2,64,64,16"])
def test_sliding_window_sizes(shape: str, window: tuple[int, int]) -> None:
    scalars = {"window_left": window[0], "window_right": window[1]}
    report = run_and_compare(program("sliding_window_fwd.tl"), Shape.parse(shape), scalars=scalars, params=SMALL)
    assert report.passed, report.line()


@pytest.mark.parametrize("nsplit", [1, 3, 8, 20])
@pytest.mark.parametrize("shape", ["1,4,1,1,203,32", "2,2,2,17,17,16", "1,2,1,3,113,40,24"])
def test_decode_split_counts(shape: str, nsplit: int) -> None:
    """Any number of splits, including more splits than K/V tiles (empty splits)."""
    report = run_and_compare(program("decode_split_kv.tl"), Shape.parse(shape), params={**SMALL, "NSPLIT": nsplit})
    assert report.passed, report.line()


@pytest.mark.parametrize("softcap", [0.5, 1.5, 30.0])
def test_softcap_values(softcap: float) -> None:
    report = run_and_compare(program("softcap_causal_fwd.tl"), Shape.parse("1,2,1,40,57,16"), scalars={"softcap": softcap}, params=SMALL)
    assert report.passed, report.line()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scale_is_honoured(seed: int) -> None:
    report = run_and_compare(program("gqa_fwd.tl"), Shape.parse("1,2,1,17,33,16"), scalars={"scale": 3.7}, params=SMALL, seed=seed)
    assert report.passed, report.line()


# ---------------------------------------------------------------- fully masked rows


@pytest.mark.parametrize("name, scalars", [
    ("gqa_causal_fwd.tl", None),
    ("alibi_causal_fwd.tl", None),
    ("softcap_causal_fwd.tl", None),
    ("sliding_window_fwd.tl", {"window_left": 0, "window_right": 0}),
    ("sliding_window_fwd.tl", {"window_left": 3, "window_right": 0}),
])
@pytest.mark.parametrize("shape", ["1,2,1,40,17,16", "1,4,2,113,33,40,24"])
def test_fully_masked_rows_give_zero_and_minus_inf(name: str, scalars, shape: str) -> None:
    s = Shape.parse(shape)
    result, ref_o, ref_lse = run_full(program(name), s, scalars=scalars, params=SMALL)
    o, lse = result.tensors["o"], result.tensors["lse"]
    masked = np.isneginf(ref_lse)
    # bottom-right alignment with Sq > Sk: the first rows see no key at all
    assert masked.any() and not masked.all()
    assert masked[..., : s.Sq - s.Sk].all()
    assert np.isneginf(lse[masked]).all() and (lse[masked] < 0).all()
    assert (o[masked] == 0).all()
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    assert relative_error(o, ref_o) <= 1e-10 and relative_error(lse, ref_lse) <= 1e-10


def test_top_left_causal_has_no_masked_rows() -> None:
    for shape in ("1,2,1,40,17,16", "1,2,1,17,40,16"):
        result, _, ref_lse = run_full(program("gqa_causal_topleft_fwd.tl"), Shape.parse(shape), params=SMALL)
        assert np.isfinite(ref_lse).all() and np.isfinite(result.tensors["lse"]).all()


# ---------------------------------------------------------------- the interpreter follows the program literally


def test_grid_and_loop_counts_gqa_fwd() -> None:
    s = Shape.parse("2,4,2,37,53,16")
    report = run_and_compare(program("gqa_fwd.tl"), s, params=SMALL)
    programs = s.B * s.Hq * math.ceil(s.Sq / 16)
    assert report.programs == programs
    assert report.loop_trips == programs * math.ceil(s.Sk / 16)


@pytest.mark.parametrize("shape", ["1,2,1,37,53,16", "1,2,1,53,37,16", "1,1,1,64,64,16"])
def test_causal_loop_stops_at_the_diagonal(shape: str) -> None:
    s = Shape.parse(shape)
    report = run_and_compare(program("gqa_causal_fwd.tl"), s, params=SMALL)
    blocks = math.ceil(s.Sq / 16)
    per_head = sum(math.ceil(max(0, min(s.Sk, (m + 1) * 16 + s.Sk - s.Sq)) / 16) for m in range(blocks))
    assert report.loop_trips == s.B * s.Hq * per_head
    assert report.loop_trips < s.B * s.Hq * blocks * math.ceil(s.Sk / 16)


def test_sliding_window_visits_only_touched_tiles() -> None:
    s = Shape.parse("1,1,1,203,203,16")
    report = run_and_compare(program("sliding_window_fwd.tl"), s, scalars={"window_left": 5, "window_right": 0}, params=SMALL)
    blocks = math.ceil(s.Sq / 16)
    assert report.passed
    assert report.loop_trips <= 2 * blocks  # a 16-row block with a 5-key window spans at most 2 tiles


@pytest.mark.parametrize("nsplit", [1, 3, 8])
def test_decode_splits_partition_the_tiles(nsplit: int) -> None:
    """Every K/V tile is visited by exactly one split; the combine loop runs NSPLIT times."""
    s = Shape.parse("1,2,1,17,100,16")
    report = run_and_compare(program("decode_split_kv.tl"), s, params={**SMALL, "NSPLIT": nsplit})
    blocks = s.B * s.Hq * math.ceil(s.Sq / 16)
    assert report.passed
    assert report.programs == blocks * nsplit + blocks
    assert report.loop_trips == blocks * math.ceil(s.Sk / 16) + blocks * nsplit


@pytest.mark.parametrize("name", ["decode_split_kv.tl", "decode_packed_gqa.tl"])
@pytest.mark.parametrize("shape", ["4,2,1,1,40,16", "1,4,2,1,70,16", "1,2,1,1,40,16", "1,2,1,1,3,16", "2,8,2,3,150,32", "1,16,1,16,90,16"])
def test_decode_takes_the_launch_rules_split_count(name: str, shape: str) -> None:
    """Without --param the split count is the host's rule for each shape, with the interpreter's 4
    SMs: the programs and loop trips it runs are those of that count, and the numbers are exact."""
    from attnforge.splits import INTERPRETER_SM_COUNT, split_count

    s = Shape.parse(shape)
    packed = name == "decode_packed_gqa.tl"
    programs = s.B * (s.Hkv * math.ceil(s.Hq // s.Hkv * s.Sq / 16) if packed else s.Hq * math.ceil(s.Sq / 16))
    splits = split_count(programs, math.ceil(s.Sk / 16), INTERPRETER_SM_COUNT)
    report = run_and_compare(program(name), s, params=SMALL)
    assert report.passed and report.err_o <= 1e-10, report.line()
    assert report.programs == programs * splits + programs
    if not packed:  # no causal bound: every tile is visited once, and the combine loop runs once per split
        assert report.loop_trips == programs * math.ceil(s.Sk / 16) + programs * splits


def test_launch_values_follow_sm_count_and_params() -> None:
    prog = program("decode_split_kv.tl")
    s = Shape.parse("1,2,1,1,160,16")
    sizes = s.sizes()

    def programs_run(**kw) -> int:
        tensors = {"q": np.ones((1, 2, 1, 16)), "k": np.ones((1, 1, 160, 16)), "v": np.ones((1, 1, 160, 16)), "alibi_slopes": np.ones(2),
                   "o": np.zeros((1, 2, 1, 16)), "lse": np.zeros((1, 2, 1))}
        return run_program(prog, sizes, tensors, scalars={"scale": 0.25}, **kw).programs

    # 2 programs a split, 3 tiles of 64 keys: min(3 tiles, 2 * SMs / 2) splits, rounded up to a power of two
    assert programs_run() == 2 * 4 + 2  # 4 SMs: 4 splits (the last without a tile)
    assert programs_run(sm_count=1) == 2 * 1 + 2
    assert programs_run(sm_count=132) == 2 * 4 + 2  # at most one split per tile (3, rounded up)
    assert programs_run(params={"NSPLIT": 5}) == 2 * 5 + 2  # fixed by params, whatever the rule says
    with pytest.raises(TLRuntimeError, match="not declared"):
        programs_run(params={"NSPLITS": 5})


def test_the_launch_lines_programs_per_sm_set_the_split_count() -> None:
    """``splits(P, T, PER_SM)``: the interpreter's split count aims at PER_SM programs an SM, as the
    launchers' does (2 programs a split, 3 tiles: 4 SMs give 2 splits at 1 an SM, 4 at 2, and 4 at 4,
    at most one split a tile rounded up to a power of two)."""
    text = library_text("decode_split_kv.tl")
    assert text.count("cdiv(Sk, BN))\n") == 2
    sizes = Shape.parse("1,2,1,1,160,16").sizes()
    counts = {}
    for per_sm in (1, 2, 4):
        prog = parse(text.replace("cdiv(Sk, BN))\n", f"cdiv(Sk, BN), {per_sm})\n"))
        tensors = {"q": np.ones((1, 2, 1, 16)), "k": np.ones((1, 1, 160, 16)), "v": np.ones((1, 1, 160, 16)), "alibi_slopes": np.ones(2),
                   "o": np.zeros((1, 2, 1, 16)), "lse": np.zeros((1, 2, 1))}
        counts[per_sm] = (run_program(prog, sizes, tensors, scalars={"scale": 0.25}).programs - 2) // 2
    assert counts == {1: 2, 2: 4, 4: 4}


def test_results_are_deterministic() -> None:
    s = Shape.parse("1,2,1,17,33,16")
    a, _, _ = run_full(program("alibi_causal_fwd.tl"), s, params=SMALL, seed=5)
    b, _, _ = run_full(program("alibi_causal_fwd.tl"), s, params=SMALL, seed=5)
    assert np.array_equal(a.tensors["o"], b.tensors["o"]) and np.array_equal(a.tensors["lse"], b.tensors["lse"])


# ---------------------------------------------------------------- emulated precision


@pytest.mark.parametrize("name", LIBRARY)
def test_emulated_precision(name: str) -> None:
    prog = program(name)
    shape = Shape.parse("1,4,2,77,113,64,48")
    params = {"BM": 16, "BN": 32}
    errors = {}
    for dtype in ("fp32", "fp16", "bf16"):
        report = run_and_compare(prog, shape, dtype=dtype, params=params)
        assert report.tolerance == O_TOLERANCE[dtype]
        assert report.passed, report.line()
        errors[dtype] = report.err_o
    assert errors["fp32"] < 1e-5
    # The rounding is real: coarser formats give larger errors (a no-op emulation would give ~1e-16).
    assert 0 < errors["fp32"] < errors["fp16"] < errors["bf16"]
    assert errors["bf16"] > 1e-4


# ---------------------------------------------------------------- faults the comparison must catch

# (id, library program, old, new, occurrences, shape, params, scalars). Shapes have tails
# (Sq % BM != 0, Sk % BN != 0) so bounds and masks matter.
FAULTS = [
    ("loop_bound_floor", "gqa_fwd.tl", "for j = 0 : cdiv(Sk, BN)", "for j = 0 : Sk // BN", 1, "1,2,1,20,37,16", SMALL, None),
    ("causal_bound_one_tile_short", "gqa_causal_fwd.tl", "(m + 1) * BM + Sk - Sq)), BN)", "(m + 1) * BM + Sk - Sq)), BN) - 1", 1, "1,2,1,20,37,16", SMALL, None),
    ("causal_bound_one_block_short", "gqa_causal_fwd.tl", "(m + 1) * BM + Sk - Sq)), BN)", "m * BM + Sk - Sq)), BN)", 1, "1,2,1,20,37,16", SMALL, None),
    ("causal_bound_topleft", "gqa_causal_topleft_fwd.tl", "min(Sk, (m + 1) * BM)", "min(Sk, m * BM)", 1, "1,2,1,37,37,16", SMALL, None),
    ("window_start_one_tile_late", "sliding_window_fwd.tl", "- window_left) // BN", "- window_left) // BN + 1", 1, "1,2,1,64,64,16", SMALL, None),
    ("swapped_causal_mask", "gqa_causal_fwd.tl", "kv_idx <= q_idx + Sk - Sq", "kv_idx >= q_idx + Sk - Sq", 1, "1,2,1,20,37,16", SMALL, None),
    ("swapped_topleft_mask", "gqa_causal_topleft_fwd.tl", "kv_idx <= q_idx", "kv_idx >= q_idx", 1, "1,2,1,37,20,16", SMALL, None),
    ("no_tail_mask_topleft", "gqa_causal_topleft_fwd.tl", "keep kv_idx < Sk and ", "keep ", 1, "1,2,1,40,23,16", SMALL, None),
    ("no_tail_mask_window", "sliding_window_fwd.tl", "keep kv_idx < Sk and ", "keep ", 1, "1,2,1,40,23,16", SMALL, None),
    ("no_tail_mask_gqa", "gqa_fwd.tl", "    Compute Mask S keep kv_idx < Sk\n", "", 1, "1,2,1,20,37,16", SMALL, None),
    ("no_tail_mask_alibi", "alibi_causal_fwd.tl", "keep kv_idx < Sk and kv_idx <= q_idx + Sk - Sq", "keep kv_idx <= q_idx + Sk - Sq + BN", 1, "1,2,1,20,37,16", SMALL, None),
    ("gqa_head_mapping", "gqa_fwd.tl", "h // (Hq // Hkv)]", "h % Hkv]", 2, "1,4,2,20,37,16", SMALL, None),
    ("gqa_head_mapping_k_only", "gqa_causal_fwd.tl", "at k[b, h // (Hq // Hkv)]", "at k[b, h % Hkv]", 1, "1,8,2,20,37,16", SMALL, None),
    ("no_normalisation", "gqa_fwd.tl", "Copy O_r (BM, Dv) at [m, 0]", "Copy O_acc (BM, Dv) at [m, 0]", 1, "1,2,1,20,37,16", SMALL, None),
    ("normalise_by_max", "gqa_fwd.tl", "Compute Normalize O_acc by l_i", "Compute Normalize O_acc by m_i", 1, "1,2,1,20,37,16", SMALL, None),
    ("no_lse_store", "gqa_fwd.tl", "Copy lse_r (BM) at [m] from register to global LSE\n", "", 1, "1,2,1,20,37,16", SMALL, None),
    ("grid_floor", "gqa_fwd.tl", "m : cdiv(Sq, BM)", "m : Sq // BM", 1, "1,2,1,20,37,16", SMALL, None),
    ("scale_dropped", "gqa_fwd.tl", "    Compute Multiply S, scale\n", "", 1, "1,2,1,20,37,16", SMALL, None),
    ("alibi_sign", "alibi_causal_fwd.tl", "with score - alibi_slopes[h]", "with score + alibi_slopes[h]", 1, "1,2,1,20,37,16", SMALL, None),
    ("softcap_missing", "softcap_causal_fwd.tl", "    Compute ScoreMod S with softcap * tanh(score / softcap)\n", "", 1, "1,2,1,20,37,16", SMALL, None),
    ("decode_split_overlap", "decode_split_kv.tl", "min(cdiv(Sk, BN), (s + 1) *", "min(cdiv(Sk, BN), (s + 2) *", 1, "1,2,1,3,100,16", {**SMALL, "NSPLIT": 3}, None),
    ("decode_merge_without_rescale_weight", "decode_split_kv.tl", "Compute Multiply o_s, w and get o_w", "Compute Multiply o_s, 1 and get o_w", 1, "1,2,1,3,100,16", {**SMALL, "NSPLIT": 3}, None),
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f[0] for f in FAULTS])
def test_checker_blind_faults_are_caught_numerically(fault) -> None:
    _, name, old, new, count, shape, params, scalars = fault
    faulty = edited(name, old, new, count)
    # (none of these is visible to check() today; the comparison must catch them all the same)
    report = run_and_compare(faulty, Shape.parse(shape), params=params, scalars=scalars)
    assert not report.passed
    assert max(report.err_o, report.err_lse) > 1e-3, report.line()
    # the unedited program passes on the same shape
    assert run_and_compare(program(name), Shape.parse(shape), params=params, scalars=scalars).passed


def test_missing_rescale_is_caught_numerically() -> None:
    """The checker reports TL409, but run_and_compare does not check statically: the numbers are wrong."""
    faulty = edited("gqa_fwd.tl", " rescale O_acc", "")
    assert "TL409" in {f.code for f in check(faulty, "h100").errors}
    report = run_and_compare(faulty, Shape.parse("1,2,1,20,37,16"), params=SMALL)
    assert not report.passed and report.err_o > 1e-3
    combine = edited("decode_split_kv.tl", "state m_i, l_i rescale O_acc and get w", "state m_i, l_i and get w")
    report = run_and_compare(combine, Shape.parse("1,2,1,3,100,16"), params={**SMALL, "NSPLIT": 3})
    assert not report.passed and report.err_o > 1e-3


def test_missing_lse_store_fails_by_nan() -> None:
    faulty = edited("gqa_fwd.tl", "Copy lse_r (BM) at [m] from register to global LSE\n", "")
    report = run_and_compare(faulty, Shape.parse("1,2,1,20,37,16"), params=SMALL)
    assert report.err_lse == math.inf and report.err_o <= 1e-10 and not report.passed


def test_wrong_grid_leaves_rows_unwritten() -> None:
    faulty = edited("gqa_fwd.tl", "m : cdiv(Sq, BM)", "m : Sq // BM")
    result, _, _ = run_full(faulty, Shape.parse("1,2,1,20,37,16"), params=SMALL)
    o = result.tensors["o"]
    assert not np.isnan(o[:, :, :16]).any() and np.isnan(o[:, :, 16:]).all()


def test_floor_loop_bound_is_invisible_without_a_tail() -> None:
    """Why the fault shapes have tails: with Sk % BN == 0, Sk // BN is cdiv(Sk, BN)."""
    faulty = edited("gqa_fwd.tl", "for j = 0 : cdiv(Sk, BN)", "for j = 0 : Sk // BN")
    assert run_and_compare(faulty, Shape.parse("1,2,1,20,32,16"), params=SMALL).passed
    assert not run_and_compare(faulty, Shape.parse("1,2,1,20,33,16"), params=SMALL).passed


def test_tail_mask_is_redundant_under_bottom_right_causal() -> None:
    """kv_idx <= q_idx + Sk - Sq with q_idx < Sq already implies kv_idx < Sk for every stored row."""
    faulty = edited("gqa_causal_fwd.tl", "keep kv_idx < Sk and ", "keep ")
    for shape in ("1,2,1,20,37,16", "1,2,1,37,20,16"):
        assert run_and_compare(faulty, Shape.parse(shape), params=SMALL).passed


def test_gqa_mapping_fault_needs_a_real_group() -> None:
    """h % Hkv equals h // (Hq // Hkv) for MHA (Hq = Hkv) and MQA (Hkv = 1): only real groups expose it."""
    faulty = edited("gqa_fwd.tl", "h // (Hq // Hkv)]", "h % Hkv]", count=2)
    assert run_and_compare(faulty, Shape.parse("1,4,4,20,37,16"), params=SMALL).passed
    assert run_and_compare(faulty, Shape.parse("1,4,1,20,37,16"), params=SMALL).passed
    assert not run_and_compare(faulty, Shape.parse("1,4,2,20,37,16"), params=SMALL).passed


# ---------------------------------------------------------------- run-time errors


def _tensors(shape: Shape) -> dict[str, np.ndarray]:
    return {
        "q": np.zeros((shape.B, shape.Hq, shape.Sq, shape.D)), "k": np.zeros((shape.B, shape.Hkv, shape.Sk, shape.D)),
        "v": np.zeros((shape.B, shape.Hkv, shape.Sk, shape.Dv)), "o": np.full((shape.B, shape.Hq, shape.Sq, shape.Dv), np.nan),
        "lse": np.full((shape.B, shape.Hq, shape.Sq), np.nan), "alibi_slopes": np.ones(shape.Hq),
    }


def test_open_parameter_is_a_runtime_error() -> None:
    sketch = edited("gqa_fwd.tl", "param BM = 128, BN = 64", "param BM = 128, BN")
    s = Shape.parse("1,2,1,20,37,16")
    with pytest.raises(TLRuntimeError) as info:
        run_program(sketch, s.sizes(), _tensors(s), scalars={"scale": 1.0})
    assert "BN" in info.value.message and info.value.where.line == sketch.kernels[0].line
    with pytest.raises(TLRuntimeError):
        run_and_compare(sketch, s)
    assert run_and_compare(sketch, s, params={"BN": 16}).passed  # filling it in makes it runnable


def test_missing_scalar_is_a_runtime_error() -> None:
    s = Shape.parse("1,2,1,20,37,16")
    with pytest.raises(TLRuntimeError) as info:
        run_program(program("gqa_fwd.tl"), s.sizes(), _tensors(s), scalars={}, params=SMALL)
    assert "'scale'" in info.value.message and "scale" in info.value.hint
    with pytest.raises(TLRuntimeError) as info:
        run_program(program("sliding_window_fwd.tl"), s.sizes(), _tensors(s), scalars={"scale": 1.0, "window_left": 3}, params=SMALL)
    assert "window_right" in info.value.message
    unknown = edited("gqa_fwd.tl", "scalar scale", "scalar scale, temperature")
    with pytest.raises(TLRuntimeError):
        run_and_compare(unknown, s, params=SMALL)


@pytest.mark.parametrize("old, new, shape, what", [
    ("Compute GEMM P, Vr", "Compute GEMM P, Vr2", "1,2,1,20,37,16", "'Vr2' is not defined"),
    ("at k[b, h // (Hq // Hkv)]", "at kv[b, h // (Hq // Hkv)]", "1,2,1,20,37,16", "'kv'"),
    ("for j = 0 : cdiv(Sk, BN)", "for j = 0 : Sk / BN", "1,2,1,20,37,16", "integer"),
    ("Compute GEMM Qr, Kr^T", "Compute GEMM Qr, Kr", "1,2,1,20,37,32", "inner dimensions"),  # D != BN, or the shapes agree
    ("Allocate K in global (Sk, D)", "Allocate K in global (Sq, D)", "1,2,1,20,37,16", "shape"),
    ("Copy Ks from shared to register Kr", "Copy Ks from global to register Kr", "1,2,1,20,37,16", "lives in shared"),
    ("Allocate K in global (Sk, D) at k[b, h // (Hq // Hkv)]", "Allocate K in global (Sk, D) at k[b, h]", "1,4,2,20,37,16", "outside"),
])
def test_bad_programs_raise_runtime_errors_with_positions(old: str, new: str, shape: str, what: str) -> None:
    faulty = edited("gqa_fwd.tl", old, new)
    with pytest.raises(TLRuntimeError) as info:
        run_and_compare(faulty, Shape.parse(shape), params=SMALL)
    assert what in info.value.message
    line = next(i for i, text in enumerate(library_text("gqa_fwd.tl").replace(old, new).splitlines(), 1) if new.split("\n")[0] in text)
    assert info.value.where.line == line


# ---------------------------------------------------------------- regressions
# Bugs these tests found in src/ while they were written (by fuzzing mutated library programs);
# src/ has been fixed since, and the tests keep them fixed.


@pytest.mark.parametrize("old, new", [
    ("Allocate l_i in register (BM) : acc = 0", "Allocate l_i in register (-1) : acc = 0"),
    ("Copy K (BN, D) at [j, 0] from global to shared Ks", "Copy K (-1, D) at [j, 0] from global to shared Ks"),
])
def test_negative_dimension_is_a_runtime_error(old: str, new: str) -> None:
    # REGRESSION (src/attnforge/tl/interpreter.py, s_Allocate/load): a negative dimension reached
    # np.full / np.zeros and escaped as numpy's ValueError("negative dimensions are not allowed")
    # instead of a TLRuntimeError with the statement's position.
    with pytest.raises(TLRuntimeError) as info:
        run_and_compare(edited("gqa_fwd.tl", old, new), Shape.parse("1,2,1,20,37,16"), params=SMALL)
    line = next(i for i, text in enumerate(library_text("gqa_fwd.tl").replace(old, new).splitlines(), 1) if new in text)
    assert info.value.where.line == line


@pytest.mark.parametrize("old, new", [
    ("Compute Multiply S, scale", "Compute Multiply S, o[b]"),
    ("Allocate O_acc in register (BM, Dv) : acc = 0", "Allocate O_acc in register (BM, Dv) : acc = q[0]"),
    ("keep kv_idx < Sk", "keep kv_idx < Sk + k[b, 0]"),
])
def test_partial_tensor_index_is_a_runtime_error(old: str, new: str) -> None:
    # REGRESSION (src/attnforge/tl/interpreter.py + evaluate.py): `o[b]` indexed the 4-d o with one
    # index and yielded an array slice; the interpreter then failed inside numpy (ValueError:
    # operands could not be broadcast / TypeError: only length-1 arrays can be converted) instead of
    # raising TLRuntimeError, and the checker accepted these programs (see test_tl_checker.py).
    try:
        run_and_compare(edited("gqa_fwd.tl", old, new), Shape.parse("1,2,1,20,37,16"), params=SMALL)
    except AttnforgeError as err:
        assert isinstance(err, TLRuntimeError)
        line = next(i for i, text in enumerate(library_text("gqa_fwd.tl").replace(old, new).splitlines(), 1) if new in text)
        assert err.where.line == line
    else:
        pytest.fail("a partial index into a tensor ran without error")


# ---------------------------------------------------------------- bugs in src/ (these tests fail)


@pytest.mark.parametrize("dim", ["0 - 1", "log(0)", "0 / 0", "B / 2"])
def test_bad_scratch_dimension_is_a_runtime_error(dim: str) -> None:
    # BUG (src/attnforge/tl/interpreter.py, run_program: `int(evaluate(d, env))` for scratch shapes):
    # a scratch dimension of -1 escapes as numpy's ValueError("negative dimensions are not
    # allowed"), log(0) as OverflowError("cannot convert float infinity to integer"), 0 / 0 as
    # ValueError("cannot convert float NaN to integer"), and B / 2 = 0.5 is silently truncated to 0
    # (the run then fails later, at an unrelated Allocate). Each should be a TLRuntimeError at the
    # scratch declaration, as bad Allocate dimensions are.
    text = library_text("decode_split_kv.tl")
    program = parse(text.replace("scratch lse_part (B,", f"scratch lse_part ({dim},"))
    line = 1 + text[: text.index("scratch lse_part (B,")].count("\n")
    with pytest.raises(TLRuntimeError) as info:
        run_and_compare(program, Shape.parse("1,2,1,17,33,16"), params={**SMALL, "NSPLIT": 3})
    assert info.value.where.line == line


def test_unknown_scratch_dtype_is_a_runtime_error() -> None:
    prog = edited("decode_split_kv.tl", "scratch lse_part (B, Hq, NSPLIT, Sq) : acc", "scratch lse_part (B, Hq, NSPLIT, Sq) : fp12", count=2)
    with pytest.raises(TLRuntimeError, match="fp12"):
        run_and_compare(prog, Shape.parse("1,2,1,3,40,16"), dtype="bf16")


def test_run_program_rejects_undeclared_parameters() -> None:
    with pytest.raises(TLRuntimeError, match="'bm'"):
        run_program(program("gqa_fwd.tl"), {"B": 1, "Hq": 1, "Hkv": 1, "Sq": 4, "Sk": 4, "D": 16, "Dv": 16}, {}, params={"bm": 16})
