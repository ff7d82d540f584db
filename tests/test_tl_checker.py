"""TL static checker: the library checks clean, and each planted fault gives its finding.

The planted faults live in tests/tl_faults/*.tl: each is a library program with one small edit,
and carries its expectations in comment lines of the form

    # expect: TL401 error at line 26 on h100 head_dim=128

(one line per expected finding; the line number counts the fixture's own lines).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from attnforge.tl import nodes as n
from attnforge.tl.checker import CheckResult, Finding, check
from attnforge.tl.parser import parse
from attnforge.tl.printer import print_program

LIBRARY_DIR = resources.files("attnforge.tl").joinpath("library")
LIBRARY = sorted(p.name for p in LIBRARY_DIR.iterdir() if p.name.endswith(".tl"))
FAULTS_DIR = Path(__file__).parent / "tl_faults"
FAULTS = sorted(p.name for p in FAULTS_DIR.glob("*.tl"))
EXPECT = re.compile(r"^# expect: (TL\d{3}) (error|warning|info) at line (\d+) on (\S+) head_dim=(\d+)$", re.M)


def library_text(name: str) -> str:
    return LIBRARY_DIR.joinpath(name).read_text()


def edited(name: str, old: str, new: str) -> n.Program:
    text = library_text(name)
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {name}"
    return parse(text.replace(old, new))


def codes(result: CheckResult, severity: str = "error") -> set[str]:
    return {f.code for f in result.findings if f.severity == severity}


def only(result: CheckResult, code: str) -> Finding:
    found = [f for f in result.findings if f.code == code]
    assert len(found) == 1, [str(f) for f in result.findings]
    return found[0]


# ---------------------------------------------------------------- the library is clean


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("target", ["h100", "a100", None])
@pytest.mark.parametrize("name", LIBRARY)
def test_library_checks_clean(name: str, target: str | None, head_dim: int) -> None:
    result = check(parse(library_text(name)), target, head_dim=head_dim, file=name)
    if target == "a100" and n.hopper_statement(parse(library_text(name)).kernels[0]) is not None:
        # The Hopper form needs TMA and wgmma: refused on sm_80, and its shared GEMM operands with it.
        assert codes(result, "error") == {"TL508", "TL404"}, [str(f) for f in result.findings]
        return
    assert result.ok, [str(f) for f in result.errors]
    assert result.open_params == []
    # The header says sm_90: checking for a100 warns about the mismatch, and nothing else warns.
    expected_warnings = {"TL103"} if target == "a100" else set()
    assert codes(result, "warning") == expected_warnings, [str(f) for f in result.findings]
    assert result.target is not None and result.target.name == (target or "h100")
    assert len(result.resources) == len(parse(library_text(name)).kernels)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_shared_memory_estimate_is_exact(head_dim: int) -> None:
    """Qs once, Ks and Vs once per pipeline stage, bf16 (2 bytes), for BM = 128, BN = 64, stages = 2."""
    result = check(parse(library_text("gqa_fwd.tl")), "h100", head_dim=head_dim)
    (res,) = result.resources
    assert res.smem_breakdown == {"Qs": 128 * head_dim * 2, "Ks": 2 * 64 * head_dim * 2, "Vs": 2 * 64 * head_dim * 2}
    assert res.smem_bytes == sum(res.smem_breakdown.values())
    assert res.threads == 8 * 32
    assert 24 < res.regs_per_thread <= 255


def test_register_estimate_grows_with_the_tile_and_falls_with_warps() -> None:
    def regs(old: str, new: str) -> int:
        (res,) = check(edited("gqa_fwd.tl", old, new), "h100").resources
        return res.regs_per_thread

    base = regs("warps = 8", "warps = 8")
    assert regs("warps = 8", "warps = 4") > base > regs("warps = 8", "warps = 16")
    assert regs("BM = 128", "BM = 64") < base


def test_decode_combine_kernel_uses_no_shared_memory() -> None:
    result = check(parse(library_text("decode_split_kv.tl")), "h100")
    partial, combine = result.resources
    assert partial.kernel == "decode_split_kv_partial" and partial.smem_bytes > 0
    assert combine.kernel == "decode_split_kv_combine" and combine.smem_bytes == 0


def test_header_target_and_missing_target() -> None:
    text = library_text("gqa_fwd.tl")
    assert check(parse(text)).target.name == "h100"
    no_target = parse(text.replace("target sm_90\n", ""))
    result = check(no_target)
    assert result.target is None and result.ok
    assert codes(result, "info") == {"TL108"}
    assert check(no_target, "a100").target.name == "a100"
    bad = check(parse(text.replace("target sm_90", "target sm_13")))
    assert "TL107" in codes(bad)


# ---------------------------------------------------------------- planted faults (fixtures)


def _expectations(text: str) -> list[tuple[str, str, int, str, int]]:
    return [(c, s, int(line), t, int(hd)) for c, s, line, t, hd in EXPECT.findall(text)]


def test_fault_fixtures_exist() -> None:
    assert len(FAULTS) >= 30
    for name in FAULTS:
        assert _expectations((FAULTS_DIR / name).read_text()), f"{name} has no '# expect:' line"


@pytest.mark.parametrize("name", FAULTS)
def test_planted_fault_is_found(name: str) -> None:
    text = (FAULTS_DIR / name).read_text()
    program = parse(text, file=name)
    lines = text.splitlines()
    for code, severity, line, target, head_dim in _expectations(text):
        result = check(program, target, head_dim=head_dim, file=name)
        assert not result.ok
        hits = [f for f in result.findings if f.code == code and f.severity == severity and f.line == line]
        assert hits, f"no {code} at line {line}; got: " + "; ".join(str(f) for f in result.findings)
        for f in hits:
            assert 1 <= f.col <= len(lines[line - 1]) and not lines[line - 1][f.col - 1].isspace()
            assert f.message and f.hint
            assert f.message[0] != " " and f.hint != f.message


@pytest.mark.parametrize("name", FAULTS)
def test_the_fault_is_the_first_error(name: str) -> None:
    """Where a fault has a single expected error, no error comes before it in the source."""
    text = (FAULTS_DIR / name).read_text()
    expected = _expectations(text)
    code, _, line, target, head_dim = expected[0]
    result = check(parse(text), target, head_dim=head_dim)
    first = min(result.errors, key=lambda f: (f.line, f.col))
    if len(expected) == 1 and code not in ("TL410", "TL503", "TL504", "TL105"):  # kernel-level findings sit on the kernel line
        assert (first.code, first.line) == (code, line), [str(f) for f in result.errors]


# ---------------------------------------------------------------- planted faults (in code): hints that act


def test_tl409_hint_names_the_missing_rescale() -> None:
    f = only(check(edited("gqa_fwd.tl", " rescale O_acc", ""), "h100"), "TL409")
    assert "rescale O_acc" in f.hint and "line 30" in f.message


def test_tl303_hint_suggests_the_transpose() -> None:
    f = only(check(edited("gqa_fwd.tl", "Compute GEMM Qr, Kr^T", "Compute GEMM Qr, Kr"), "h100"), "TL303")
    assert f.hint == "write Kr^T"
    assert check(edited("gqa_fwd.tl", "Compute GEMM Qr, Kr^T", "Compute GEMM Qr, Kr^T"), "h100").ok


def test_tl406_hint_is_the_missing_statement() -> None:
    program = edited("gqa_fwd.tl", "    Reshape P from mma_c to mma_a\n", "")
    f = only(check(program, "h100"), "TL406")
    assert "Reshape P from mma_c to mma_a" in f.hint


def test_tl407_hint_names_the_actual_layout() -> None:
    f = only(check(edited("gqa_fwd.tl", "from mma_c to mma_a", "from mma_b to mma_a"), "h100"), "TL407")
    assert "mma_c" in f.message and f.hint == "write 'Reshape P from mma_c to mma_a'"


def test_tl305_hint_casts_the_fp32_operand() -> None:
    f = only(check(edited("gqa_fwd.tl", "    Compute Cast P to qkv\n", ""), "h100"), "TL305")
    assert "fp32" in f.message and "bf16" in f.message and "Cast P" in f.hint


def test_tl411_hint_names_the_right_start() -> None:
    f = only(check(edited("gqa_fwd.tl", "(BM) : acc = -inf", "(BM) : acc = 0"), "h100"), "TL411")
    assert f.hint == "write '= -inf'"
    f = only(check(edited("decode_split_kv.tl", "Allocate l_i in register (BM) : acc = 0\nAllocate O_acc in register (BM, Dv) : acc = 0\nfor s",
                          "Allocate l_i in register (BM) : acc = 2\nAllocate O_acc in register (BM, Dv) : acc = 0\nfor s"), "h100"), "TL411")
    assert f.hint == "write '= 0'" and f.line == 59


def test_tl404_depends_on_the_target() -> None:
    """Hopper's wgmma reads a shared-memory operand; Ampere's mma.sync cannot."""
    program = edited("gqa_fwd.tl", "Compute GEMM Qr, Kr^T", "Compute GEMM Qs, Kr^T")
    assert "TL404" not in codes(check(program, "h100"))
    f = only(check(program, "a100"), "TL404")
    assert "Qs" in f.message and f.hint == "Copy Qs from shared to register first"
    assert "TL404" in codes(check(edited("gqa_fwd.tl", "Compute GEMM P, Vr", "Compute GEMM P, V"), "h100"))


def test_tl503_hint_on_t4_names_the_fix_and_the_fix_works() -> None:
    program = parse(library_text("gqa_fwd.tl"))
    f = only(check(program, "t4"), "TL503")
    assert "96 KiB" in f.message and "64 KiB" in f.message
    assert "stages = 1" in f.hint
    fixed = edited("gqa_fwd.tl", "stages = 2", "stages = 1")
    assert "TL503" not in codes(check(fixed, "t4"))


def test_tl503_hint_on_h100_names_what_to_change() -> None:
    program = edited("gqa_fwd.tl", "param BM = 128, BN = 64, warps = 8, stages = 2", "param BM = 128, BN = 256, warps = 8, stages = 4")
    result = check(program, "h100", head_dim=256)
    f = only(result, "TL503")
    assert "227 KiB" in f.message and "Ks 512 KiB" in f.message
    assert "BN = 32" in f.hint
    # The suggested change really fits.
    fixed = edited("gqa_fwd.tl", "param BM = 128, BN = 64, warps = 8, stages = 2", "param BM = 128, BN = 32, warps = 8, stages = 4")
    assert "TL503" not in codes(check(fixed, "h100", head_dim=256))
    assert "TL503" not in codes(check(program, "h100", head_dim=32))  # the same tiles fit a small head dim


def test_tl504_hint_and_fix() -> None:
    program = edited("gqa_fwd.tl", "warps = 8", "warps = 1")
    f = only(check(program, "h100"), "TL504")
    assert "warps" in f.hint and "255" in f.message
    assert check(parse(library_text("gqa_fwd.tl")), "h100").ok


def test_tl505_only_for_parameters_not_problem_sizes() -> None:
    f = only(check(edited("gqa_fwd.tl", "param BM = 128", "param BM = 24"), "h100"), "TL505")
    assert f.hint == "choose BM as a multiple of 16"
    result = check(parse(library_text("gqa_fwd.tl")), "h100", head_dim=40)
    assert result.ok  # D = 40 is padded by the translator: info, not an error
    assert "TL505" in codes(result, "info")


def test_tl106_open_parameter_error_or_sketch_info() -> None:
    program = edited("gqa_fwd.tl", "param BM = 128, BN = 64", "param BM = 128, BN")
    strict = check(program, "h100")
    f = only(strict, "TL106")
    assert f.severity == "error" and "BN" in f.message and strict.open_params == ["BN"]
    sketch = check(program, "h100", sketch=True)
    f = only(sketch, "TL106")
    assert f.severity == "info" and sketch.ok and sketch.open_params == ["BN"]
    (res,) = sketch.resources
    assert res.smem_bytes is None  # resource checks that need BN are skipped


def test_tl105_needs_every_window_scalar() -> None:
    result = check(edited("sliding_window_fwd.tl", "scalar scale, window_left, window_right", "scalar scale, window_left"), "h100")
    assert any(f.code == "TL105" and "window_right" in f.message for f in result.errors)


def test_tl104_and_tl310_for_feature_values() -> None:
    result = check(edited("gqa_fwd.tl", "scalar scale\n", "scalar scale\ncomputes mask_mod = (kv_idx + 1), softcap\n"), "h100")
    assert "TL310" in codes(result)  # mask_mod is a number
    assert "TL105" in codes(result)  # softcap without its scalar
    result = check(edited("gqa_fwd.tl", "scalar scale\n", "scalar scale\ncomputes score_mod\n"), "h100")
    assert "TL104" in codes(result)


def test_tl410_lse_missing_is_a_warning_o_missing_an_error() -> None:
    no_lse = check(edited("gqa_fwd.tl", "Copy lse_r (BM) at [m] from register to global LSE\n", ""), "h100")
    assert no_lse.ok and only(no_lse, "TL410").severity == "warning"
    no_o = check(edited("gqa_fwd.tl", "Copy O_r (BM, Dv) at [m, 0] from register to global O\n", ""), "h100")
    assert only(no_o, "TL410").severity == "error"


def test_tl408_only_for_inputs() -> None:
    result = check(edited("gqa_fwd.tl", "from register to global LSE\n", "from register to global LSE\nCopy O_r (BM, Dv) at [m, 0] from register to global V\n"), "h100")
    f = only(result, "TL408")
    assert "v" in f.message and f.line == 41


def test_shape_probes_catch_sizes_that_agree_by_accident() -> None:
    """With Sq = Sk or D = Dv a wrong view would look fine; the checker's second probe differs."""
    result = check(edited("gqa_fwd.tl", "Allocate V in global (Sk, Dv)", "Allocate V in global (Sk, D)"), "h100", head_dim=64, head_dim_v=64)
    assert "TL301" in codes(result)


# ---------------------------------------------------------------- rendering


def test_findings_render_file_line_col_code_message_hint() -> None:
    name = "tl409_missing_rescale.tl"
    text = (FAULTS_DIR / name).read_text()
    result = check(parse(text, file=name), "h100", file=name)
    f = only(result, "TL409")
    assert f.render(name) == f"{name}:{f.line}:{f.col}: TL409: {f.message} ({f.hint})"
    assert str(f) == f"{f.line}:{f.col}: TL409: {f.message} ({f.hint})"
    pattern = re.compile(r"^tl409_missing_rescale\.tl:\d+:\d+: TL\d{3}: .+ \(.+\)$")
    for finding in result.findings:
        assert pattern.match(finding.render(name)), finding.render(name)


def test_findings_are_sorted_by_position() -> None:
    result = check(parse((FAULTS_DIR / "tl501_bf16_gemm_on_t4.tl").read_text()), "t4")
    keys = [(f.line, f.col, f.code) for f in result.findings]
    assert keys == sorted(keys)


# ---------------------------------------------------------------- regressions
# Bugs these tests found in src/ while they were written (by fuzzing mutated library programs);
# src/ has been fixed since, and the tests keep them fixed.


def test_zero_warps_is_a_finding_not_a_crash() -> None:
    # REGRESSION (src/attnforge/tl/checker.py, _resources/_register_estimate): `param warps = 0`
    # made threads = 0 and _register_estimate divided by it: check() raised ZeroDivisionError
    # instead of returning the TL102 finding ("parameter warps = 0 must be positive").
    result = check(edited("gqa_fwd.tl", "warps = 8", "warps = 0"), "h100")
    assert any(f.code == "TL102" and "warps" in f.message for f in result.errors)


@pytest.mark.parametrize("old, new", [
    ("Compute Multiply S, scale", "Compute Multiply S, o[b]"),
    ("Allocate O_acc in register (BM, Dv) : acc = 0", "Allocate O_acc in register (BM, Dv) : acc = q[0]"),
    ("keep kv_idx < Sk", "keep kv_idx < Sk + k[b, 0]"),
])
def test_indexing_a_tensor_with_too_few_indices_is_an_error(old: str, new: str) -> None:
    # REGRESSION (src/attnforge/tl/checker.py): the checker read every tensor element through a
    # _Probe that returns 1.0 whatever the index, so `o[b]` (one index into the 4-d o) passed as a
    # number; the interpreter then got an array slice and crashed (see test_tl_interpreter.py).
    result = check(edited("gqa_fwd.tl", old, new), "h100")
    assert not result.ok, "a partial index into a tensor was accepted"
    line = next(i for i, text in enumerate(library_text("gqa_fwd.tl").replace(old, new).splitlines(), 1) if new in text)
    assert any(f.line == line for f in result.errors), [str(f) for f in result.errors]


# ---------------------------------------------------------------- bugs once in src/ (each test failed before its fix)


@pytest.mark.parametrize("dim", ["0 - 1", "0", "log(0)", "0 / 0", "B / 2"])
def test_bad_scratch_dimension_is_reported(dim: str) -> None:
    # BUG (src/attnforge/tl/checker.py, check: scratch shapes go through _safe_int, which turns any
    # failure into -1 and truncates B / 2 to an int, and nothing checks the result): a scratch tensor
    # declared (identically in both kernels) with a dimension that is negative, zero, infinite, NaN
    # or fractional gives no finding at all -- check() calls the program clean -- while the
    # interpreter cannot allocate it (see test_tl_interpreter.py). A view's trailing dimensions
    # still match, so the bad leading dimension is never "reported where it is used".
    text = library_text("decode_split_kv.tl")
    assert text.count("scratch lse_part (B,") == 2
    program = parse(text.replace("scratch lse_part (B,", f"scratch lse_part ({dim},"))
    line = 1 + text[: text.index("scratch lse_part (B,")].count("\n")
    result = check(program, "h100")
    assert any(f.line == line for f in result.errors), [str(f) for f in result.findings]


def test_copy_into_an_allocated_running_max_keeps_its_initial_value() -> None:
    # A Copy that refills an allocated state vector must not make TL411 think it starts at 0.
    text = library_text("gqa_fwd.tl").replace(
        "Allocate m_i in register (BM) : acc = -inf\n",
        "Allocate m_i in register (BM) : acc = -inf\nAllocate m_s in shared (BM) : acc\nCopy m_s from shared to register m_i\n")
    assert "TL411" not in codes(check(parse(text), "h100"))


# ---------------------------------------------------------------- rules added after review

@pytest.mark.parametrize("name, old, new, code", [
    # Head mapping that runs past Hkv in the last program instance.
    ("gqa_fwd.tl", "at k[b, h // (Hq // Hkv)]", "at k[b, h]", "TL301"),
    # A global -> shared copy cannot convert (cp.async and TMA move bytes).
    ("gqa_fwd.tl", "Allocate Ks in shared (BN, D) : qkv", "Allocate Ks in shared (BN, D) : fp16", "TL308"),
    # Nothing accumulates in bf16; fp16 accumulation needs fp16 operands.
    ("gqa_fwd.tl", "dtype qkv = bf16, acc = fp32", "dtype qkv = bf16, acc = bf16", "TL507"),
    ("gqa_fwd.tl", "dtype qkv = bf16, acc = fp32", "dtype qkv = bf16, acc = fp16", "TL507"),
    # P @ V taken with 'get' and added by hand still needs the rescale.
    ("gqa_fwd.tl", "rescale O_acc and get P", "and get P", "TL409"),
])
def test_review_rules(name, old, new, code) -> None:
    assert code in codes(check(edited(name, old, new), "h100"))


def test_get_then_add_without_rescale_is_tl409() -> None:
    prog = edited("gqa_fwd.tl", "rescale O_acc and get P", "and get P")
    text = print_program(prog).replace("Compute GEMM P, Vr and accumulate O_acc", "Compute GEMM P, Vr and get PV\n    Compute Add O_acc, PV")
    assert "TL409" in codes(check(parse(text), "h100"))
    text = text.replace("Compute Add O_acc, PV", "Compute Add PV, O_acc and get O_acc")
    assert "TL409" in codes(check(parse(text), "h100"))


def test_fp16_accumulation_of_fp16_operands_is_allowed() -> None:
    assert "TL507" not in codes(check(edited("gqa_fwd.tl", "dtype qkv = bf16, acc = fp32", "dtype qkv = fp16, acc = fp16"), "a100"))


def test_a_kernel_reading_what_it_writes_is_a_race() -> None:
    # Fuse the split-KV combine into the partial kernel: it reads o_part while other instances write it.
    text = library_text("decode_split_kv.tl")
    partial, combine = text.split("kernel decode_split_kv_combine")
    fused = partial.replace("Copy lse_r (BM) at [m] from register to global LSE_s\n",
                            "Copy lse_r (BM) at [m] from register to global LSE_s\nCopy LSE_s (BM) at [m] from global to register again\n")
    assert "TL412" in codes(check(parse(fused), "h100"))
    assert "TL412" not in codes(check(parse(text), "h100"))


def test_a_large_negative_running_max_start_is_accepted() -> None:
    assert "TL411" not in codes(check(edited("gqa_fwd.tl", "Allocate m_i in register (BM) : acc = -inf", "Allocate m_i in register (BM) : acc = -1e30"), "h100"))


def test_register_estimate_gives_a_name_reused_in_a_second_loop_its_own_life() -> None:
    # FlashAttention-2 style: one loop over unmasked tiles, a second over the diagonal tiles,
    # both naming their scores S and P. The estimate must equal the single-loop kernel's.
    text = library_text("gqa_causal_fwd.tl")
    lines = text.split("\n")
    i0 = next(i for i, l in enumerate(lines) if l.startswith("for j"))
    i1 = next(i for i, l in enumerate(lines) if l == "end")
    body = lines[i0 + 1:i1]
    split = "max(0, min(cdiv(Sk, BN), (m * BM + Sk - Sq + 1) // BN))"
    two = lines[:i0] + [f"for j = 0 : {split} pipeline stages"] + body + ["end", f"for j = {split} : cdiv(max(0, min(Sk, (m + 1) * BM + Sk - Sq)), BN) pipeline stages"] + body + lines[i1:]
    one_regs = check(parse(text), "h100").resources[0].regs_per_thread
    two_regs = check(parse("\n".join(two)), "h100").resources[0].regs_per_thread
    assert two_regs == one_regs


def test_modifier_features_read_scalars_only_and_aliases_are_not_format_names() -> None:
    prog = edited("gqa_fwd.tl", "target sm_90\n", "target sm_90\ncomputes score_mod = (score + h[0])\n")
    assert "TL202" in codes(check(prog, "h100"))
    prog = edited("gqa_fwd.tl", "dtype qkv = bf16, acc = fp32, out = bf16", "dtype qkv = bf16, acc = fp32, out = bf16, fp32 = bf16")
    assert "TL101" in codes(check(prog, "h100"))


# ---------------------------------------------------------------- issue 10: messages a reader (or a model) can act on


def test_an_undeclared_alias_says_to_declare_it() -> None:
    text = "\n".join(line for line in library_text("gqa_fwd.tl").split("\n") if not line.startswith("dtype "))
    found = [f for f in check(parse(text), "h100").findings if f.code == "TL301"]
    acc = next(f for f in found if "'acc'" in f.message)
    assert "declare it: dtype acc = fp32" in acc.hint and "defaults to fp32 only where it is implied" in acc.hint
    assert all("()" not in f.hint for f in found)


@pytest.mark.parametrize("feature, says", [("softcap = 50", ("scalar softcap", "--scalar softcap=50", "score_mod = (50 * tanh(score / 50))")),
                                           ("window = 256", ("scalar window_left, window_right", "--scalar window_left=256")),
                                           ("causal, softcap = 50.5", ("scalar softcap",))])
def test_a_number_as_a_feature_value_is_explained(feature, says) -> None:
    from attnforge.errors import TLSyntaxError

    with pytest.raises(TLSyntaxError) as err:
        parse(library_text("gqa_fwd.tl").replace("target sm_90\n", f"target sm_90\ncomputes {feature}\n", 1))
    assert "a feature's value is not a number" in err.value.message
    assert all(s in err.value.hint for s in says), err.value.hint


@pytest.mark.parametrize("value", ["(256)", "(Sk - 1)"])
def test_feature_values_are_shown_as_tl_not_python(value) -> None:
    f = only(check(edited("gqa_fwd.tl", "target sm_90\n", f"target sm_90\ncomputes window = {value}\n"), "h100"), "TL104")
    assert f"window = {value} is not a side" in f.message and "window_left" in f.hint
    assert "Num(" not in f.message + f.hint and "Binary(" not in f.message + f.hint


def test_one_wrong_gemm_is_one_finding_naming_both_operands() -> None:
    """A GEMM refused for its operands' level used to be followed by a TL200 for every later use of
    its result (one advising to declare the tile as a scalar) and named only operand A."""
    result = check(edited("gqa_fwd.tl", "Compute GEMM Qr, Kr^T and get S", "Compute GEMM Qs, Ks^T and get S"), "a100")
    assert codes(result) == {"TL404"}, [str(f) for f in result.findings]
    f = only(result, "TL404")
    assert "operands A (Qs) and B (Ks) are in shared memory" in f.message
    assert f.hint == "Copy Qs from shared to register and Copy Ks from shared to register first"
    # a use of a tile that was never defined anywhere is still reported
    result = check(edited("gqa_fwd.tl", "Compute Multiply S, scale", "Compute Multiply S2, scale"), "h100")
    assert "TL200" in codes(result)


def test_tl305_never_suggests_casting_a_tile_that_cast_cannot_reach() -> None:
    program = parse(library_text("gqa_fwd.tl").replace("Allocate Ks in shared (BN, D) : qkv", "Allocate Ks in shared (BN, D) : fp32")
                    .replace("Compute GEMM Qr, Kr^T and get S", "Compute GEMM Qr, Ks^T and get S"))
    f = only(check(program, "h100"), "TL305")
    assert "Compute Cast Ks" not in f.hint and "Ks is in shared memory" in f.hint and "Compute Cast Qr to fp32" in f.hint


@pytest.mark.parametrize("mask", ["0 <= kv_idx < Sk", "kv_idx < Sk == 1"])
def test_chained_comparisons_are_named(mask) -> None:
    from attnforge.errors import TLSyntaxError
    from attnforge.tl.parser import parse_expr

    with pytest.raises(TLSyntaxError, match="comparisons do not chain") as err:
        parse(library_text("gqa_fwd.tl").replace("keep kv_idx < Sk", f"keep {mask}"))
    assert "a <= b and b < c" in err.value.hint
    with pytest.raises(TLSyntaxError, match="comparisons do not chain"):
        parse_expr(mask, "mask_mod")


def test_an_open_parameter_says_how_to_give_it_a_value() -> None:
    f = only(check(edited("gqa_fwd.tl", "param BM = 128,", "param BM,"), "h100"), "TL106")
    assert "--param BM=64" in f.hint and "--sketch" in f.hint


def test_tl412_points_at_the_manual_not_at_a_program_the_reader_may_not_have() -> None:
    text = library_text("decode_split_kv.tl")
    first = text.index("kernel decode_split_kv_combine")
    # the partial kernel also loads what it stores: one kernel reading its own scratch output
    fused = text[:first].replace("Copy lse_r (BM) at [m] from register to global LSE_s",
                                 "Copy lse_r (BM) at [m] from register to global LSE_s\nCopy LSE_s (BM) at [m] from global to register again")
    f = only(check(parse(fused), "h100"), "TL412")
    assert "decode_split_kv_combine" not in f.hint and "docs/TL.md, section 10.3" in f.hint


def test_the_manual_has_a_complete_split_kv_example_and_says_what_is_per_kernel() -> None:
    from attnforge.tl import catalog

    manual = (Path(__file__).parents[1] / "docs" / "TL.md").read_text()
    section = manual[manual.index("### 10.3 A complete split-KV decode"):]
    example = re.search(r"```tl\n(.*?)```", section, re.S).group(1)
    assert parse(example).kernels == catalog.load("decode_split_kv").kernels  # the shipped program, statement for statement
    assert check(parse(example), "h100").ok
    for said in ("Everything in a header is per kernel", "sets `NAME`\nin every kernel that declares it",
                 "A global view may be allocated anywhere in the body, also inside a loop",
                 "An alias *written* in the program"):
        assert said in manual, said


def test_a_fail_line_names_the_worst_row_and_the_fp8_tolerance_prints_as_in_the_manual() -> None:
    from attnforge.tl.harness import Shape, format_tolerance, run_and_compare

    wrong = edited("gqa_fwd.tl", "Compute Mask S keep kv_idx < Sk", "Compute Mask S keep kv_idx < Sk - 1")
    line = run_and_compare(wrong, Shape.parse("1,4,2,37,53,16"), params={"BM": 16, "BN": 16}).line()
    assert line.startswith("FAIL B=1 Hq=4 Hkv=2 Sq=37 Sk=53") and re.search(r"O worst at b=0 h=\d row=\d+ \(", line), line
    assert [format_tolerance(x) for x in (1e-10, 2e-2, 5e-3, 0.15, 0.3)] == ["1e-10", "2e-02", "5e-03", "1.5e-01", "3e-01"]
    manual = (Path(__file__).parents[1] / "docs" / "TL.md").read_text()
    assert "| fp8e4m3 | 1.5e-1 | 1e-5 |" in manual


# ---------------------------------------------------------------- launch-time values (launch NSPLIT = splits(...))

SPLIT_RULE = "launch NSPLIT = splits(B * Hq * cdiv(Sq, BM), cdiv(Sk, BN))"


def _position(text: str, needle: str) -> tuple[int, int]:
    i = text.index(needle)
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


@pytest.mark.parametrize("old, new, at", [
    ("Allocate Ks in shared (BN, D) : qkv", "Allocate Ks in shared (NSPLIT * 16, D) : qkv", "NSPLIT * 16"),
    ("Allocate O_acc in register (BM, Dv) : acc = 0\nCopy Q", "Allocate O_acc in register (BM, Dv * NSPLIT) : acc = 0\nCopy Q", "Dv * NSPLIT"),
    ("Copy V (BN, Dv) at [j, 0]", "Copy V (NSPLIT, Dv) at [j, 0]", "NSPLIT, Dv) at"),
    ("NSPLIT)) pipeline stages", "NSPLIT)) pipeline NSPLIT", "NSPLIT\n"),
])
def test_a_launch_time_value_where_the_compiler_needs_a_constant_is_tl314(old: str, new: str, at: str) -> None:
    text = library_text("decode_split_kv.tl").replace(old, new, 1)
    [f] = [f for f in check(parse(text), "h100").findings if f.code == "TL314"]
    line, col = _position(text, new)
    offset = new.rindex(at.rstrip("\n")) if at.endswith("\n") else new.index(at)  # "X\n": X at the end of the line
    assert (f.line, f.col) == (line, col + offset) and f.severity == "error"
    assert "NSPLIT" in f.message and "known only at launch" in f.message and "grid axes, scratch tensors" in f.hint


def test_a_launch_time_value_may_size_grids_scratch_and_views_and_bound_loops() -> None:
    program = parse(library_text("decode_split_kv.tl"))
    assert [k.launch_names() for k in program.kernels] == [("NSPLIT",), ("NSPLIT",)]
    assert check(program, "h100").findings == [] and program.declares("NSPLIT")


def test_kernels_that_share_a_launch_time_value_compute_it_alike() -> None:
    text = library_text("decode_split_kv.tl")
    combine = text.index("kernel decode_split_kv_combine")
    other = text[:combine] + text[combine:].replace(SPLIT_RULE, "launch NSPLIT = splits(B * Hq, cdiv(Sk, BN))")
    f = only(check(parse(other), "h100"), "TL110")
    assert (f.line, f.col) == _position(other, "launch NSPLIT = splits(B * Hq, cdiv(Sk, BN))")
    assert "decode_split_kv_partial" in f.message and "the same 'launch NSPLIT = splits(...)'" in f.hint
    # a combine kernel with another BN splits differently; one without BN cannot compute the rule at all
    assert only(check(parse(text.replace("param BM = 16, BN = 64, warps = 4\n", "param BM = 16, BN = 32, warps = 4\n")), "h100"), "TL110")
    f = only(check(parse(text.replace("param BM = 16, BN = 64, warps = 4\n", "param BM = 16, warps = 4\n")), "h100"), "TL203")
    assert "'BN' is not defined" in f.message


@pytest.mark.parametrize("old, new, code, words", [
    ("param BM = 16, BN = 64, warps = 4, stages = 2", "param BM = 16, BN = 64, NSPLIT = 8, warps = 4, stages = 2", "TL102", "declared twice"),
    ("param BM = 16, BN = 64, warps = 4, stages = 2", "param BM = 16, BN = 64, warps = 4, stages = 2\n" + SPLIT_RULE, "TL102", "declared twice"),
    # the rule reads sizes, parameters and scalars: not a grid axis, and integers only
    (SPLIT_RULE + "\nscalar", "launch NSPLIT = splits(B * Hq * cdiv(Sq, BM), cdiv(Sk, BN) + h)\nscalar", "TL203", "'h' is not defined"),
    (SPLIT_RULE + "\nscalar", "launch NSPLIT = splits(B * Hq / 2, cdiv(Sk, BN))\nscalar", "TL311", "is not an integer"),
])
def test_a_launch_line_is_checked_like_a_header(old: str, new: str, code: str, words: str) -> None:
    f = [f for f in check(edited("decode_split_kv.tl", old, new), "h100").findings if f.code == code][0]
    assert words in f.message and f.severity == "error"


def test_a_program_right_for_some_split_counts_only_is_refused() -> None:
    # partial results for 4 splits at most: the last program instance of probe 2 (NSPLIT = 7) overruns them
    text = library_text("decode_split_kv.tl").replace("(B, Hq, NSPLIT, Sq", "(B, Hq, 4, Sq")
    found = [f for f in check(parse(text), "h100").errors if f.code == "TL301"]
    assert found and "offset s = 6 is outside dimension 2 of o_part (size 4) in the last program instance" in found[0].message
