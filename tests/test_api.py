"""attnforge.attention and attnforge.load on the CPU (kernels run in Triton's interpreter)."""

from __future__ import annotations

import math
import multiprocessing as mp
import os

import numpy as np
import pytest
import torch

import attnforge
from attnforge.cache import build_or_load, entry_key, spec_bucket
from attnforge.errors import AttnforgeError, SpecError
from attnforge.reference import attention_reference, lse_error, relative_error
from attnforge.spec import AttentionSpec, alibi_slopes_for


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path_factory.getbasetemp() / "kernel-cache"))


def _qkv(B=1, Hq=4, Hkv=2, Sq=29, Sk=45, D=32, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, h, s, D, generator=g).to(dtype) for h, s in ((Hq, Sq), (Hkv, Sk), (Hkv, Sk)))


def _ref(q, k, v, **kw):
    return attention_reference(*(t.double().numpy() for t in (q, k, v)), **kw)


def test_attention_matches_the_reference_with_lse():
    q, k, v = _qkv()
    o, lse = attnforge.attention(q, k, v, causal=True, return_lse=True)
    ref_o, ref_lse = _ref(q, k, v, scale=1 / math.sqrt(32), causal=True)
    assert o.shape == (1, 4, 29, 32) and o.dtype == torch.float16
    assert relative_error(o.double().numpy(), ref_o) < 5e-3
    assert lse_error(lse.double().numpy(), ref_lse) < 1e-5


def test_attention_bshd_layout_without_copies():
    q, k, v = _qkv(dtype=torch.bfloat16, seed=1)
    o = attnforge.attention(*(t.transpose(1, 2).contiguous() for t in (q, k, v)), layout="bshd", window=(7, 3))
    ref_o, _ = _ref(q, k, v, scale=1 / math.sqrt(32), window=(7, 3))
    assert o.shape == (1, 29, 4, 32)
    assert relative_error(o.transpose(1, 2).double().numpy(), ref_o) < 2e-2


def test_attention_with_alibi_softcap_and_expressions():
    q, k, v = _qkv(dtype=torch.float32, seed=2)
    o = attnforge.attention(q, k, v, causal=True, causal_align="top_left", alibi_slopes="auto", softcap=5.0,
                            score_mod="score - 0.01 * abs(q_idx - kv_idx)", mask_mod="kv_idx % 3 != 1", scale=0.3)
    ref_o, _ = _ref(q, k, v, scale=0.3, causal=True, causal_align="top_left", alibi_slopes=np.array(alibi_slopes_for(4)),
                    softcap=5.0, score_mod=lambda s, b, h, i, j: s - 0.01 * np.abs(i - j), mask_mod=lambda b, h, i, j: j % 3 != 1)
    assert relative_error(o.double().numpy(), ref_o) < 1e-4


def test_attention_decode_step():
    q, k, v = _qkv(B=2, Hq=8, Hkv=2, Sq=1, Sk=301, D=64, seed=3)
    o = attnforge.attention(q, k, v)
    ref_o, _ = _ref(q, k, v, scale=1 / 8)
    assert relative_error(o.double().numpy(), ref_o) < 5e-3


def test_inputs_that_require_grad_are_refused_not_detached():
    q, k, v = _qkv()
    q.requires_grad_()
    with pytest.raises(AttnforgeError, match="backward is not supported"):
        attnforge.attention(q, k, v)
    with torch.no_grad():
        attnforge.attention(q, k, v)  # inference is fine


@pytest.mark.parametrize("bad, field", [
    (dict(window="wide"), "window"),
    (dict(layout="sbhd"), "layout"),
    (dict(softcap=-1.0), "softcap"),
    (dict(score_mod="score +"), "score_mod"),
])
def test_bad_arguments_name_the_field(bad, field):
    q, k, v = _qkv()
    with pytest.raises((AttnforgeError, SpecError)) as err:
        attnforge.attention(q, k, v, **bad)
    assert field in str(err.value)


def test_mismatched_inputs_are_refused():
    q, k, v = _qkv()
    with pytest.raises(AttnforgeError, match="q is"):
        attnforge.attention(q, k.float(), v)
    with pytest.raises(AttnforgeError, match="4-d"):
        attnforge.attention(q[0], k, v)


def test_custom_op_runs_inside_torch_compile():
    q, k, v = _qkv(seed=4)
    compiled = torch.compile(lambda q, k, v: attnforge.attention(q, k, v, causal=True) * 2, backend="aot_eager", fullgraph=True)
    ref_o, _ = _ref(q, k, v, scale=1 / math.sqrt(32), causal=True)
    assert relative_error(compiled(q, k, v).double().numpy(), 2 * ref_o) < 5e-3  # the float64 reference, not attnforge itself
    assert hasattr(torch.ops.attnforge, "attention")


def test_load_a_generated_directory(tmp_path):
    from attnforge.generate import generate
    from attnforge import get_target

    spec = AttentionSpec(heads=2, head_dim=32, dtype="fp16")
    assert generate(spec, get_target("a100"), tmp_path, run_verification=False).ok
    kernel = attnforge.load(tmp_path)
    q, k, v = _qkv(Hq=2, Hkv=2, seed=5)
    o, lse = kernel(q, k, v)
    ref_o, _ = _ref(q, k, v, scale=1 / math.sqrt(32))
    assert relative_error(o.double().numpy(), ref_o) < 5e-3


def test_cache_bucket_ignores_runtime_values_but_not_features():
    a = AttentionSpec(batch=3, heads=8, kv_heads=2, seqlen_q=100, seqlen_k=77, head_dim=64, window_left=5, softcap=3.0)
    b = AttentionSpec(batch=1, heads=16, kv_heads=4, seqlen_q=999, seqlen_k=5, head_dim=64, window_left=50, softcap=9.0)
    c = AttentionSpec(batch=1, heads=16, kv_heads=4, seqlen_q=999, seqlen_k=5, head_dim=64, window_left=50)
    t = attnforge.get_target("h100")
    assert spec_bucket(a) == spec_bucket(b)
    assert entry_key(a, t) == entry_key(b, t) != entry_key(c, t)


def _build(root: str) -> str:
    return str(build_or_load(AttentionSpec(heads=2, head_dim=16, dtype="fp16"), attnforge.get_target("h100"), root=root, verify=False))


def test_cache_is_safe_under_concurrent_builders(tmp_path):
    with mp.get_context("spawn").Pool(2) as pool:
        paths = pool.map(_build, [str(tmp_path)] * 2)
    assert paths[0] == paths[1] and os.path.isfile(paths[0])
    entries = [p.name for p in tmp_path.iterdir()]
    assert not [e for e in entries if e.startswith(".building-")]  # no half-written entry is left
    assert len([e for e in entries if not e.startswith(".")]) == 1


def test_concurrent_builders_that_overlap_leave_one_entry(tmp_path, monkeypatch):
    """Both builders finish their build before either publishes it (a barrier holds them), so the
    second rename really does meet the first one's entry."""
    import threading

    from attnforge import cache

    barrier = threading.Barrier(2, timeout=120)
    published = []
    real = cache._publish

    def publish_together(built, entry, module):
        barrier.wait()  # both builds are complete here
        real(built, entry, module)
        published.append(entry)
    monkeypatch.setattr(cache, "_publish", publish_together)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(_build(str(tmp_path)))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(published) == 2 and len(results) == 2  # both reached the rename
    assert results[0] == results[1] and os.path.isfile(results[0])
    entries = [p.name for p in tmp_path.iterdir()]
    assert not [e for e in entries if e.startswith(".building-")]
    assert len([e for e in entries if not e.startswith(".")]) == 1
