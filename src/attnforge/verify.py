"""Verification: a generated kernel against the float64 reference, on fresh inputs per case.

Each case draws new random inputs (the hot query rows of ``numerics`` scaled so their logits reach
about +-1000: a kernel that exponentiates without subtracting the running max overflows there), poisons the
outputs with NaN (an element the kernel never writes fails), runs the kernel (natively on a GPU,
in Triton's interpreter on a CPU), and compares O and the log-sum-exp with the reference computed
in float64 from the same rounded inputs. Shapes cover odd lengths, tails of every tile, Sq < Sk
and Sq > Sk, GQA/MQA ratios, and both BHSD and BSHD strides.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

from .backends.base import Kernel
from .dtypes import torch_dtype
from .numerics import ACCUMULATE_UNIT, O_TOLERANCE, OPERAND_ROUNDING, lse_tolerance, scale_hot_rows
from .reference import attention_reference, lse_error, relative_error
from .spec import AttentionSpec, alibi_slopes_for
from .tl.evaluate import expr_fn
from .tl.parser import parse_expr

@dataclass(frozen=True)
class CaseShape:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    layout: str = "bhsd"  # or "bshd": tensors are (B, S, H, D) in memory, passed as transposed views

    def __str__(self) -> str:
        return f"{self.B}x{self.Hq}/{self.Hkv}x{self.Sq}x{self.Sk} {self.layout}"


@dataclass
class CaseResult:
    shape: str
    err_o: float
    err_lse: float
    tol_o: float
    tol_lse: float
    seconds: float
    passed: bool
    error: str | None = None  # the exception, when the kernel raised instead of returning


@dataclass
class VerifyRecord:
    """The structured result of one verification run (goes into report.json as is)."""

    device: str
    dtype: str
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def max_err_o(self) -> float:
        return max((c.err_o for c in self.cases), default=math.nan)

    @property
    def max_err_lse(self) -> float:
        return max((c.err_lse for c in self.cases), default=math.nan)

    def to_dict(self) -> dict:
        return {"device": self.device, "dtype": self.dtype, "passed": self.passed, "max_err_o": self.max_err_o,
                "max_err_lse": self.max_err_lse, "cases": [asdict(c) for c in self.cases]}


def verification_shapes(spec: AttentionSpec, params: dict[str, int], *, native: bool) -> list[CaseShape]:
    """Shapes for ``spec``'s kernel: its own GQA ratio and MHA/MQA, odd lengths that leave tails in
    every tile (from the kernel's BM/BN), Sq < Sk and Sq > Sk; larger ones when running natively."""
    g = spec.group_size
    bm, bn = params.get("BM", 64), params.get("BN", 64)
    if spec.is_decode:
        splits = params.get("NSPLIT", 1)
        shapes = [CaseShape(2, 2 * g, 2, 1, 1), CaseShape(1, 2 * g, 2, 1, 77, "bshd"),
                  CaseShape(2, g, 1, 1, (2 * splits + 1) * bn + 5), CaseShape(1, 4, 4, 3, 3 * bn + 1, "bshd"),
                  CaseShape(1, 4, 1, 1, bn * splits // 2 + 3)]
        if native:
            shapes += [CaseShape(4, 4 * g, 4, 1, 4099), CaseShape(3, 2 * g, 2, 1, 32769, "bshd")]
        return shapes
    shapes = [
        CaseShape(1, 2 * g, 2, 37, 53),
        CaseShape(2, g, 1, 70, 45, "bshd"),
        CaseShape(1, 4, 4, bm + 3, 2 * bn + 7),
        CaseShape(1, 4, 1, 2 * bm + 5, bm + 1, "bshd"),
        CaseShape(1, 2, 2, 1, 2 * bn + 3),
    ]
    if native:
        # The float64 reference materialises B x Hq x Sq x Sk scores on the host: keep that under ~50M.
        shapes += [CaseShape(2, 2 * g, 2, 1000, 1037), CaseShape(1, g, 1, 2048, 2048, "bshd"),
                   CaseShape(3, 6, 6, 777, 1999), CaseShape(1, 2 * g, 2, 2049, 300, "bshd")]
    return shapes


def _mma_format(spec: AttentionSpec) -> str:
    return "tf32" if spec.allow_tf32 else spec.dtype


def reference(spec: AttentionSpec, shape: CaseShape, q: np.ndarray, k: np.ndarray, v: np.ndarray, slopes: np.ndarray | None):
    """Float64 O and LSE for ``spec``'s operator at ``shape`` (modifiers read this shape's sizes)."""
    sizes = {"B": shape.B, "Hq": shape.Hq, "Hkv": shape.Hkv, "Sq": shape.Sq, "Sk": shape.Sk}
    kwargs: dict = {"scale": spec.scale, "causal": spec.causal, "causal_align": spec.causal_align,
                    "window": (spec.window_left, spec.window_right), "alibi_slopes": slopes, "softcap": spec.softcap}
    if spec.score_mod is not None:
        kwargs["score_mod"] = expr_fn(parse_expr(spec.score_mod), sizes, True)
    if spec.mask_mod is not None:
        kwargs["mask_mod"] = expr_fn(parse_expr(spec.mask_mod), sizes, False)
    return attention_reference(q, k, v, **kwargs)


def _tensor(gen: torch.Generator, shape: CaseShape, heads: int, seq: int, dim: int, dtype: torch.dtype, device: str, hot: bool = False) -> torch.Tensor:
    x = torch.randn(shape.B, heads, seq, dim, generator=gen, dtype=torch.float64)
    if hot:  # rows 3, 10, 17, ...: a one-row (decode) case keeps ordinary logits and tests the weights
        scale_hot_rows(x)
    x = x.to(dtype)
    if shape.layout == "bshd":
        return x.transpose(1, 2).contiguous().to(device).transpose(1, 2)
    return x.to(device)


def _empty(shape: CaseShape, dims: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """NaN-filled output with the case's layout (BSHD: heads are not the outer stride)."""
    if shape.layout == "bshd" and len(dims) == 4:
        B, H, S, D = dims
        return torch.full((B, S, H, D), math.nan, dtype=dtype, device=device).transpose(1, 2)
    return torch.full(dims, math.nan, dtype=dtype, device=device)


def run_case(kernel: Kernel, spec: AttentionSpec, shape: CaseShape, seed: int) -> CaseResult:
    dtype = torch_dtype(spec.dtype)
    device = kernel.device
    gen = torch.Generator().manual_seed(seed)
    q = _tensor(gen, shape, shape.Hq, shape.Sq, spec.head_dim, dtype, device, hot=True)
    k = _tensor(gen, shape, shape.Hkv, shape.Sk, spec.head_dim, dtype, device)
    v = _tensor(gen, shape, shape.Hkv, shape.Sk, spec.head_dim_v, dtype, device)
    o = _empty(shape, (shape.B, shape.Hq, shape.Sq, spec.head_dim_v), dtype, device)
    lse = torch.full((shape.B, shape.Hq, shape.Sq), math.nan, dtype=torch.float32, device=device)
    slopes = None
    args: dict = spec.runtime_scalars()
    if spec.alibi_slopes is not None:
        slopes = np.array(spec.alibi_slopes if shape.Hq == spec.heads else alibi_slopes_for(shape.Hq))
        args["alibi_slopes"] = torch.tensor(slopes, dtype=torch.float32, device=device)
    fmt = _mma_format(spec)
    tol_o, tol_lse = O_TOLERANCE[fmt], lse_tolerance(fmt)
    start = time.perf_counter()
    try:
        kernel.launch(q, k, v, o, lse, **args)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as err:  # a crash is a failed case with its reason, not a lost run
        return CaseResult(str(shape), math.inf, math.inf, tol_o, tol_lse, time.perf_counter() - start, False, f"{type(err).__name__}: {err}"[:500])
    seconds = time.perf_counter() - start
    ref_o, ref_lse = reference(spec, shape, *(t.double().cpu().numpy() for t in (q, k, v)), slopes)
    err_o = relative_error(o.double().cpu().numpy(), ref_o)
    out_lse = lse.double().cpu().numpy()
    err_lse = lse_error(out_lse, ref_lse)
    lse_ok, tol_lse = _lse_within_bound(out_lse, ref_lse, score_error_bound(q, k, spec.scale, fmt), tol_lse)
    passed = err_o <= tol_o and err_lse < math.inf and lse_ok  # NaN compares false: never passes
    return CaseResult(str(shape), err_o, err_lse, tol_o, tol_lse, seconds, passed)


def score_error_bound(q: torch.Tensor, k: torch.Tensor, scale: float, fmt: str) -> np.ndarray:
    """Per query row (B, Hq, Sq): the largest error any of its fp32-accumulated scores may carry."""
    group = q.shape[1] // k.shape[1]
    qa = q.abs().float()
    ka = k.abs().float().repeat_interleave(group, dim=1)
    worst = (qa @ ka.transpose(-1, -2)).amax(dim=-1)  # max over keys of sum_d |q_d| |k_d|
    unit = OPERAND_ROUNDING[fmt] + q.shape[-1] * ACCUMULATE_UNIT
    return (unit * abs(scale) * worst).double().cpu().numpy()


def _lse_within_bound(out: np.ndarray, ref: np.ndarray, score_bound: np.ndarray, base: float) -> tuple[bool, float]:
    """Whether every finite row is within its bound, and the bound (relative to 1 + |ref|) at the
    row closest to failing, for the report. Masked rows (-inf) and NaN are judged by lse_error."""
    finite = np.isfinite(ref) & np.isfinite(out)
    if not finite.any():
        return True, base
    scale = 1.0 + np.abs(ref[finite])
    allowed = base * scale + score_bound[finite]
    ratio = np.abs(out[finite] - ref[finite]) / allowed
    worst = int(np.argmax(ratio))
    return bool(ratio[worst] <= 1.0), float(allowed[worst] / scale[worst])


def verify(
    kernel: Kernel,
    spec: AttentionSpec,
    params: dict[str, int],
    *,
    shapes: list[CaseShape] | None = None,
    seed: int = 0,
    progress: Callable[[int, int, CaseResult], None] | None = None,
) -> VerifyRecord:
    """Run every case and return the record; ``progress(done, total, case)`` after each."""
    native = not kernel.interpret
    shapes = verification_shapes(spec, params, native=native) if shapes is None else shapes
    name = f"cuda:{torch.cuda.get_device_name()}" if native else "cpu (interpreter)"
    record = VerifyRecord(name, _mma_format(spec))
    for i, shape in enumerate(shapes):
        case = run_case(kernel, spec, shape, seed + i)
        record.cases.append(case)
        if progress is not None:
            progress(i + 1, len(shapes), case)
    return record
