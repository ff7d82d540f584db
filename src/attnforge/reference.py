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

import math
from typing import TYPE_CHECKING, Callable, Union

import numpy as np

from .errors import SpecError

if TYPE_CHECKING:  # torch is imported when a reference is computed: spec.py imports this module
    import torch

Array = Union[np.ndarray, "torch.Tensor"]

ScoreFn = Callable[..., np.ndarray]  # (score, b, h, q_idx, kv_idx) -> score, all broadcast arrays
MaskFn = Callable[..., np.ndarray]  # (b, h, q_idx, kv_idx) -> bool


def elementwise64(x: "torch.Tensor", on_host: Callable[[np.ndarray], np.ndarray], on_device: Callable) -> "torch.Tensor":
    """exp, log or tanh of a float64 tensor. On the CPU through numpy (single-threaded: a large case on the host
    takes longer, a GPU's out-of-memory fallback among them): ATen sends these ops to MKL's VML,
    whose kernel dispatch resolves on each function's first call, and concurrent first calls from ATen's
    worker threads can run a chunk in VML's low-accuracy kernel (pytorch/pytorch#188792, oneMKL 2024.2 as
    the torch 2.13 wheels bundle). Seen here: a fresh verifying process under load got err(O) 6.5e-10
    against the 1e-10 bound of an exact TL program (the program's own numbers were right to 4e-16)."""
    if x.device.type == "cpu":
        import torch

        return torch.from_numpy(on_host(x.detach().numpy()))
    return on_device(x)


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
    q: Array,
    k: Array,
    v: Array,
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
) -> tuple[Array, ...]:
    """Attention in float64: returns (O (B, Hq, Sq, Dv), LSE (B, Hq, Sq)) with the natural log;
    with ``weights`` also the softmax weights P (B, Hq, Sq, Sk), 0 where masked, and each row's sum
    of unnormalised weights l (B, Hq, Sq; the max-subtracted exponentials), for error models.

    numpy inputs give numpy results; torch tensors give float64 tensors on their device, so a
    check of a GPU kernel computes its reference on the GPU (the modifiers, TL expressions
    evaluated by numpy, run on the host)."""
    import torch

    if causal_align not in ("bottom_right", "top_left"):
        raise ValueError(f"causal_align {causal_align!r} is neither 'bottom_right' nor 'top_left'")
    as_numpy = not isinstance(q, torch.Tensor)
    q, k, v = (torch.as_tensor(np.asarray(x) if as_numpy else x).to(torch.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    _, Hkv, Sk, _ = k.shape
    if Hq % Hkv:
        raise ValueError(f"query heads {Hq} are not a multiple of key/value heads {Hkv}")
    group = Hq // Hkv
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    device = q.device

    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    qi = np.arange(Sq)[:, None]
    kj = np.arange(Sk)[None, :]
    diag = qi + Sk - Sq
    if softcap is not None:
        s = softcap * elementwise64(s / softcap, np.tanh, torch.tanh)
    if alibi_slopes is not None:
        slopes = torch.as_tensor(np.asarray(alibi_slopes, dtype=np.float64), device=device).reshape(1, Hq, 1, 1)
        s = s - slopes * torch.as_tensor(np.abs(diag - kj), dtype=torch.float64, device=device)
    bi = np.arange(B).reshape(B, 1, 1, 1)
    hi = np.arange(Hq).reshape(1, Hq, 1, 1)
    if score_mod is not None:  # a TL expression: numpy on the host
        modded = np.broadcast_to(score_mod(s.cpu().numpy(), bi, hi, qi, kj), tuple(s.shape)).astype(np.float64)
        s = torch.from_numpy(np.ascontiguousarray(modded)).to(device)

    keep = np.ones((1, 1, Sq, Sk), dtype=bool)
    if causal:
        keep = keep & ((kj <= diag) if causal_align == "bottom_right" else (kj <= qi))
    left, right = window
    if left is not None:
        keep = keep & (kj >= diag - left)
    if right is not None:
        keep = keep & (kj <= diag + right)
    if mask_mod is not None:
        keep = keep & np.broadcast_to(np.asarray(mask_mod(bi, hi, qi, kj), dtype=bool), (B, Hq, Sq, Sk))
    s = torch.where(torch.from_numpy(np.ascontiguousarray(keep)).to(device), s, -math.inf)

    row_max = s.amax(dim=-1, keepdim=True)
    empty = ~torch.isfinite(row_max)  # only -inf: every key masked
    safe_max = torch.where(empty, 0.0, row_max)
    p = elementwise64(s - safe_max, np.exp, torch.exp)
    row_sum = p.sum(dim=-1, keepdim=True)
    safe_sum = torch.where(empty, 1.0, row_sum)
    o = torch.where(empty, 0.0, torch.matmul(p, v) / safe_sum)
    lse = torch.where(empty, -math.inf, safe_max + elementwise64(safe_sum, np.log, torch.log))[..., 0]
    out = (o, lse)
    if weights:
        out += (torch.where(empty, 0.0, p / safe_sum), torch.where(empty, 0.0, row_sum)[..., 0])
    return tuple(t.cpu().numpy() for t in out) if as_numpy else out


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


def relative_error(out: Array, ref: Array) -> float:
    """||out - ref|| / ||ref|| over finite reference entries; NaN anywhere in ``out`` gives inf.

    Entries where the reference is -inf (a fully masked row's log-sum-exp) must match exactly.
    numpy arrays or torch tensors (computed where they are).
    """
    import torch

    out, ref = (torch.as_tensor(x).to(torch.float64) for x in (out, ref))
    if out.shape != ref.shape:
        raise ValueError(f"shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    if torch.isnan(out).any():
        return float("inf")
    finite = torch.isfinite(ref)
    if not torch.equal(out[~finite], ref[~finite]):
        return float("inf")
    diff = out[finite] - ref[finite]
    if not torch.isfinite(diff).all():
        return float("inf")
    denom = float(torch.linalg.vector_norm(ref[finite]))
    num = float(torch.linalg.vector_norm(diff))
    return num / denom if denom > 0 else num
