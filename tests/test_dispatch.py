"""attention()'s dispatch cache: a repeated call skips every check and goes straight to its
prepared launch; a change of shape, stride, dtype or option is a new key (checked again)."""

from __future__ import annotations

import math

import pytest
import torch

import attnforge
from attnforge import api
from attnforge.errors import AttnforgeError
from attnforge.reference import attention_reference, relative_error


@pytest.fixture(autouse=True)
def _fresh(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path_factory.getbasetemp() / "kernel-cache"))
    api._dispatch.clear()
    prepared = []
    real = api._prepare

    def counting(*args, **kwargs):
        prepared.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "_prepare", counting)
    return prepared


def _qkv(Sq=19, Sk=23, D=16, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, h, s, D, generator=g).to(dtype) for h, s in ((2, Sq), (1, Sk), (1, Sk)))


def _expected(q, k, v, **kw):
    return attention_reference(*(t.double().numpy() for t in (q, k, v)), scale=1 / math.sqrt(q.shape[-1]), **kw)[0]


def test_same_call_hits_and_new_tensors_of_the_same_key_hit_too(_fresh):
    q, k, v = _qkv()
    first = attnforge.attention(q, k, v, causal=True)
    again = attnforge.attention(q, k, v, causal=True)
    q2, k2, v2 = _qkv(seed=1)  # new data, same shapes and strides: same key
    other = attnforge.attention(q2, k2, v2, causal=True)
    assert len(_fresh) == 1 and len(api._dispatch) == 1
    assert torch.equal(first, again)
    assert relative_error(other.double().numpy(), _expected(q2, k2, v2, causal=True)) < 5e-3


@pytest.mark.parametrize("change", ["shape", "stride", "dtype", "option", "scale"])
def test_a_change_of_shape_stride_dtype_or_option_misses(_fresh, change):
    q, k, v = _qkv()
    attnforge.attention(q, k, v)
    kwargs: dict = {}
    if change == "shape":
        q, k, v = _qkv(Sq=20)
    elif change == "stride":  # the same values laid out BSHD, read through strides
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    elif change == "dtype":
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    elif change == "option":
        kwargs = dict(window=(4, 4))
    else:
        kwargs = dict(scale=0.5)
    o = attnforge.attention(q, k, v, **kwargs)
    assert len(_fresh) == 2 and len(api._dispatch) == 2
    ref = attention_reference(*(t.double().numpy() for t in (q, k, v)), scale=kwargs.get("scale", 0.25),
                              window=kwargs.get("window", (None, None)))[0]
    assert relative_error(o.double().numpy(), ref) < 2e-2


def test_a_bad_call_is_refused_every_time_and_never_cached(_fresh):
    q, k, v = _qkv()
    for _ in range(2):
        with pytest.raises(AttnforgeError, match="head dim"):
            attnforge.attention(q, k[..., :8], v)
    assert not api._dispatch
    with torch.enable_grad():
        q.requires_grad_()
        with pytest.raises(AttnforgeError, match="backward"):
            attnforge.attention(q, k, v)
        with pytest.raises(AttnforgeError, match="backward"):
            attnforge.attention(q, k, v)
    assert not api._dispatch


def test_alibi_slopes_given_as_a_tensor_are_read_at_each_call(_fresh):
    q, k, v = _qkv(dtype=torch.float32)
    slopes = torch.tensor([0.5, 0.25])
    a = attnforge.attention(q, k, v, alibi_slopes=slopes)
    b = attnforge.attention(q, k, v, alibi_slopes=slopes * 4)  # same key, new values
    assert len(_fresh) == 1
    for out, s in ((a, [0.5, 0.25]), (b, [2.0, 1.0])):
        ref = attention_reference(*(t.double().numpy() for t in (q, k, v)), scale=0.25, alibi_slopes=torch.tensor(s).double().numpy())[0]
        assert relative_error(out.double().numpy(), ref) < 1e-4


def test_one_decode_kernel_serves_every_batch_and_length():
    from attnforge.cache import entry_key, spec_bucket
    from attnforge.plan.builtin import candidates, source_for
    from attnforge.spec import AttentionSpec
    from attnforge.splits import split_count
    from attnforge.targets import get_target

    target = get_target("h200")
    for sq, kv_heads in ((1, 8), (1, 2), (5, 8)):  # decode, and packed speculative decoding (its Sq decides its tiles)
        shapes = [(b, sk) for b in range(1, 129, 9) for sk in range(64, 40000, 1531)]
        keys, sources, splits = set(), set(), set()
        for b, sk in shapes:
            spec = AttentionSpec(batch=b, heads=4 * kv_heads, kv_heads=kv_heads, seqlen_q=sq, seqlen_k=sk, head_dim=128, dtype="bf16")
            kind, cands = candidates(spec, target)
            assert kind == "decode" and cands[0].params == candidates(spec_bucket(spec), target)[1][0].params
            sources.add(source_for(spec_bucket(spec), target, kind, cands[0].params))
            # per backend (auto takes the one the tuning database timed faster for the length's bucket: for this spec
            # on the H200, Triton's up to 1k keys, Gluon's beyond; tune/shipped.json)
            keys.update((name, entry_key(spec, target, backend=name)) for name in ("triton", "gluon"))
            splits.add(split_count(b * kv_heads * -(-4 * sq // cands[0].params["BM"]), -(-sk // cands[0].params["BN"]), target.sm_count))
        assert len(keys) == 2 and len(sources) == 1  # one build a backend, whatever the batch and the KV length
        assert len(splits) >= 5  # while the launcher's split count moves with them


@pytest.mark.parametrize("name, good, bad", [("window", 1, True), ("causal", True, 1), ("scale", 1, True)])
def test_an_option_refused_by_its_type_is_refused_after_a_hit_of_an_equal_value(_fresh, name, good, bad):
    # True == 1 and hash alike: a key without the types let a call the checks refuse hit the entry of one they accept
    q, k, v = _qkv()
    attnforge.attention(q, k, v, **{name: good})
    with pytest.raises(AttnforgeError, match="not a window|not allowed"):
        attnforge.attention(q, k, v, **{name: bad})


def test_alibi_slopes_of_another_stride_or_alignment_are_a_new_key(_fresh):
    # Triton specialises the compiled kernel on the slopes' stride (== 1) and 16-byte alignment; a
    # hit launches the kernel the key's first call compiled, so both must be in the key
    q, k, v = _qkv(dtype=torch.float32)
    values = [0.5, 0.25]
    contiguous = torch.tensor(values)
    strided = torch.tensor([0.5, 9.0, 0.25, 9.0])[::2]
    misaligned = torch.tensor([9.0, 0.5, 0.25])[1:]
    assert strided.stride() == (2,) and misaligned.data_ptr() % 16 == 4
    keys = {api._dispatch_key(q, k, v, False, "bottom_right", None, None, s, None, None, None, False, "bhsd", "auto")
            for s in (contiguous, strided, misaligned)}
    assert len(keys) == 3
    ref = attention_reference(*(t.double().numpy() for t in (q, k, v)), scale=0.25, alibi_slopes=torch.tensor(values).double().numpy())[0]
    for slopes in (contiguous, strided, misaligned):
        out = attnforge.attention(q, k, v, alibi_slopes=slopes)
        assert relative_error(out.double().numpy(), ref) < 1e-4
    assert len(_fresh) == 3


def test_a_lazily_negated_input_is_refused_every_time(_fresh):
    z = torch.complex(torch.randn(1, 2, 16, 16), torch.randn(1, 2, 16, 16))
    negated = z.conj().imag  # float32 whose negative bit is set: no copy was made
    assert negated.is_neg()
    q = torch.randn(1, 2, 16, 16)
    for _ in range(2):
        with pytest.raises(AttnforgeError, match="negative bit"):
            attnforge.attention(negated, q, q)
