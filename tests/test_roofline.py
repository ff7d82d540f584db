"""The performance estimate for GPUs not at hand (roofline.py) and the backend choice in the
reports: both written into report.json, report.md and the generate summary, for either backend."""

from __future__ import annotations

import json

import pytest

from attnforge import AttentionSpec, get_target
from attnforge.backends import choose_backend, choose_backend_and_reason
from attnforge.compile_report import CompileReport
from attnforge.roofline import MMA_SYNC_FRACTION, compute_rate, estimate, estimates, min_bytes

SPEC = AttentionSpec(heads=32, kv_heads=8, head_dim=128, dtype="bf16", causal=True, seqlen_q=4096)


def _report(target: str, *tags: str, kernel: str = "attn_fwd") -> CompileReport:
    t = get_target(target)
    return CompileReport(kernel, t.name, t.sm, t.ptx_arch, 8, 2, 0, 128, 0, tuple(sorted(tags)),
                         bool(set(tags) & {"wgmma", "mma.sync", "tcgen05"}), (), 0.0)


@pytest.mark.parametrize("target, tags, rate, words", [
    ("h100", ("wgmma", "tma"), 989.4, "wgmma bf16 dense peak"),
    ("h100", ("mma.sync", "cp.async"), 989.4 * MMA_SYNC_FRACTION, "about 2/3 of the bf16 wgmma"),  # Hopper's mma.sync is not its peak
    ("a100", ("mma.sync", "cp.async"), 312.0, "mma.sync bf16 dense peak"),
    ("b200", ("tcgen05",), 2250.0, "tcgen05 bf16"),
    ("b200", ("mma.sync",), 2250.0 * MMA_SYNC_FRACTION, "assumed as on Hopper"),
    ("a100", ("fma-only",), 19.5, "fp32 FMA peak"),  # tensor cores on the chip, none in the kernel
])
def test_the_compute_roof_is_the_rate_of_the_instructions_the_kernel_uses(target, tags, rate, words):
    tflops, what = compute_rate(SPEC, get_target(target), tags)
    assert tflops == pytest.approx(rate) and words in what


def test_fp16_on_turing_and_tf32_and_a_kernel_without_gemm():
    t4 = get_target("t4")
    assert compute_rate(AttentionSpec(heads=4, head_dim=64, dtype="fp16"), t4, ("mma.sync",)) == (65.0, "mma.sync fp16 dense peak (datasheet)")
    assert compute_rate(AttentionSpec(heads=4, head_dim=64, dtype="fp32", allow_tf32=True), get_target("a100"), ("mma.sync",))[0] == 156.0
    assert "lists no bf16" in compute_rate(SPEC, get_target("v100"), ("mma.sync",))[1]  # no bf16 rate in the table: FMA
    assert compute_rate(SPEC, t4, ()) is None  # the split-KV merge: no GEMM, no estimate
    assert estimate(SPEC, t4, _report("t4")) is None


def test_the_estimate_is_the_larger_of_compute_and_memory_time():
    h100 = get_target("h100")
    e = estimate(SPEC, h100, _report("h100", "wgmma"))
    assert e.flops == SPEC.flops_fwd and e.bound == "compute"
    assert e.ms == pytest.approx(SPEC.flops_fwd / 989.4e12 * 1e3) and e.ms >= e.memory_ms
    # bytes: Q and O (B*Hq*Sq*D), K and V (B*Hkv*Sk*D) in bf16, the LSE in fp32
    assert min_bytes(SPEC) == 2 * 128 * (2 * 32 * 4096 + 2 * 8 * 4096) + 4 * 32 * 4096
    decode = AttentionSpec(heads=32, kv_heads=8, head_dim=128, dtype="bf16", batch=8, seqlen_q=1, seqlen_k=8192)
    d = estimate(decode, h100, _report("h100", "mma.sync"))
    assert d.bound == "memory" and d.ms == pytest.approx(min_bytes(decode) / 3350e9 * 1e3)
    line = d.line()
    assert line.startswith("estimate (roofline, not measured) at B=8 Hq=32/Hkv=8 Sq=1 Sk=8192 D=128") and "memory-bound" in line
    assert set(estimates(decode, h100, [_report("h100", "mma.sync"), _report("h100", kernel="merge")])) == {"attn_fwd", "merge"}


def test_the_backend_choice_says_why(monkeypatch):
    import torch

    spec = AttentionSpec(heads=4, head_dim=64, dtype="fp16")
    backend, why = choose_backend_and_reason("cuda", spec, get_target("a100"))
    assert backend.name == "cuda" and why == "cuda: asked for by name"
    backend, why = choose_backend_and_reason("auto", spec, get_target("h100"))
    assert backend is choose_backend("auto", spec, get_target("h100")) and why.startswith("triton: chosen by auto: Triton first")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    backend, why = choose_backend_and_reason("auto", spec, get_target("t4"))
    assert backend.name == "triton" and "without a local GPU" in why and "--backend cuda" in why
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    backend, why = choose_backend_and_reason("auto", spec, get_target("t4"))
    assert backend.name == "cuda" and "no tensor-core instructions before sm_80" in why
    # bf16 on a T4: cuda first, passed over with its reason, then Triton
    backend, why = choose_backend_and_reason("auto", AttentionSpec(heads=4, head_dim=64, dtype="bf16"), get_target("t4"))
    assert backend.name == "triton" and "passed over cuda: bf16 on t4" in why


def test_reports_and_summary_carry_the_choice_and_the_estimate(tmp_path, capsys, monkeypatch):
    from attnforge.cli import main

    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    code = main(["generate", "--target", "a100", "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--dtype", "fp16",
                 "--seqlen-q", "2048", "--no-verify", "--out", str(out)])
    assert code == 3
    printed = capsys.readouterr().out
    assert "backend triton: chosen by auto" in printed and "estimate attn_fwd" in printed and "roofline, not measured" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["backend"] == "triton" and report["backend_reason"].startswith("triton: chosen by auto: ")
    (e,) = report["estimate"]
    assert e["kind"] == "estimate" and e["kernel"] == "attn_fwd" and e["target"] == "a100" and e["rate_tflops"] == 312.0
    assert e["shape"] == "B=1 Hq=4/Hkv=2 Sq=2048 Sk=2048 D=64"
    md = (out / "report.md").read_text()
    assert "- backend chosen: triton: chosen by auto" in md and "| estimate (roofline, not measured) |" in md
    assert "- attn_fwd: estimate (roofline, not measured) at B=1 Hq=4/Hkv=2 Sq=2048" in md
