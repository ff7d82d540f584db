"""How close is close enough: the error bounds and the input policy every numerical check uses.

The TL harness (a program interpreted in float64 or rounded to a format) and kernel verification
(a compiled kernel on a GPU or in Triton's interpreter) both read these; neither defines its own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported where a bound is computed: numerics is imported by CPU-only checks
    import torch

# Bounds on O's relative error ||O - ref|| / ||ref|| by the format the GEMMs read
# (None: an exact float64 run of a TL program; tf32: fp32 tensors read by tf32 tensor cores).
O_TOLERANCE: dict[str | None, float] = {
    None: 1e-10, "fp32": 1e-4, "tf32": 2e-3, "fp16": 5e-3, "bf16": 2e-2, "fp8e4m3": 1.5e-1, "fp8e5m2": 3e-1,
}

# The log-sum-exp is accumulated in fp32 whatever the inputs are: each row is checked against
# |lse - ref| <= LSE_TOLERANCE * (1 + |ref|), plus (for kernels) the error bound of the row's scores.
LSE_TOLERANCE_EXACT = 1e-10
LSE_TOLERANCE = 1e-5


def lse_tolerance(fmt: str | None) -> float:
    return LSE_TOLERANCE_EXACT if fmt is None else LSE_TOLERANCE


# The error of one fp32-accumulated score: operand rounding (exact products for 16-bit inputs)
# plus D accumulation steps of ACCUMULATE_UNIT (2^-23: tensor cores truncate while accumulating).
OPERAND_ROUNDING = {"fp16": 0.0, "bf16": 0.0, "fp32": 2.0**-24, "tf32": 2.0**-10}
ACCUMULATE_UNIT = 2.0**-23

# Hot query rows: every HOT_EVERY-th row, from row HOT_FIRST, is scaled by HOT_SCALE so that its
# logits reach about +-1000 (a kernel that exponentiates without subtracting the running max
# overflows there). Rows 0..HOT_FIRST-1 stay ordinary. A query of HOT_FIRST rows or fewer (a decode
# step, a few speculative queries) has no such row: there every HOT_EVERY-th (batch, head) slice from
# the HOT_FIRST-th is hot instead, so a split-KV decode kernel's running max is tried too, and the
# other slices test the softmax weights rather than a near one-hot row.
HOT_EVERY, HOT_FIRST, HOT_SCALE = 7, 3, 400.0


def scale_hot_rows(q: Any) -> None:
    """Scale the hot rows of ``q`` (..., S, D), a numpy array or torch tensor, in place."""
    if q.shape[-2] > HOT_FIRST:
        q[..., HOT_FIRST::HOT_EVERY, :] *= HOT_SCALE
        return
    lead = tuple(q.shape[:-2])
    hot = np.unravel_index(np.arange(HOT_FIRST, math.prod(lead), HOT_EVERY), lead)  # the hot slices' (batch, head) indices
    if isinstance(q, np.ndarray):  # one indexed multiply, written back in place (a strided view included)
        q[hot] *= HOT_SCALE
    else:
        import torch

        q[tuple(torch.as_tensor(i, device=q.device) for i in hot)] *= HOT_SCALE


# ---------------------------------------------------------------- per-row bound on O
#
# A row of O is sum_j p_j v_j with p the softmax weights. A kernel computes it with these errors,
# each modelled per row (the reference gives p, v and O exactly, in float64):
#   - P rounded to the GEMM's operand format before P @ V: each weight carries a relative
#     error up to u_p (round to nearest, so about uniform: RMS u_p / sqrt(3)); below the smallest
#     normal number the error is absolute, half the subnormal spacing, over l (the row's sum of
#     unnormalised weights, >= 1);
#   - O rounded to the output format: RMS u_out / sqrt(3) of each element;
#   - the scores' own error e_s (``verify.score_error_bound``): at most 2 e_s p_j on each weight,
#     and exp's: 2^-21 relative plus 2^-23 |s_j - max| from its argument, worst case;
#   - the fp32 accumulation of P @ V over n visible keys, RMS sqrt(n) 2^-24 |partial sums|.
# The random terms are independent across the row's Dv elements, so the row's error norm
# concentrates near their root-sum-square E; a row fails when its error exceeds O_ROW_SIGMAS * E
# plus the worst-case terms. A kernel that keeps its accumulator in 16 bits, or that skips or
# zeroes rows, lands far outside.
O_ROW_SIGMAS = 3.0
EXP_RELATIVE = 2.0**-21
EXP_ARGUMENT = 2.0**-23
FP32_UNIT = 2.0**-24


def _subnormal_half_spacing(fmt: str) -> float:
    from .dtypes import FORMATS

    f = FORMATS[fmt]
    return 2.0 ** (f.min_normal_exp - f.mantissa_bits - 1)


def _rows_dot(weights: "torch.Tensor", per_key: "torch.Tensor") -> "torch.Tensor":
    """sum_k weights[b, h, q, k] * per_key[b, h, k], through BLAS (a batched matrix-vector product)."""
    return (weights @ per_key[..., None])[..., 0]


def o_row_bound(p: Any, l: Any, v: Any, o: Any, score_err: Any, p_fmt: str, out_fmt: str) -> Any:
    """The error each row of O may carry (B, Hq, Sq), by the model above.

    p: softmax weights (B, Hq, Sq, Sk); l: unnormalised row sums (B, Hq, Sq), >= 1 where a key is
    visible; v: values repeated to the query heads (B, Hq, Sk, Dv); o: the reference output;
    score_err: the bound on each row's score error (B, Hq, Sq). float64 numpy arrays give a numpy
    array; torch tensors a tensor on p's device (a GPU check bounds its rows on the GPU)."""
    import torch

    from .dtypes import FORMATS
    from .reference import elementwise64

    as_numpy = not isinstance(p, torch.Tensor)
    device = None if as_numpy else p.device
    p, l, v, o, score_err = (torch.as_tensor(np.asarray(x) if as_numpy else x, device=device).to(torch.float64)
                             for x in (p, l, v, o, score_err))
    u_p, u_o = FORMATS[p_fmt].eps, FORMATS[out_fmt].eps
    v_norm = torch.linalg.vector_norm(v, dim=-1)  # (B, H, Sk)
    o_norm = torch.linalg.vector_norm(o, dim=-1)
    l_safe = torch.where(l > 0, l, 1.0)[..., None]
    seen = p > 0
    per_weight = torch.maximum(u_p * p, torch.where(seen, _subnormal_half_spacing(p_fmt) / l_safe, 0.0))
    rounding = _rows_dot(per_weight**2, v_norm**2) / 3.0 + (u_o * o_norm) ** 2 / 3.0
    weighted_v = _rows_dot(p, v_norm)  # sum_j p_j |v_j|
    visible = seen.sum(dim=-1)
    rounding += visible * (FP32_UNIT * weighted_v) ** 2
    neg_log_p = torch.where(seen, -elementwise64(torch.where(seen, p, 1.0), np.log, torch.log), 0.0)
    exp_err = EXP_RELATIVE * weighted_v + EXP_ARGUMENT * _rows_dot(p * neg_log_p, v_norm)
    scores = 2.0 * score_err * (weighted_v + o_norm)
    bound = O_ROW_SIGMAS * elementwise64(rounding, np.sqrt, torch.sqrt) + exp_err + scores
    return bound.cpu().numpy() if as_numpy else bound


def worst_row(err: np.ndarray, bound: np.ndarray) -> tuple[tuple[int, ...], float]:
    """The (b, h, row) whose error is largest relative to its bound, and that ratio (inf for NaN,
    or for an error where the bound is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / bound)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    index = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return tuple(int(i) for i in index), float(ratio[index])
