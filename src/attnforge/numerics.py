"""How close is close enough: the error bounds and the input policy every numerical check uses.

The TL harness (a program interpreted in float64 or rounded to a format) and kernel verification
(a compiled kernel on a GPU or in Triton's interpreter) both read these; neither defines its own.
"""

from __future__ import annotations

from typing import Any

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
# overflows there). Rows 0..HOT_FIRST-1 stay ordinary, so a one-row (decode) case tests the
# softmax weights rather than a near one-hot row.
HOT_EVERY, HOT_FIRST, HOT_SCALE = 7, 3, 400.0


def scale_hot_rows(q: Any) -> None:
    """Scale the hot rows of ``q`` (..., S, D), a numpy array or torch tensor, in place."""
    q[..., HOT_FIRST::HOT_EVERY, :] *= HOT_SCALE
