"""The float64 reference every kernel and every TL program is judged against.

Conventions (the same in TL, the translators and the docs):
- layout BHSD: q (B, Hq, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv); query head h reads
  key/value head h // (Hq // Hkv);
- scores are modified in this order: scale, softcap (c * tanh(s / c)), ALiBi
  (- slope[h] * |q_idx + Sk - Sq - kv_idx|), the custom score_mod; then every mask;
- causal "bottom_right": key j is visible to query i when j <= i + Sk - Sq; "top_left": j <= i;
- a sliding window keeps diag - left <= j <= diag + right with diag = i + Sk - Sq;
- a query row with no visible key (fully masked) has output 0 and log-sum-exp -inf.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import SpecError

ScoreFn = Callable[..., np.ndarray]  # (score, b, h, q_idx, kv_idx) -> score, all broadcast arrays
MaskFn = Callable[..., np.ndarray]  # (b, h, q_idx, kv_idx) -> bool


def alibi_slopes_for(heads: int) -> tuple[float, ...]:
    """The standard ALiBi slopes for ``heads`` heads (Press et al., 2022, including the non-power-of-two recipe).

    For a power of two ``n`` the slopes are ``2**(-8/n * k)`` for k = 1..n (8 heads: 1/2, 1/4, ..., 1/256).
    Otherwise, with ``p`` the largest power of two below ``heads``, they are the ``p`` slopes for ``p``
    heads followed by every other slope (the 1st, 3rd, ...) of the ``2p``-head list, ``heads - p`` of them.
    """
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise SpecError("heads", heads, "an integer >= 1", hint="ALiBi slopes need a positive head count")

    def power_of_two(count: int) -> list[float]:
        return [2.0 ** (-8.0 * k / count) for k in range(1, count + 1)]

    p = 1 << (heads.bit_length() - 1)
    if p == heads:
        return tuple(power_of_two(heads))
    return tuple(power_of_two(p) + power_of_two(2 * p)[0::2][: heads - p])


def attention_reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    causal_align: str = "bottom_right",
    window: tuple[int | None, int | None] = (None, None),
    alibi_slopes: np.ndarray | None = None,
    softcap: float | None = None,
    score_mod: ScoreFn | None = None,
    mask_mod: MaskFn | None = None,
    weights: bool = False,
) -> tuple[np.ndarray, ...]:
    """Attention in float64: returns (O (B, Hq, Sq, Dv), LSE (B, Hq, Sq)) with the natural log;
    with ``weights`` also the softmax weights P (B, Hq, Sq, Sk), 0 where masked, and each row's sum
    of unnormalised weights l (B, Hq, Sq; the max-subtracted exponentials), for error models."""
    if causal_align not in ("bottom_right", "top_left"):
        raise ValueError(f"causal_align {causal_align!r} is neither 'bottom_right' nor 'top_left'")
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    _, Hkv, Sk, _ = k.shape
    if Hq % Hkv:
        raise ValueError(f"query heads {Hq} are not a multiple of key/value heads {Hkv}")
    group = Hq // Hkv
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(D) if scale is None else scale

    s = np.matmul(q, k.swapaxes(-1, -2)) * scale  # BLAS: einsum would run single-threaded and unblocked
    qi = np.arange(Sq)[:, None]
    kj = np.arange(Sk)[None, :]
    diag = qi + Sk - Sq
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    if alibi_slopes is not None:
        slopes = np.asarray(alibi_slopes, dtype=np.float64).reshape(1, Hq, 1, 1)
        s = s - slopes * np.abs(diag - kj)
    bi = np.arange(B).reshape(B, 1, 1, 1)
    hi = np.arange(Hq).reshape(1, Hq, 1, 1)
    if score_mod is not None:
        s = np.broadcast_to(score_mod(s, bi, hi, qi, kj), s.shape).astype(np.float64)

    keep = np.ones((B, Hq, Sq, Sk), dtype=bool)
    if causal:
        keep &= (kj <= diag) if causal_align == "bottom_right" else (kj <= qi)
    left, right = window
    if left is not None:
        keep &= kj >= diag - left
    if right is not None:
        keep &= kj <= diag + right
    if mask_mod is not None:
        keep &= np.broadcast_to(np.asarray(mask_mod(bi, hi, qi, kj), dtype=bool), keep.shape)
    s = np.where(keep, s, -np.inf)

    row_max = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(row_max)  # only -inf: every key masked
    safe_max = np.where(empty, 0.0, row_max)
    p = np.exp(s - safe_max)
    row_sum = p.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(empty, 0.0, np.matmul(p, v) / np.where(empty, 1.0, row_sum))
        lse = np.where(empty, -np.inf, safe_max + np.log(np.where(empty, 1.0, row_sum)))[..., 0]
        if weights:
            return o, lse, np.where(empty, 0.0, p / np.where(empty, 1.0, row_sum)), np.where(empty, 0.0, row_sum)[..., 0]
    return o, lse


def lse_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| / (1 + |ref|) over the log-sum-exp: an absolute error in nats where it is
    small, relative where it is large; -inf (fully masked rows) must match exactly, NaN fails.

    A norm-wise relative error would let one row with large logits hide an offset in all others.
    """
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape {out.shape} differs from the reference's {ref.shape}")
    finite = np.isfinite(ref)
    if np.isnan(out).any() or not np.array_equal(out[~finite], ref[~finite]):
        return float("inf")
    if not finite.any():
        return 0.0
    with np.errstate(invalid="ignore"):
        err = np.abs(out[finite] - ref[finite]) / (1.0 + np.abs(ref[finite]))
    return float(np.max(err)) if np.isfinite(err).all() else float("inf")


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| over finite reference entries; NaN anywhere in ``out`` gives inf.

    Entries where the reference is -inf (a fully masked row's log-sum-exp) must match exactly.
    """
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape {out.shape} differs from the reference's {ref.shape}")
    if np.isnan(out).any():
        return float("inf")
    finite = np.isfinite(ref)
    if not np.array_equal(out[~finite], ref[~finite]):
        return float("inf")
    diff = out[finite] - ref[finite]
    if not np.isfinite(diff).all():
        return float("inf")
    denom = np.linalg.norm(ref[finite])
    num = np.linalg.norm(diff)
    return float(num / denom) if denom > 0 else float(num)
