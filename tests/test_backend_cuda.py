"""The CUDA C++ backend without a GPU: translation, refusals, compiles for every mma.sync
target (no spills, the tensor-core instructions really in the SASS), the pipeline lint and the
CUDA mutants. Native verification needs a GPU: ``python -m attnforge.backends.cuda.gpucheck``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from dataclasses import replace

import pytest

from attnforge import AttentionSpec, get_target
from attnforge.backends import choose_backend, get_backend, names
from attnforge.compile_report import check_fits
from attnforge.errors import AttnforgeError, CompileError, DoesNotFitError, TranslateError
from attnforge.generate import generate
from attnforge.plan.builtin import plan, plans_for
from attnforge.selftest.mutants import CUDA_MUTANTS, SPECS
from attnforge.tl import catalog
from attnforge.tl import nodes as n
from attnforge.tl.parser import parse

cuda = get_backend("cuda")
pytestmark = pytest.mark.skipif(cuda.versions()["nvcc"] == "missing", reason="nvcc not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _source(spec: AttentionSpec, target: str) -> str:
    t = get_target(target)
    p = next(plans_for(cuda, spec, t))
    return cuda.translate(p.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl").source


def _fitting(spec: AttentionSpec, target: str, tmp_path):
    """The first plan whose kernel compiles for the target and fits it (as generate does)."""
    from attnforge.backends.cuda.compile import compile_for_target

    t = get_target(target)
    for p in plans_for(cuda, spec, t):
        src = cuda.translate(p.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
        reports = compile_for_target(src, t, tmp_path)
        try:
            for r in reports:
                check_fits(r, t)
        except DoesNotFitError:
            continue
        return p, src, reports
    raise AssertionError(f"no plan fits {target}")


def test_registered_after_triton_and_listed():
    assert names()[:2] == ("triton", "cuda")
    assert cuda.source_file == "kernel_cuda.cu"
    assert choose_backend("cuda", AttentionSpec(heads=4, head_dim=64, dtype="fp16"), get_target("t4")) is cuda
    assert set(cuda.refused_strategies(get_target("h100"))) == {"tma", "persistent", "ws"}


def test_every_tl_line_is_a_comment_above_its_code():
    spec = AttentionSpec(heads=8, kv_heads=2, head_dim=128, dtype="bf16", causal=True)
    t = get_target("a100")
    p = next(plans_for(cuda, spec, t))
    src = cuda.translate(p.program, head_dim=128, head_dim_v=128).source
    stmts = [line.strip() for line in p.source.splitlines() if line.strip() and not line.startswith(("#", "kernel", "target", "computes", "dtype", "param", "scalar", "grid"))]
    comments = [line.split("// TL: ", 1)[1] for line in src.splitlines() if "// TL: " in line]
    assert [s for s in stmts] == [c for c in comments]
    for needle in ("mma.sync.aligned.m16n8k16", "mma.sync.aligned.m16n8k8", "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global",
                   "af_quad_max", "__any_sync(0xffffffffu, af_grow)", "#define AF_BF16 1", 'extern "C" __global__ void __launch_bounds__(128) attn_fwd('):
        assert needle in src


@pytest.mark.parametrize("target, dtype, hmma, copy", [
    ("t4", "fp16", "HMMA.1688", "LDG"),       # sm_75: m16n8k8 and 16-byte vector loads
    ("a100", "bf16", "HMMA.16816", "LDGSTS"),  # sm_80: m16n8k16 and cp.async
    ("a10", "fp16", "HMMA.16816", "LDGSTS"),   # sm_86 (99 KiB of shared memory: fewer stages)
    ("l4", "bf16", "HMMA.16816", "LDGSTS"),    # sm_89
    ("h100", "bf16", "HMMA.16816", "LDGSTS"),  # sm_90: the mma.sync path
])
def test_compiles_for_every_mma_sync_target_without_spills(target, dtype, hmma, copy, tmp_path):
    spec = AttentionSpec(heads=8, kv_heads=2, head_dim=128, dtype=dtype, causal=True)
    p, src, reports = _fitting(spec, target, tmp_path)
    (r,) = reports
    assert r.spill_bytes == 0 and r.tensor_cores_used and r.sm == get_target(target).sm
    sass = r.notes[1]
    assert sass.startswith("SASS: ") and f"{hmma} x" in sass and f"{copy} x" in sass and "LDSM x" in sass
    assert ("HMMA.16816" in sass) == (hmma == "HMMA.16816") and ("LDGSTS" in sass) == (copy == "LDGSTS")
    assert ("cp.async" in r.instructions) == (copy == "LDGSTS") and "mma.sync" in r.instructions
    assert (tmp_path / f"attn_fwd.{target}.cubin").is_file()


def test_the_turing_path_compiles_for_sm_90(tmp_path):
    from attnforge.backends.cuda.compile import compile_cubin, sass_mix

    src = _source(AttentionSpec(heads=4, head_dim=64, dtype="bf16", causal=True), "h100")
    cubin, ptx, _, _ = compile_cubin(src, "sm_90", "turing")
    mix = sass_mix(cubin)
    assert mix["HMMA.1688"] and not mix["HMMA.16816"] and not mix["LDGSTS"]
    assert "m16n8k8.row.col.f32.bf16" in ptx


def test_features_translate_to_cxx_and_compile(tmp_path):
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=40, dtype="fp16", window_left=100, window_right=3,
                         alibi_slopes="auto", softcap=30.0, score_mod="score - 0.1 * abs(q_idx - kv_idx)", mask_mod="kv_idx % 4 != 0")
    p, src, (r,) = _fitting(spec, "a100", tmp_path)
    assert "af_tanh" in src and "alibi_slopes_ptr[" in src and "window_left" in src and "% 4" in src
    assert r.spill_bytes == 0


@pytest.mark.parametrize("spec, target, words", [
    (AttentionSpec(heads=4, head_dim=64, dtype="bf16"), "t4", "--dtype fp16"),
    (AttentionSpec(heads=4, head_dim=64, dtype="fp16"), "v100", "--backend triton"),
    (AttentionSpec(heads=4, head_dim=64, dtype="fp32"), "a100", "dtype fp32"),
    (AttentionSpec(heads=4, head_dim=100, dtype="fp16"), "a100", "multiples of 8"),
    (AttentionSpec(heads=8, kv_heads=2, head_dim=256, dtype="fp16", seqlen_q=1, seqlen_k=512), "a100", "packed-GQA decode"),
])
def test_unsupported_specs_are_refused_with_the_reason(spec, target, words):
    why = cuda.unsupported(spec, get_target(target))
    assert why is not None and words in why
    with pytest.raises(AttnforgeError, match="no backend builds"):
        choose_backend("cuda", spec, get_target(target))


def test_unexpressible_programs_are_refused_at_translate_time():
    # split-KV decode translates (tests/test_backend_cuda_decode.py); a launch-time value named like a
    # size would shadow it on the host: refused at its launch line
    decode = plan(AttentionSpec(heads=4, head_dim=64, dtype="fp16", seqlen_q=1, seqlen_k=512), get_target("a100"))
    assert cuda.translate(decode.program, head_dim=64, head_dim_v=64).source.count('extern "C" __global__') == 2
    kernel = decode.program.kernels[0]
    clash = n.Program((replace(kernel, launch=(replace(kernel.launch[0], name="Sk"),)),))
    with pytest.raises(TranslateError, match="launch-time value 'Sk' clashes") as info:
        cuda.translate(clash, head_dim=64, head_dim_v=64)
    assert info.value.where.line == kernel.launch[0].line
    tma = plan(AttentionSpec(heads=4, head_dim=64, dtype="bf16"), get_target("h100"))
    assert tma.params.get("tma") == 1
    with pytest.raises(TranslateError, match="strategy tma = 1"):
        cuda.translate(tma.program, head_dim=64, head_dim_v=64)
    fp32 = plan(AttentionSpec(heads=4, head_dim=64, dtype="fp32", allow_tf32=True), get_target("a100"))
    with pytest.raises(TranslateError, match="fp16 or bf16"):
        cuda.translate(fp32.program, head_dim=64, head_dim_v=64)


def test_library_programs_translate_or_are_refused_clearly():
    for name in catalog.programs():
        program = catalog.load(name)
        try:
            src = cuda.translate(program, head_dim=64, head_dim_v=64).source
        except TranslateError as err:
            assert err.message and str(err.where)
            continue
        assert "af_mma(" in src and "// TL: " in src


def test_pipeline_lint_and_cuda_mutants():
    from attnforge.backends.cuda.compile import lint

    spec, _ = SPECS["causal"]
    src = _source(spec, "h200")
    lint(src)
    by_name = {m.name: m for m in CUDA_MUTANTS}
    swapped, no_wait = by_name["cuda_fragment_rows_swapped"].apply(src), by_name["cuda_cp_async_wait_missing"].apply(src)
    assert swapped != src and no_wait != src
    lint(swapped)  # a wrong fragment mapping is only caught by running it (the GPU grid)
    with pytest.raises(CompileError, match="cp.async waits"):
        lint(no_wait)


def test_the_copy_softmax_and_normalize_mutants_apply_pass_the_lint_and_compile(tmp_path):
    """Mutants of the walking-pointer copies, the softmax's folded scale and lazy rescale and Normalize's
    reciprocal: they compile and pass the lint, so only verification on a GPU (gpucheck --phase mutants)
    can kill them."""
    from attnforge.backends.cuda.compile import compile_for_target, lint

    spec, target = SPECS["causal"]
    src = _source(spec, target)
    by_name = {m.name: m for m in CUDA_MUTANTS}
    texts = {name: by_name[name].apply(src) for name in ("cuda_copy_walks_a_row_short", "cuda_folded_scale_without_log2e",
                                                        "cuda_lazy_rescale_keeps_the_row_sum", "cuda_lazy_rescale_votes_all", "cuda_v_tail_copy_unpredicated",
                                                        "cuda_normalize_reads_the_other_rows_sum")}
    assert "(long long)(32 - 1) * stride_k2" in texts["cuda_copy_walks_a_row_short"]  # D=32: 4 chunks a row, 32 rows a pass
    natural_spec, natural_target = SPECS["alibi"]  # a score modifier: the softmax in natural units
    natural = _source(natural_spec, natural_target)
    texts["cuda_natural_shift_without_log2e"] = by_name["cuda_natural_shift_without_log2e"].apply(natural)
    assert texts["cuda_natural_shift_without_log2e"] != natural
    for name, text in texts.items():
        assert text != src
        lint(text)
        reports = compile_for_target(text, get_target(target), tmp_path / name)
        assert all(r.spill_bytes == 0 for r in reports), name


def test_copies_of_tiles_the_loop_keeps_inside_the_view_are_unpredicated():
    """The unmasked loop (``for j = 0 : Sk // BN``) prefetches only tiles below its bound, whole tiles inside the view:
    their cp.async copies carry no row predicate (16 ISETP and 32 SEL fewer at D = 128, and on sm_80 the D = 64
    3-stage tile no longer spills); the prologue's, the masked loop's and Q's keep theirs; so do padded head dims."""
    from attnforge.plan.builtin import source_for
    from attnforge.backends.cuda import CudaBackend
    from attnforge.tl import parse

    def source(d: int) -> str:
        spec = AttentionSpec(heads=4, kv_heads=2, head_dim=d, dtype="fp16", causal=True, seqlen_q=300, seqlen_k=300)
        text = source_for(spec, get_target("h200"), "prefill", dict(BM=128, BN=64, warps=4, stages=2))
        return CudaBackend().translate(parse(text), head_dim=d, head_dim_v=d).source

    src = source(128)
    unmasked, masked = src.split("// TL: for j = ")[1:3]
    assert unmasked.startswith("0 : min(Sk // BN, ") and "pipeline stages" in masked.split("\n")[0]  # (causal: the unmasked
    # tiles end at the diagonal's first or at the last whole tile)
    prefetch = unmasked[unmasked.index("// prefetch tile"):]
    assert prefetch.count("af_copy16_inside(") == 2 and "af_copy16(" not in prefetch  # K and V
    prologue = unmasked[:unmasked.index("for (int j = ")]
    assert prologue.count("af_copy16(") == 2 and "af_copy16_inside(" not in prologue  # outside the loop: not proven, predicated
    before_loops = src.split("// TL: for j = ")[0]
    assert "af_copy16_inside(" not in masked and "af_copy16_inside(" not in before_loops[before_loops.index('extern "C"'):]  # the tail's, Q's
    padded = source(72)
    assert "af_copy16_inside(" not in padded[padded.index('extern "C"'):]  # a padded row: its last piece lies past the head dim


def test_the_first_choices_that_fit_before_the_unpredicated_copies_still_fit(tmp_path):
    """Without the row predicate nvcc may keep values live differently: the Turing path keeps its predicate (without it
    the sm_75 D = 64 causal first choice spilled 8 bytes), and the sm_80 D = 64 first choice (3 stages) fits now."""
    from attnforge.backends.cuda.compile import compile_for_target

    cuda = get_backend("cuda")
    for target, causal in (("t4", True), ("a100", False)):
        spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="fp16", causal=causal, seqlen_q=1000, seqlen_k=1000)
        first = next(plans_for(cuda, spec, get_target(target)))
        src = cuda.translate(first.program, head_dim=64, head_dim_v=64).source
        (report,) = compile_for_target(src, get_target(target), tmp_path / target)
        assert report.spill_bytes == 0, (target, first.params, report.spill_bytes)
        assert first.params["stages"] == (2 if target == "t4" else 3)


def test_the_decode_mutants_apply_and_compile(tmp_path):
    """The split-KV decode mutants pass the lint and compile: only verification on a GPU can kill them."""
    from attnforge.backends.cuda.compile import compile_for_target, lint

    spec, target = SPECS["decode"]
    src = _source(spec, target)
    decode = [m for m in CUDA_MUTANTS if m.spec == "decode"]
    assert len(decode) == 2
    for m in decode:
        text = m.apply(src)
        assert text != src
        lint(text)
        reports = compile_for_target(text, get_target(target), tmp_path / m.name)
        assert len(reports) == 2 and all(r.spill_bytes == 0 for r in reports), m.name


def test_generate_with_the_cuda_backend_on_a_cpu_machine(tmp_path):
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="fp16", causal=True)
    result = generate(spec, get_target("t4"), tmp_path / "out", backend="cuda", run_verification=False)
    assert result.ok and result.backend.name == "cuda"
    assert (tmp_path / "out" / "kernel_cuda.cu").is_file() and (tmp_path / "out" / "build" / "attn_fwd.t4.cubin").is_file()
    (r,) = result.compile_reports
    assert r.tensor_cores_used and "fma-only" not in r.instructions and "HMMA.1688" in r.notes[1]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["backend_reason"] == "cuda: asked for by name"
    (e,) = report["estimate"]  # the roofline at T4's mma.sync fp16 rate, beside the kernel in report.md too
    assert e["kernel"] == "attn_fwd" and e["rate_tflops"] == 65.0 and "mma.sync fp16" in e["rate"]
    assert "attn_fwd: estimate (roofline, not measured)" in (tmp_path / "out" / "report.md").read_text()
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(AttnforgeError, match="no CPU interpreter|no CUDA GPU"):
            cuda.load(tmp_path / "out" / "kernel_cuda.cu")


def test_auto_prefers_cuda_on_sm75_only_with_a_gpu_to_verify_on(monkeypatch):
    import torch

    from attnforge.backends import _auto_order, auto_reason

    spec = AttentionSpec(heads=4, head_dim=64, dtype="fp16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_backend("auto", spec, get_target("t4")).name == "triton"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _auto_order(get_target("t4"))[0] == "cuda" and choose_backend("auto", spec, get_target("t4")) is cuda
    assert "no tensor-core instructions" in auto_reason(get_target("t4"))
    assert choose_backend("auto", spec, get_target("a100")).name == "triton"
    # bf16 on a T4: the CUDA backend refuses it (no bf16 MMA on sm_75), so auto tries Triton
    assert cuda.unsupported(AttentionSpec(heads=4, head_dim=64, dtype="bf16"), get_target("t4")) is not None


def test_packed_views_translate_to_per_row_pointers_and_packed_specs_are_accepted():
    """A packed view's rows are (head, position) pairs, each with its own pointer (pack 1: the
    head of the view's offset at every position); a spec the planner packs is supported."""
    from pathlib import Path

    import attnforge.tl as tl_package
    from attnforge.backends import get_backend
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.tl.parser import parse

    text = (Path(tl_package.__file__).parent / "library" / "gqa_fwd.tl").read_text()
    line = next(line for line in text.splitlines() if line.startswith("Allocate Q in global"))
    backend = get_backend("cuda")
    src = backend.translate(parse(text.replace(line, line + " pack 1")), head_dim=64, head_dim_v=64).source
    assert "Q + (long long)((af_vr) % 1) * stride_q1 + (long long)((af_vr) / 1) * stride_q2 + af_col" in src
    speculative = AttentionSpec(heads=8, kv_heads=2, head_dim=64, seqlen_q=4, seqlen_k=100, dtype="fp16")
    assert backend.unsupported(speculative, get_target("a100")) is None


@pytest.mark.parametrize("cuda_ms, cuda_shape, cuda_device, chosen", [
    (0.20, "B=16 Hq=8/Hkv=8 Sq=1024 Sk=1024", "NVIDIA A100", "cuda"),  # timed alike, faster: chosen
    (0.30, "B=16 Hq=8/Hkv=8 Sq=1024 Sk=1024", "NVIDIA A100", "triton"),  # timed alike, slower
    (0.20, "B=4 Hq=8/Hkv=8 Sq=4096 Sk=4096", "NVIDIA A100", "triton"),  # another shape: not comparable
    (0.20, "B=16 Hq=8/Hkv=8 Sq=1024 Sk=1024", "NVIDIA L4", "triton"),  # another GPU: not comparable
])
def test_auto_takes_the_tuning_databases_faster_backend_on_sm80(tmp_path, monkeypatch, cuda_ms, cuda_shape, cuda_device, chosen):
    from attnforge.backends import choose_backend_and_reason
    from attnforge.tune import database

    monkeypatch.setenv("ATTNFORGE_TUNING", str(tmp_path / "tuning.json"))
    spec = AttentionSpec(heads=8, head_dim=64, dtype="fp16", causal=True)
    for backend, ms, shape, device in (("triton", 0.25, "B=16 Hq=8/Hkv=8 Sq=1024 Sk=1024", "NVIDIA A100"), ("cuda", cuda_ms, cuda_shape, cuda_device)):
        database.record(database.Entry(target="a100", backend=backend, spec=database.spec_key(spec), seq=database.seq_bucket(spec),
                                       params=dict(BM=64, BN=64, warps=4, stages=2), ms=ms, planner_ms=None, device=device,
                                       shape=shape, measured="test", kind="prefill"))
    backend, reason = choose_backend_and_reason("auto", spec, get_target("a100"))
    assert backend.name == chosen
    assert ("tuning database's fastest" in reason) == (cuda_shape.startswith("B=16") and cuda_device == "NVIDIA A100")


def test_the_gpu_mutant_check_builds_before_the_child_and_its_deadline(monkeypatch, tmp_path):
    """The CUDA GPU check builds each mutant here (nvcc, cached by content) before the child that verifies it starts, so
    that the child's deadline times verification, not nvcc on a loaded machine (run 15: a fixed deadline that also took
    in a build took slow builds for hangs). The child is stubbed: it only looks whether the cubin is already there."""
    import argparse
    import types

    from attnforge.backends.cuda import gpucheck
    from attnforge.backends.cuda.compile import compile_cubin
    from attnforge.selftest import child, mutants

    (first,) = [m for m in mutants.CUDA_MUTANTS if m.name == "cuda_cp_async_wait_missing"]
    monkeypatch.setattr(mutants, "CUDA_MUTANTS", (first,))
    monkeypatch.setattr(gpucheck.torch, "cuda", types.SimpleNamespace(get_device_capability=lambda *a: (9, 0)))
    seen = []

    def child_stub(module, path, spec_key, params, deadline_s, extra=()):
        seen.append(compile_cubin(Path(path).read_text(), "sm_90", "native")[3])  # (cubin, ptx, seconds, cached)
        return False, True, "FAILED (stub)"

    monkeypatch.setattr(child, "verify_in_child", child_stub)
    rows = gpucheck.phase_mutants(argparse.Namespace(target="h200"), tmp_path, 0.0)
    assert seen == [True] and rows[0]["killed_by_gpu"] and rows[0]["mutant"] == first.name
