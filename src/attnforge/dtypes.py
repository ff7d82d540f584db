"""The floating-point formats attnforge knows, and exact rounding to them in float64.

Rounding is done arithmetically (round-half-to-even on the format's grid of representable
values), so the interpreter can emulate bf16 or fp8 without hardware or library support.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    name: str
    bits: int
    mantissa_bits: int  # explicit fraction bits
    min_normal_exp: int  # exponent of the smallest normal number
    max_finite: float
    has_inf: bool = True  # fp8e4m3 has none: conversions saturate to max_finite (NVIDIA's satfinite)

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def eps(self) -> float:
        """Unit roundoff: half the spacing of values just above 1."""
        return 2.0 ** -(self.mantissa_bits + 1)


FORMATS: dict[str, FloatFormat] = {
    "fp64": FloatFormat("fp64", 64, 52, -1022, float(np.finfo(np.float64).max)),
    "fp32": FloatFormat("fp32", 32, 23, -126, float(np.finfo(np.float32).max)),
    "tf32": FloatFormat("tf32", 32, 10, -126, float(np.finfo(np.float32).max)),
    "fp16": FloatFormat("fp16", 16, 10, -14, 65504.0),
    "bf16": FloatFormat("bf16", 16, 7, -126, float.fromhex("0x1.fep127")),
    "fp8e4m3": FloatFormat("fp8e4m3", 8, 3, -6, 448.0, has_inf=False),
    "fp8e5m2": FloatFormat("fp8e5m2", 8, 2, -14, 57344.0),
}

# Formats tensors are stored in (AttentionSpec.dtype); TL also names tf32 as a GEMM operand format.
STORAGE_DTYPES = ("fp16", "bf16", "fp32", "fp8e4m3", "fp8e5m2")
TL_DTYPES = STORAGE_DTYPES[:3] + ("tf32",) + STORAGE_DTYPES[3:]
# Formats generated kernels take today (fp8 needs per-tensor scales the spec does not carry yet).
KERNEL_DTYPES = ("fp16", "bf16", "fp32")
# Each format's torch dtype, by attribute name (torch.float16, ...): no torch import here.
TORCH_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
               "fp8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2"}


def torch_dtype(fmt: str) -> Any:
    """The torch dtype of a format (imports torch: call it only where torch is in use)."""
    import torch

    return getattr(torch, TORCH_NAMES[fmt])


def round_to(x: np.ndarray | float, dtype: str) -> np.ndarray:
    """``x`` (float64) rounded to the nearest value of ``dtype``, ties to even; overflow gives inf (or saturates)."""
    fmt = FORMATS[dtype]
    a = np.asarray(x, dtype=np.float64)
    if fmt.name == "fp64":
        return a.copy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _, e = np.frexp(a)  # a = m * 2**e with 0.5 <= |m| < 1, so the leading bit is 2**(e-1)
        exp = np.maximum(e - 1, fmt.min_normal_exp)
        spacing = np.ldexp(1.0, exp - fmt.mantissa_bits)
        out = np.round(a / spacing) * spacing
        # Values past the largest finite one (after rounding) overflow to infinity, or saturate.
        big = np.copysign(np.inf if fmt.has_inf else fmt.max_finite, a)
        out = np.where(np.abs(out) > fmt.max_finite, big, out)
        out = np.where(np.isfinite(a), out, a)
    return out
