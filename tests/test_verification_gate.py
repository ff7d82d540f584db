"""The verification gate judges against the spec, row by row, and says exactly what ran.

The cases here are the issue's: a program whose mask and claim were deleted, per-row bounds that
catch a 16-bit accumulator and a few zeroed rows, `generate --tl`, `attnforge verify DIR` on an
edited module, and the status line of a report.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from attnforge import AttentionSpec, get_target
from attnforge.cli import main
from attnforge.generate import generate
from attnforge.judge import claim_findings
from attnforge.numerics import o_row_bound, worst_row
from attnforge.reference import attention_reference
from attnforge.tl import catalog
from attnforge.tl.parser import parse

CAUSAL = AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="bf16", causal=True)
SHIPPED = catalog.source("gqa_causal_fwd")


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _generate(tmp_path: Path, tl: str, capsys, *extra: str) -> tuple[int, str]:
    code = main(["generate", "--target", "h100", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dtype", "bf16", "--causal",
                 "--tl", tl, "--out", str(tmp_path / "out"), *extra])
    return code, capsys.readouterr().out


def test_generate_tl_accepts_the_shipped_causal_program(tmp_path, capsys):
    code, out = _generate(tmp_path, _write(tmp_path, "gqa.tl", SHIPPED), capsys)
    assert code == 0, out
    assert "interpret: 2 shape(s) exact in float64 against the spec" in out
    assert "verified in the interpreter on the CPU" in out


def test_generate_tl_refuses_a_program_without_the_mask_and_its_claim(tmp_path, capsys):
    text = "\n".join(line for line in SHIPPED.splitlines() if not line.startswith("computes") and "Compute Mask" not in line) + "\n"
    code, out = _generate(tmp_path, _write(tmp_path, "nomask.tl", text), capsys, "--no-verify")
    assert code == 1
    assert re.search(r"FAIL interpret failed: .*nomask\.tl:\d+:\d+: TL601: the spec asks for causal = bottom_right.*mask", out), out


def test_generate_tl_refuses_a_claim_no_statement_implements(tmp_path, capsys):
    text = "\n".join(line for line in SHIPPED.splitlines() if "Compute Mask" not in line) + "\n"
    code, out = _generate(tmp_path, _write(tmp_path, "nomask.tl", text), capsys, "--no-verify")
    assert code == 1
    assert "TL606: gqa_causal_fwd claims causal but has no Compute Mask statement" in out


@pytest.mark.parametrize("spec_fields, code", [
    (dict(causal=True, causal_align="top_left"), "TL603"),  # claimed bottom-right
    (dict(causal=True, softcap=5.0), "TL601"),  # softcap asked for, not computed
    (dict(causal=False), "TL602"),  # causal computed, not asked for
    (dict(causal=True, dtype="fp16"), "TL604"),
])
def test_claims_are_compared_with_the_spec(spec_fields, code):
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=32, **{"dtype": "bf16", **spec_fields})
    codes = {f.code for f in claim_findings(parse(SHIPPED), spec)}
    assert code in codes


def test_shipped_program_has_no_claim_findings_for_its_spec():
    assert claim_findings(parse(SHIPPED), CAUSAL) == []


def _bf16(x: np.ndarray) -> np.ndarray:
    from attnforge.dtypes import round_to
    return round_to(x, "bf16")


def test_row_bound_catches_zeroed_rows_and_a_bf16_accumulator():
    """A 1 x 2 x 512 x 2048 causal bf16 case: the exact result passes, 16 zeroed rows of one head
    fail, and so does an accumulator rounded to bf16 after every 64-key tile."""
    rng = np.random.default_rng(0)
    q, k, v = (_bf16(rng.standard_normal(s)) for s in ((1, 2, 512, 64), (1, 2, 2048, 64), (1, 2, 2048, 64)))
    o, lse, p, l = attention_reference(q, k, v, causal=True, weights=True)
    score_err = np.zeros(lse.shape)
    bound = o_row_bound(p, l, v, o, score_err, "bf16", "bf16")
    # what a correct kernel does: P rounded to bf16 for the GEMM, O rounded at the end
    good = _bf16(np.einsum("bhqk,bhkd->bhqd", _bf16(p * l[..., None]), v) / l[..., None])
    assert worst_row(np.linalg.norm(good - o, axis=-1), bound)[1] <= 1.0
    zeroed = good.copy()
    zeroed[0, 1, -16:] = 0.0
    index, ratio = worst_row(np.linalg.norm(zeroed - o, axis=-1), bound)
    assert ratio > 1.0 and index[:2] == (0, 1) and index[2] >= 512 - 16
    acc = np.zeros_like(o)
    pl = _bf16(p * l[..., None])
    for j in range(0, 2048, 64):  # bf16 accumulator: rounded after each K/V tile
        acc = _bf16(acc + np.einsum("bhqk,bhkd->bhqd", pl[..., j:j + 64], v[:, :, j:j + 64]))
    sixteen_bit = _bf16(acc / l[..., None])
    assert worst_row(np.linalg.norm(sixteen_bit - o, axis=-1), bound)[1] > 1.0


def test_verify_dir_fails_when_the_module_drops_the_last_kv_tile(tmp_path, capsys):
    out = tmp_path / "k"
    assert main(["generate", "--target", "h100", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dtype", "bf16",
                 "--causal", "--no-verify", "--out", str(out)]) == 3
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "verified in the interpreter" in capsys.readouterr().out
    module = out / "kernel_triton.py"
    text = module.read_text()
    last_loop = re.findall(r"for j in tl\.range\((.*), num_stages=\d+\):", text)[-1]
    stop = last_loop.rsplit(", tl.cdiv(", 1)
    assert len(stop) == 2
    module.write_text(text.replace(last_loop, f"{stop[0]}, tl.cdiv({stop[1]} - 1", 1))
    assert main(["verify", str(out)]) == 1
    said = capsys.readouterr().out
    assert re.search(r"FAILED at verify: \d+ of \d+ case\(s\) run fail; first: .*O at b=\d+ h=\d+ row=\d+", said), said


def test_report_says_how_it_was_verified(tmp_path):
    result = generate(CAUSAL, get_target("a100"), tmp_path)
    assert result.verified, result.error
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verification"]["mode"] == "interpreter"
    assert report["status"] == "verified in the interpreter on the CPU; the code compiled for a100 (sm_80) was not run"
    assert "- status: **verified in the interpreter" in (tmp_path / "report.md").read_text()
    assert all(c["o_ratio"] <= 1.0 for c in report["verification"]["cases"])


class _CrashingOnSecondLaunch:
    """A "native" kernel (interpret False) whose second launch hits an illegal address, which
    ``sticky`` records: from then on the fake CUDA context is unusable."""

    interpret, device = False, "cpu"

    def __init__(self, sticky: list[str]):
        self.sticky, self.calls = sticky, 0

    def launch(self, q, k, vv, o, lse, **scalars):
        self.calls += 1
        if self.calls == 2:
            self.sticky.append("illegal address")
            raise RuntimeError("CUDA error: an illegal memory access was encountered")


def _on_a_fake_gpu(monkeypatch) -> None:
    import torch

    from attnforge import verify as v

    monkeypatch.setattr(v, "what_runs", lambda kernel, target: ("native", "natively on a fake GPU"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")


def test_a_native_crash_fails_the_cases_it_left_unreadable_instead_of_raising(monkeypatch):
    # On a GPU every case is launched before any is judged; an illegal address in one launch makes
    # the CUDA context unusable, so reading back the cases launched before it raises. That must be
    # failed cases naming the crash, not an exception out of verify (a traceback from generate).
    from attnforge import verify as v

    sticky: list[str] = []
    real_guards = v._guards_intact

    def guards(buf, outside):  # what reading a GPU tensor does once the context is gone
        if sticky:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real_guards(buf, outside)

    monkeypatch.setattr(v, "_guards_intact", guards)
    _on_a_fake_gpu(monkeypatch)
    spec = AttentionSpec(heads=2, kv_heads=1, seqlen_q=8, seqlen_k=8, head_dim=16, dtype="fp16")
    shapes = [v.CaseShape(1, 2, 1, 5, 7), v.CaseShape(1, 2, 1, 3, 9)]
    record = v.verify(_CrashingOnSecondLaunch(sticky), spec, {"BM": 16}, shapes=shapes)
    assert [c.passed for c in record.cases] == [False, False]
    assert "crashed first" in record.cases[0].error and "illegal memory access" in record.cases[1].error


def test_no_case_is_launched_after_a_native_crash(monkeypatch):
    # After an illegal address even drawing the next case's inputs raises (the context is gone):
    # found on the H200, where a CUDA mutant's fault made verify raise out of the GPU check. The
    # cases after the crash are not launched; they fail naming it.
    from attnforge import verify as v

    sticky: list[str] = []
    real_tensor, real_guards = v._tensor, v._guards_intact

    def dead_if_sticky(real):
        def call(*args, **kwargs):
            if sticky:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(v, "_tensor", dead_if_sticky(real_tensor))
    monkeypatch.setattr(v, "_guards_intact", dead_if_sticky(real_guards))
    _on_a_fake_gpu(monkeypatch)
    spec = AttentionSpec(heads=2, kv_heads=1, seqlen_q=8, seqlen_k=8, head_dim=16, dtype="fp16")
    shapes = [v.CaseShape(1, 2, 1, 5, 7), v.CaseShape(1, 2, 1, 3, 9), v.CaseShape(2, 2, 1, 4, 4), v.CaseShape(1, 2, 1, 6, 6)]
    kernel = _CrashingOnSecondLaunch(sticky)
    record = v.verify(kernel, spec, {"BM": 16}, shapes=shapes)
    assert kernel.calls == 2 and not record.passed and len(record.cases) == 4
    assert "illegal memory access" in record.cases[1].error
    assert all(c.error.startswith("not run: case 1x2/1x3x9 bhsd crashed first") for c in record.cases[2:])


@pytest.mark.parametrize("heads, kv_heads", [(8, 2), (4, 4), (16, 1)])
def test_decode_shapes_take_every_kind_of_split_a_launch_can(heads, kv_heads):
    """The split count is chosen at launch, per shape: the decode verification shapes and the
    judge's interpret shapes must between them take 1, 2 and more splits (a ragged last split
    included) in the CPU interpreters, and many on a GPU."""
    from attnforge.judge import interpret_shapes
    from attnforge.plan.builtin import candidates, packs_gqa
    from attnforge.splits import INTERPRETER_SM_COUNT, split_count
    from attnforge.verify import verification_shapes

    spec = AttentionSpec(heads=heads, kv_heads=kv_heads, head_dim=64, dtype="bf16", seqlen_q=1, seqlen_k=4096)
    params = candidates(spec, get_target("h100"), tma=False)[1][0].params
    bm, bn, packed = params["BM"], params["BN"], packs_gqa(spec)

    def splits(shapes, sms: int) -> set[tuple[int, int]]:
        """(splits, K/V tiles per split) of each shape, as the packed or plain program counts its programs."""
        out = set()
        for s in shapes:
            programs = s.B * s.Hkv * -(-(s.Hq // s.Hkv) * s.Sq // bm) if packed else s.B * s.Hq * -(-s.Sq // bm)
            tiles = -(-s.Sk // bn)
            n = split_count(programs, tiles, sms)
            out.add((n, -(-tiles // n)))
        return out

    verified = splits(verification_shapes(spec, params, native=False), INTERPRETER_SM_COUNT)
    assert {1, 2} <= {n for n, _ in verified} and any(n > 2 and per > 1 for n, per in verified)
    assert any(n == 1 and per > 1 for n, per in verified)  # one split over several tiles: the programs fill the SMs
    assert {n for n, _ in splits(interpret_shapes(spec, params), INTERPRETER_SM_COUNT)} >= {1, 2, 4}
    native = splits(verification_shapes(spec, params, native=True), 132)
    assert max(n for n, _ in native) == 64 and any(n == 1 and per > 1 for n, per in native)  # (one split after several tiles: on an H100/H200 too)


def test_a_read_past_the_keys_that_the_mask_weights_by_zero_is_caught_in_every_head(tmp_path, capsys):
    """The last V tile loaded whole (no row mask): the rows past Sk are multiplied by P = 0, so with inputs laid
    out head after head they were another head's finite rows and no output changed (the blind spot of stop 23's
    review). Verification's q, k and v sit inside NaN rows: the first head's output is wrong already."""
    out = tmp_path / "k"
    assert main(["generate", "--target", "a100", "--heads", "2", "--head-dim", "32", "--dtype", "fp16", "--window", "20,9",
                 "--no-verify", "--out", str(out)]) == 3
    module = out / "kernel_triton.py"
    text = module.read_text()
    unmasked = re.sub(r"(Vs = tl\.load\(V \+ .*), mask=\(Vs_rows < Sk\)\[:, None\], other=0\.0\)", r"\1)", text)
    assert unmasked != text
    module.write_text(unmasked)
    capsys.readouterr()
    assert main(["verify", str(out)]) == 1
    said = capsys.readouterr().out
    assert re.search(r"O at b=0 h=0 row=\d+", said), said


@pytest.mark.parametrize("seq, dim", [(53, 40), (64, 64), (37, 72), (1, 128)])
def test_verification_inputs_are_views_into_nan_rows_that_keep_a_contiguous_tensors_strides(seq, dim):
    """Each stride equal to a contiguous tensor's modulo 16 (what Triton specialises on), the data 16-byte aligned."""
    import torch

    from attnforge.verify import CaseShape, _input_guards_intact, _tensor

    for layout in ("bhsd", "bshd"):
        shape = CaseShape(B=2, Hq=3, Hkv=3, Sq=seq, Sk=seq, layout=layout)
        gen = torch.Generator("cpu").manual_seed(0)
        view, buf = _tensor(gen, shape, 3, seq, dim, torch.float16, "cpu", guard=128)
        plain = torch.empty(2, 3, seq, dim) if layout == "bhsd" else torch.empty(2, seq, 3, dim).transpose(1, 2)
        assert tuple(view.shape) == (2, 3, seq, dim) and not torch.isnan(view).any()
        assert [s % 16 for s in view.stride()] == [s % 16 for s in plain.stride()] and view.data_ptr() % 16 == 0
        assert _input_guards_intact(buf, layout, 128, seq)
        (buf.transpose(1, 2) if layout == "bshd" else buf)[1, 2, 128 + seq] = 0.0  # a write one row past a head's last
        assert not _input_guards_intact(buf, layout, 128, seq)
