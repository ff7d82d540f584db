"""Translator strategies (TL parameters tma, persistent, ws) and the K/V loop split: each changes
how the kernel is written, never what it computes."""

from __future__ import annotations

import pytest
import torch

import attnforge
from attnforge import AttentionSpec, get_target
from attnforge.api import tma_compatible
from attnforge.reference import attention_reference, relative_error
from attnforge.errors import TranslateError
from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.plan.builtin import candidates, plan, prefill_source
from attnforge.tl.parser import parse
from attnforge.backends.triton import translate
from attnforge.verify import CaseShape, verify

SHAPES = [CaseShape(1, 4, 2, 37, 53), CaseShape(2, 4, 2, 70, 45, "bshd"), CaseShape(1, 4, 2, 1, 40)]


def _kernel(tmp_path, spec, params, split=True, target="h100"):
    module = translate(parse(prefill_source(spec, get_target(target), params, split=split)), head_dim=spec.head_dim, head_dim_v=spec.head_dim_v)
    path = tmp_path / "k.py"
    path.write_text(module.source)
    return GeneratedKernel(path, interpret=True), module


@pytest.mark.parametrize("strategy", [dict(tma=1), dict(persistent=1), dict(tma=1, persistent=1), dict()])
@pytest.mark.parametrize("fields", [dict(causal=True), dict(window_left=9, window_right=4), dict(causal=True, causal_align="top_left")],
                         ids=["causal", "window", "topleft"])
def test_strategies_compute_the_same_function(tmp_path, strategy, fields):
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="bf16", **fields)
    params = dict(BM=16, BN=16, warps=4, stages=2, **strategy)
    kernel, module = _kernel(tmp_path, spec, params)
    assert ("q_desc.load" in module.source) == bool(strategy.get("tma"))
    assert ("for tile in tl.range(" in module.source) == bool(strategy.get("persistent"))
    record = verify(kernel, spec, params, shapes=SHAPES)
    assert record.passed, [(c.shape, c.err_o, c.err_lse, c.error) for c in record.cases]


def test_split_loop_has_an_unmasked_off_diagonal_part(tmp_path):
    spec = AttentionSpec(heads=2, head_dim=32, dtype="fp16", causal=True)
    params = dict(BM=16, BN=16, warps=4, stages=2)
    text = prefill_source(spec, get_target("h100"), params)
    loops = text.split("\nfor j = ")[1:]
    assert len(loops) == 2 and "Mask" not in loops[0] and "Compute Mask" in loops[1]
    _, module = _kernel(tmp_path, spec, params)
    # the off-diagonal loop proves its tiles inside Sk: its K/V loads carry no mask
    assert "Ks = tl.load(K + Ks_rows[:, None] * stride_k2 + Ks_cols[None, :] * stride_k3)" in module.source
    unsplit = prefill_source(spec, get_target("h100"), params, split=False)
    assert unsplit.count("\nfor j = ") == 1


def test_tma_descriptor_refuses_strides_it_cannot_take(tmp_path):
    spec = AttentionSpec(heads=2, head_dim=32, dtype="fp16")
    kernel, _ = _kernel(tmp_path, spec, dict(BM=16, BN=16, warps=4, stages=2, tma=1))
    q = torch.randn(1, 2, 20, 33, dtype=torch.float16)[..., 1:]  # data misaligned by 2 bytes
    k = torch.randn(1, 2, 20, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="TMA"):
        kernel(q, k, k.clone())


def test_attention_falls_back_to_pointer_loads_for_unaligned_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path / "cache"))
    base = torch.randn(1, 2, 20, 33, dtype=torch.float16)
    q = base[..., 1:]
    k = torch.randn(1, 2, 20, 32, dtype=torch.float16)
    assert not tma_compatible(q, k, k) and tma_compatible(k)
    o = attnforge.attention(q, k, k, causal=True)
    ref_o, _ = attention_reference(*(t.double().numpy() for t in (q, k, k)), causal=True)
    assert relative_error(o.double().numpy(), ref_o) < 5e-3  # the float64 reference, not another attnforge kernel


def test_planner_uses_tma_only_where_it_can():
    spec = AttentionSpec(heads=2, head_dim=64, dtype="bf16")
    assert candidates(spec, get_target("h100"))[1][0].params.get("tma") == 1
    assert "tma" not in candidates(spec, get_target("a100"))[1][0].params
    assert "tma" not in candidates(spec, get_target("h100"), tma=False)[1][0].params
    odd = AttentionSpec(heads=2, head_dim=36, dtype="bf16")  # 72-byte rows: not 16-byte units
    assert "tma" not in candidates(odd, get_target("h100"))[1][0].params
    assert plan(spec, get_target("h100")).params["tma"] == 1


@pytest.mark.parametrize("params, target, message", [
    (dict(tma=1), "a100", "TMA"),
    (dict(ws=1), "h100", "warp_specialize"),
    (dict(tma=2), "h100", "0 or 1"),
])
def test_strategies_refused_where_they_cannot_work(params, target, message):
    spec = AttentionSpec(heads=2, head_dim=32, dtype="fp16")
    program = parse(prefill_source(spec, get_target(target), dict(BM=16, BN=16, warps=4, stages=2, **params)))
    with pytest.raises(TranslateError, match=message):
        translate(program, head_dim=32)


def test_warp_specialize_compiles_for_blackwell(tmp_path):
    """ws = 1 is refused on sm_90 (above) but compiles for sm_100 (tcgen05); not run here."""
    from attnforge.backends.triton.compile import compile_for_target

    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True)
    target = get_target("b200")
    module = translate(parse(prefill_source(spec, target, dict(BM=128, BN=64, warps=4, stages=2, tma=1, ws=1))), head_dim=64)
    assert "warp_specialize=True" in module.source
    path = tmp_path / "ws.py"
    path.write_text(module.source)
    info = module.kernels[0]
    sig, const = info.signature()
    report, _ = compile_for_target(getattr(GeneratedKernel(path, interpret=False).module, info.name), sig, const, target,
                                   info.num_warps, info.num_stages, divisible=info.divisible_strides((64,)))
    assert "tcgen05" in report.instructions and "tma" in report.instructions
