"""The float64 reference against torch's SDPA math (an independent implementation) and the dtype rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnforge.dtypes import FORMATS, round_to
from attnforge.numerics import o_row_bound
from attnforge.reference import attention_reference, relative_error


def _sdpa(q, k, v, mask=None, scale=None):
    """torch's math SDPA in float64 with an explicit boolean mask (True keeps), GQA by repeat."""
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    group = tq.shape[1] // tk.shape[1]
    tk, tv = tk.repeat_interleave(group, 1), tv.repeat_interleave(group, 1)
    m = None if mask is None else torch.from_numpy(np.broadcast_to(mask, (q.shape[2], k.shape[2])).copy())
    return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=m, scale=scale).numpy()


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 2), hkv=st.integers(1, 3), group=st.sampled_from([1, 2, 4]),
    sq=st.integers(1, 40), sk=st.integers(1, 40), d=st.sampled_from([8, 16, 24]),
    causal=st.sampled_from([None, "bottom_right", "top_left"]), seed=st.integers(0, 2**16),
)
def test_matches_torch_sdpa(b, hkv, group, sq, sk, d, causal, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, hkv * group, sq, d))
    k = rng.standard_normal((b, hkv, sk, d))
    v = rng.standard_normal((b, hkv, sk, d + 8))
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    mask = None if causal is None else (j <= i + sk - sq) if causal == "bottom_right" else (j <= i)
    o, lse = attention_reference(q, k, v, causal=causal is not None, causal_align=causal or "bottom_right")
    if mask is not None and not mask.any(axis=1).all():
        # torch gives NaN for rows that see nothing; our convention is O = 0, LSE = -inf.
        empty = ~mask.any(axis=1)
        assert np.all(o[:, :, empty] == 0) and np.all(np.isneginf(lse[:, :, empty]))
        mask = mask.copy()
        mask[empty] = True  # compare the other rows
        o = o[:, :, ~empty]
        ref = _sdpa(q, k, v, mask)[:, :, ~empty]
    else:
        ref = _sdpa(q, k, v, mask)
    assert relative_error(o, ref) < 1e-12


def test_lse_is_logsumexp_of_scaled_scores():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((1, 2, 5, 16)), rng.standard_normal((1, 2, 7, 16)), rng.standard_normal((1, 2, 7, 16))
    _, lse = attention_reference(q, k, v, scale=0.3)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * 0.3
    assert np.allclose(lse, np.log(np.exp(s).sum(-1)), rtol=1e-14)


def test_softcap_alibi_window_and_mods_follow_the_documented_order():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((1, 2, 6, 8)), rng.standard_normal((1, 1, 9, 8)), rng.standard_normal((1, 1, 9, 8))
    slopes = np.array([0.5, 0.25])
    o, _ = attention_reference(q, k, v, scale=0.7, softcap=2.0, alibi_slopes=slopes, window=(3, 1),
                               score_mod=lambda s, b, h, i, j: s * 1.5, mask_mod=lambda b, h, i, j: j != 4)
    s = np.einsum("hqd,kd->hqk", q[0], k[0, 0]) * 0.7
    s = 2.0 * np.tanh(s / 2.0)
    i, j = np.arange(6)[:, None], np.arange(9)[None, :]
    diag = i + 3
    s = (s - slopes[:, None, None] * np.abs(diag - j)) * 1.5
    keep = (j >= diag - 3) & (j <= diag + 1) & (j != 4)
    p = np.where(keep, np.exp(s - s.max(-1, keepdims=True)), 0)
    expect = (p / p.sum(-1, keepdims=True)) @ v[0, 0]
    assert relative_error(o[0], expect) < 1e-13


def test_relative_error_rejects_nan_and_mismatched_infinities():
    ref = np.array([1.0, -np.inf])
    assert relative_error(np.array([1.0, -np.inf]), ref) == 0
    assert relative_error(np.array([np.nan, -np.inf]), ref) == math.inf
    assert relative_error(np.array([1.0, 0.0]), ref) == math.inf


@pytest.mark.parametrize("dtype, torch_dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32),
                                                ("fp8e4m3", torch.float8_e4m3fn), ("fp8e5m2", torch.float8_e5m2)])
def test_rounding_matches_torch_casts(dtype, torch_dtype):
    rng = np.random.default_rng(3)
    fmt = FORMATS[dtype]
    x = np.concatenate([rng.standard_normal(20000) * s for s in (1e-6, 1e-3, 1, 100)])
    # torch converts float64 through float32 (rounding twice), so start from float32 values.
    x = x[np.abs(x) < fmt.max_finite].astype(np.float32)
    ours = round_to(x.astype(np.float64), dtype)
    theirs = torch.from_numpy(x).to(torch_dtype).to(torch.float64).numpy()
    assert np.array_equal(ours, theirs)


def test_fp16_rounding_is_correctly_rounded_from_float64():
    x = np.random.default_rng(4).standard_normal(100000) * 3
    assert np.array_equal(round_to(x, "fp16"), x.astype(np.float16).astype(np.float64))


def test_the_cpu_reference_takes_no_vml_function(monkeypatch):
    """exp, log and tanh of the CPU reference (and the error model's log and sqrt) go through numpy, not ATen's MKL VML kernels, whose
    concurrent first calls can run in VML's low-accuracy kernel (pytorch/pytorch#188792): the exact
    gate's 1e-10 bound then refused a correct program in a fresh process under load."""
    def refuse(name):
        real = getattr(torch, name)

        def call(x, *args, **kwargs):
            if isinstance(x, torch.Tensor) and x.device.type == "cpu":
                raise AssertionError(f"torch.{name} on a CPU tensor in the reference")
            return real(x, *args, **kwargs)
        return call

    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((1, 4, 9, 16)), rng.standard_normal((1, 2, 11, 16)), rng.standard_normal((1, 2, 11, 16))
    expected = attention_reference(q, k, v, softcap=5.0, causal=True)
    for name in ("exp", "log", "tanh", "sqrt"):
        monkeypatch.setattr(torch, name, refuse(name))
    o, lse = attention_reference(q, k, v, softcap=5.0, causal=True)
    p, l = attention_reference(q, k, v, softcap=5.0, causal=True, weights=True)[2:]
    o_row_bound(p, l, np.repeat(v, 2, 1), o, np.zeros(lse.shape), "fp16", "fp16")  # the error model's log and sqrt too
    assert np.array_equal(o, expected[0]) and np.array_equal(lse, expected[1])
    s = 5.0 * np.tanh(np.einsum("bhqd,bhkd->bhqk", q, np.repeat(k, 2, 1)) / 4.0 / 5.0)
    s = np.where(np.arange(11)[None, :] <= np.arange(9)[:, None] + 2, s, -np.inf)
    ref_lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    assert np.max(np.abs(lse - ref_lse)) < 1e-13


def test_a_query_too_short_for_a_hot_row_gets_hot_batch_head_slices():
    """Rows 3, 10, ... are hot (logits near +-1000); a query of three rows or fewer (decode) has none, so every 7th (b, h)
    slice from the 4th is scaled instead, in place, on numpy arrays (views too) and torch tensors alike."""
    from attnforge.numerics import HOT_SCALE, scale_hot_rows

    q = np.ones((2, 5, 1, 4))
    scale_hot_rows(q)
    assert np.argwhere(q[..., 0, 0] == HOT_SCALE).tolist() == [[0, 3]] and (q[1] == 1).all()
    big = np.ones((3, 4, 6, 2))
    view = big[:, :, 1:3]  # two rows of a larger array: a strided view
    scale_hot_rows(view)
    assert np.argwhere(big[..., 1, 0] == HOT_SCALE).tolist() == [[0, 3], [2, 2]] and (big[..., 0, :] == 1).all()
    t = torch.ones(1, 3, 1, 2)  # three slices: none hot
    scale_hot_rows(t)
    assert bool((t == 1).all())
    rows = torch.ones(1, 1, 12, 2)
    scale_hot_rows(rows)
    assert torch.nonzero(rows[0, 0, :, 0] == HOT_SCALE).flatten().tolist() == [3, 10]
