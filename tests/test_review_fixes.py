"""Inputs that once went wrong silently or crashed: mismatched shapes, windows near 2^31, int32
overflow in modifiers, unknown call arguments, fp8, compile failures that are not about fit."""

from __future__ import annotations

import pytest
import torch

import attnforge
from attnforge import AttentionSpec, get_target
from attnforge.errors import AttnforgeError, SpecError, TargetError
from attnforge.generate import generate
from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.plan.builtin import plan, prefill_source
from attnforge.reference import attention_reference, relative_error
from attnforge.tl.parser import parse
from attnforge.backends.triton import translate
from attnforge.verify import CaseShape, verify


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path_factory.getbasetemp() / "kernel-cache"))


def _t(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("shapes, words", [
    (((2, 2, 40, 32), (1, 2, 50, 32), (1, 2, 50, 32)), "batch"),
    (((1, 2, 40, 32), (1, 2, 50, 32), (1, 2, 30, 32)), "length"),
    (((1, 4, 40, 32), (1, 2, 50, 32), (1, 1, 50, 32)), "heads"),
    (((1, 3, 40, 32), (1, 2, 50, 32), (1, 2, 50, 32)), "heads"),
    (((1, 2, 40, 32), (1, 2, 50, 16), (1, 2, 50, 32)), "head dim"),
])
def test_attention_refuses_mismatched_shapes(shapes, words):
    q, k, v = (_t(*s) for s in shapes)
    with pytest.raises(AttnforgeError, match=words):
        attnforge.attention(q, k, v, causal=True)


def test_generated_launcher_refuses_outputs_of_the_wrong_shape(tmp_path):
    spec = AttentionSpec(heads=2, head_dim=32, dtype="fp16")
    assert generate(spec, get_target("h100"), tmp_path, run_verification=False).ok
    kernel = attnforge.load(tmp_path)
    q, k = _t(1, 2, 40, 32), _t(1, 2, 50, 32)
    with pytest.raises(ValueError, match="o has shape"):
        kernel.launch(q, k, k, torch.zeros(1, 1, 40, 32, dtype=torch.float16), torch.zeros(1, 2, 40), scale=0.1)
    with pytest.raises(AttnforgeError, match="takes no softcap"):
        kernel(q, k, k, softcap=1.0)  # a feature the kernel was not generated for is refused, not ignored


@pytest.mark.parametrize("window", [(None, 2**31 - 1), (2**31 - 1, 0)])
def test_windows_wider_than_the_sequence_are_unbounded(window):
    q, k, v = _t(1, 2, 50, 32, seed=1), _t(1, 2, 40, 32, seed=2), _t(1, 2, 40, 32, seed=3)
    o = attnforge.attention(q, k, v, window=window)
    ref, _ = attention_reference(*(t.double().numpy() for t in (q, k, v)), scale=32 ** -0.5, window=window)
    assert relative_error(o.double().numpy(), ref) < 5e-3


def test_index_products_past_int32_match_the_int64_reference(tmp_path):
    spec = AttentionSpec(heads=2, head_dim=16, dtype="fp32", score_mod="score + ((q_idx * kv_idx * 1000000) % 7) * 0.1")
    p = plan(spec, get_target("h100"))
    module = translate(parse(prefill_source(spec, get_target("h100"), {**p.params, "BM": 16, "BN": 16})), head_dim=16)
    lines = module.source.splitlines()
    mod_lines = [lines[i + 1] for i, line in enumerate(lines) if line.strip().startswith("# TL: Compute ScoreMod")]
    assert mod_lines and all("tl.int64" in line for line in mod_lines)
    path = tmp_path / "k.py"
    path.write_text(module.source)
    record = verify(GeneratedKernel(path, interpret=True), spec, p.params, shapes=[CaseShape(1, 2, 2, 61, 67)])
    assert record.passed, [(c.err_o, c.error) for c in record.cases]


def test_a_loop_that_may_start_below_zero_keeps_its_bounds_mask():
    spec = AttentionSpec(heads=2, head_dim=32, dtype="fp16")
    text = prefill_source(spec, get_target("h100"), dict(BM=16, BN=16, warps=4, stages=2)).replace("for j = 0 : Sk // BN", "for j = 0 - 1 : Sk // BN")
    assert "for j = 0 - 1 : Sk // BN" in text
    source = translate(parse(text), head_dim=32).source
    first_loop = source.split("for j in")[1]
    assert "mask=(Ks_rows < Sk)" in first_loop.split("for j in")[0]


def test_fp8_is_refused_up_front():
    with pytest.raises(SpecError, match="dtype"):
        plan(AttentionSpec(heads=2, head_dim=64, dtype="fp8e4m3"), get_target("h100"))


def test_alibi_slopes_tensor_inside_torch_compile_fullgraph():
    q, k, v = _t(1, 4, 21, 32, seed=4), _t(1, 2, 33, 32, seed=5), _t(1, 2, 33, 32, seed=6)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    f = torch.compile(lambda q, k, v, s: attnforge.attention(q, k, v, causal=True, alibi_slopes=s), backend="aot_eager", fullgraph=True)
    o = f(q, k, v, slopes)
    ref, _ = attention_reference(*(t.double().numpy() for t in (q, k, v)), scale=32 ** -0.5, causal=True, alibi_slopes=slopes.double().numpy())
    assert relative_error(o.double().numpy(), ref) < 5e-3
    with pytest.raises(AttnforgeError, match="one float per query head"):
        attnforge.attention(q, k, v, alibi_slopes=torch.ones(3))


def test_only_fit_problems_send_the_planner_to_its_next_candidate(tmp_path, monkeypatch):
    import attnforge.compile_report as ct

    def missing() -> str:
        raise TargetError("cuobjdump not found", where="compile")
    monkeypatch.setattr(ct, "find_cuobjdump", missing)
    result = generate(AttentionSpec(heads=2, head_dim=32, dtype="fp16"), get_target("h100"), tmp_path, run_verification=False)
    assert result.failed_step == "compile" and "cuobjdump" in result.error
    assert not result.rejected  # not retried with smaller tiles
