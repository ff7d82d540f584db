"""The main job end to end on the CPU: plan, check, interpret, translate, compile for real targets
(no GPU), verify in Triton's interpreter, and the reports; plus the compile-time rejections."""

from __future__ import annotations

import json
import re

import pytest

from attnforge import AttentionSpec, get_target
from attnforge.cli import main
from attnforge.backends.triton.compile import compile_for_target
from attnforge.compile_report import check_fits
from attnforge.errors import TargetError
from attnforge.generate import generate
from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.plan.builtin import prefill_source
from attnforge.tl.parser import parse
from attnforge.backends.triton import translate


def test_generate_writes_a_verified_kernel_and_reports(tmp_path):
    spec = AttentionSpec(heads=8, kv_heads=2, head_dim=64, dtype="bf16", causal=True)
    events = []
    result = generate(spec, get_target("h100"), tmp_path, progress=lambda e, t: events.append((e, t)))
    assert result.ok, result.error
    for name in ("kernel.tl", "kernel_triton.py", "report.json", "report.md"):
        assert (tmp_path / name).is_file()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["verification"]["passed"]
    assert [s["name"] for s in report["steps"]] == ["plan", "check", "interpret", "translate", "compile", "verify", "report"]
    assert all(s["seconds"] >= 0 for s in report["steps"])
    assert "wgmma" in report["compile"][0]["instructions"]
    assert report["compile"][0]["spill_bytes"] == 0
    assert report["spec"]["causal"] is True and report["target"]["name"] == "h100"
    assert report["verification"]["cases"] and all(c["passed"] for c in report["verification"]["cases"])
    assert "## Verification" in (tmp_path / "report.md").read_text()
    assert ("start", "verify") in events  # progress per step
    # The kernel.tl on disk parses and is the program that was translated.
    assert parse((tmp_path / "kernel.tl").read_text()).kernels[0].name == "attn_fwd"


def test_generated_kernel_compiles_for_sm80_and_sm90(tmp_path):
    spec = AttentionSpec(heads=4, head_dim=128, dtype="fp16", causal=True)
    for name, want, absent in (("a100", "mma.sync", "wgmma"), ("h100", "wgmma", "mma.sync")):
        target = get_target(name)
        result = generate(spec, target, tmp_path / name, run_verification=False)
        assert result.ok, result.error
        for report in result.compile_reports:
            assert want in report.instructions and absent not in report.instructions
            assert report.tensor_cores_used and report.spill_bytes == 0
            check_fits(report, target)  # what generate kept fits
        ptx = (tmp_path / name / "build" / f"attn_fwd.{name}.ptx").read_text()
        assert ("wgmma.mma_async" in ptx) == (name == "h100")


def test_tiles_too_large_for_the_target_are_rejected_with_what_to_change(tmp_path):
    spec = AttentionSpec(heads=4, head_dim=256, dtype="bf16")
    target = get_target("l4")  # 99 KiB of shared memory per block
    program = parse(prefill_source(spec, target, dict(BM=128, BN=128, warps=8, stages=3)))
    module = translate(program, head_dim=256)
    path = tmp_path / "big.py"
    path.write_text(module.source)
    info = module.kernels[0]
    fn = getattr(GeneratedKernel(path, interpret=False).module, info.name)
    sig, const = info.signature()
    report, _ = compile_for_target(fn, sig, const, target, info.num_warps, info.num_stages, divisible=info.divisible_strides((256,)))
    with pytest.raises(TargetError) as err:
        check_fits(report, target)
    message = str(err.value)
    # BM=BN=128 at D=256 with 3 stages needs far more than the L4's 99 KiB: the shared-memory problem is named
    assert re.search(r"shared memory: kernel '\w+' uses \d+ B \([\d.]+ KiB\) per block but l4 \(sm_89\) allows 101376 B", message), message
    assert "lower BN/BM or the pipeline stages" in message  # it says what to change


def test_turing_report_says_tensor_cores_are_not_used(tmp_path):
    spec = AttentionSpec(heads=2, head_dim=64, dtype="fp16")
    result = generate(spec, get_target("t4"), tmp_path, run_verification=False)
    assert result.compile_reports, result.error
    assert not any(r.tensor_cores_used for r in result.compile_reports)
    assert any("tensor-core" in n for r in result.compile_reports for n in r.notes)


def test_a_failing_step_is_named_and_earlier_output_stays(tmp_path):
    # bf16 has no tensor-core instruction on Turing: the planner's check step refuses it.
    spec = AttentionSpec(heads=2, head_dim=64, dtype="bf16")
    result = generate(spec, get_target("t4"), tmp_path)
    assert not result.ok and result.failed_step == "plan"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["failed_step"] == "plan" and "TL501" in report["error"]
    assert "FAILED at step plan" in (tmp_path / "report.md").read_text()


def test_cli_generate_end_to_end(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["generate", "--target", "h100", "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--dtype", "fp16",
               "--causal", "--window=48,0", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "verified in the interpreter on the CPU" in text and "verify" in text
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] and report["verified"] and report["verification"]["mode"] == "interpreter"


def test_cli_generate_bad_input_names_the_field(tmp_path, capsys):
    rc = main(["generate", "--target", "h100", "--heads", "6", "--kv-heads", "4", "--head-dim", "64", "--out", str(tmp_path)])
    assert rc == 2
    assert "kv_heads" in capsys.readouterr().err


def test_cli_generate_without_gpu_uses_the_documented_default(tmp_path, capsys):
    rc = main(["generate", "--heads", "2", "--head-dim", "32", "--dtype", "fp16", "--out", str(tmp_path), "--no-verify"])
    text = capsys.readouterr().out
    assert rc == 3  # generated, never reported as verified
    assert "h100" in text and "NOT verified" in text
    assert json.loads((tmp_path / "report.json").read_text())["target"]["name"] == "h100"


def test_a_plan_that_needs_at_least_what_spilled_is_not_compiled(tmp_path):
    """Issue 9: a compile that spills predicts the spill of every later candidate with tiles as
    large, warps as few and any pipeline stages; those are skipped, not compiled (an fp32 D=64
    spec on a CPU compiled 13 candidates, 12 of which spilled, 3 per tile shape)."""
    from attnforge.backends.triton import TritonBackend
    from attnforge.compile_report import CompileReport

    compiled: list[tuple[int, int, int, int]] = []

    class Spilling(TritonBackend):
        def compile(self, translation, source_path, target, build_dir):
            source = translation.source
            bm, bn, warps, stages = (int(re.search(rf"\b{k}=(\d+)", source).group(1)) for k in ("BM", "BN", "num_warps", "num_stages"))
            compiled.append((bm, bn, warps, stages))
            spill = 0 if bm * bn <= 128 * 32 else (64 if (bm, bn) == (128, 64) and stages == 3 else 600)
            return [CompileReport("attn_fwd", target.name, target.sm, "sm_90a", warps, stages, 1024, 255 if spill else 128, spill,
                                  ("wgmma",), True, (), 0.0)]

    spec = AttentionSpec(heads=2, seqlen_q=64, head_dim=64, dtype="fp16")
    result = generate(spec, get_target("h100"), tmp_path, backend=Spilling(), run_verification=False)
    assert result.ok, result.error
    # BM=128, BN=64 spilled 64 B at 3 stages: too little to predict 2 stages, which spilled 600 B and predicted 1 stage
    tiles = [c[:2] for c in compiled]
    assert tiles.count((128, 128)) == 1 and tiles.count((128, 64)) == 2, compiled
    assert result.plan.params["BM"] * result.plan.params["BN"] <= 128 * 32
    skipped = [tuple(int(x) for x in re.match(r"BM=(\d+), BN=(\d+), warps=(\d+), stages=(\d+)", r).groups())
               for r in result.rejected if "not compiled: needs at least the registers of" in r]
    assert set(skipped) == {(128, 128, 4, 2), (128, 128, 4, 1), (128, 64, 4, 1)}, result.rejected
    assert result.rejected_compiles == len(compiled) - 1
