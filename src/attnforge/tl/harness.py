"""Run a TL program on random inputs and compare it with the float64 reference.

What a program computes comes from its ``computes`` header (causal alignment, window, ALiBi,
softcap, custom score and mask modifiers); the numbers those features need come from runtime
scalars, with defaults chosen to make each feature bite on small shapes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Mapping

import numpy as np

from ..dtypes import round_to
from ..errors import AttnforgeError
from ..numerics import O_TOLERANCE, lse_tolerance, scale_hot_rows
from ..reference import alibi_slopes_for, attention_reference, lse_error, relative_error
from . import nodes as n
from .evaluate import evaluate, expr_fn
from .interpreter import run_program



@dataclass(frozen=True)
class Shape:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    D: int
    Dv: int

    @classmethod
    def parse(cls, text: str) -> "Shape":
        """``B,HQ,HKV,SQ,SK,D[,DV]`` (DV defaults to D)."""
        parts = [p.strip() for p in str(text).split(",")]
        if len(parts) not in (6, 7) or not all(p.isdigit() for p in parts):
            raise AttnforgeError(f"shape {text!r} is not B,HQ,HKV,SQ,SK,D[,DV]", where="--shape", hint="e.g. --shape 2,8,2,113,203,64")
        values = [int(p) for p in parts] + ([int(parts[5])] if len(parts) == 6 else [])
        shape = cls(*values)
        if min(values) < 1:
            raise AttnforgeError(f"shape {text!r} has a zero size", where="--shape", hint="every size must be >= 1")
        if shape.Hq % shape.Hkv:
            raise AttnforgeError(f"HQ={shape.Hq} is not a multiple of HKV={shape.Hkv}", where="--shape", hint="GQA needs HQ = G * HKV")
        return shape

    def sizes(self) -> dict[str, int]:
        return asdict(self)

    def __str__(self) -> str:
        return f"B={self.B} Hq={self.Hq} Hkv={self.Hkv} Sq={self.Sq} Sk={self.Sk} D={self.D} Dv={self.Dv}"


@dataclass(frozen=True)
class RunReport:
    shape: Shape
    dtype: str | None  # None: exact float64
    err_o: float  # ||O - ref|| / ||ref||
    err_lse: float  # max |LSE - ref| / (1 + |ref|)
    tolerance: float
    tolerance_lse: float
    programs: int
    loop_trips: int

    @property
    def passed(self) -> bool:
        return self.err_o <= self.tolerance and self.err_lse <= self.tolerance_lse

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{verdict} {self.shape} dtype={self.dtype or 'float64'} err(O)={self.err_o:.2e}/{self.tolerance:.0e} "
                f"err(LSE)={self.err_lse:.2e}/{self.tolerance_lse:.0e} programs={self.programs} kv_tiles={self.loop_trips}")


def features(program: n.Program) -> dict[str, str | n.Expr | None]:
    merged: dict[str, str | n.Expr | None] = {}
    for kernel in program.kernels:
        merged.update(kernel.feature_map())
    return merged


def default_scalars(program: n.Program, shape: Shape) -> dict[str, float]:
    """Values for the runtime scalars the kernels declare, chosen so each feature changes the answer."""
    defaults = {"scale": 1.0 / math.sqrt(shape.D), "softcap": 1.5, "window_left": 37, "window_right": 11}
    if "causal" in features(program):
        defaults["window_right"] = 0  # a causal window cannot look ahead
    return defaults


def reference_for(program: n.Program, shape: Shape, q, k, v, scalars: Mapping[str, float], slopes: np.ndarray | None):
    """The float64 reference of what ``program`` claims to compute (its ``computes`` header)."""
    feats = features(program)
    sizes = shape.sizes()
    kwargs: dict = {"scale": scalars.get("scale", 1.0 / math.sqrt(shape.D))}
    if "causal" in feats:
        align = feats["causal"] or "bottom_right"
        if align not in ("bottom_right", "top_left"):
            raise AttnforgeError(f"computes causal = {align} is not an alignment", where="computes", hint="bottom_right or top_left")
        kwargs["causal"] = True
        kwargs["causal_align"] = align
    if "window" in feats:
        side = feats["window"] or "both"
        kwargs["window"] = (scalars["window_left"] if side in ("both", "left") else None,
                            scalars["window_right"] if side in ("both", "right") else None)
    if "alibi" in feats:
        kwargs["alibi_slopes"] = slopes
    if "softcap" in feats:
        kwargs["softcap"] = scalars["softcap"]
    if isinstance(feats.get("score_mod"), n.Node):
        kwargs["score_mod"] = expr_fn(feats["score_mod"], sizes, True)
    if isinstance(feats.get("mask_mod"), n.Node):
        kwargs["mask_mod"] = expr_fn(feats["mask_mod"], sizes, False)
    return attention_reference(q, k, v, **kwargs)


def run_and_compare(
    program: n.Program,
    shape: Shape,
    *,
    dtype: str | None = None,
    seed: int = 0,
    scalars: Mapping[str, float] | None = None,
    params: Mapping[str, int] | None = None,
    file: str | None = None,
    progress=None,
) -> RunReport:
    """Interpret ``program`` on fresh random inputs and compare O and LSE with the reference.

    ``dtype=None`` runs exactly in float64 (bound 1e-10); a dtype rounds inputs, casts and
    stores to that format and uses its tolerance. Outputs start as NaN, so an element the
    program never writes fails the comparison. The hot query rows (``numerics.scale_hot_rows``) have
    logits near +-1000, so a program that skips the running-max subtraction overflows.
    """
    rng = np.random.default_rng(seed)
    def make(*dims):
        x = rng.standard_normal(dims)
        return round_to(x, dtype) if dtype else x
    q = rng.standard_normal((shape.B, shape.Hq, shape.Sq, shape.D))
    if dtype not in ("fp8e4m3", "fp8e5m2"):  # fp8 cannot hold the scaled rows without per-tensor scales
        scale_hot_rows(q)
    q = round_to(q, dtype) if dtype else q
    k = make(shape.B, shape.Hkv, shape.Sk, shape.D)
    v = make(shape.B, shape.Hkv, shape.Sk, shape.Dv)
    values = default_scalars(program, shape)
    declared = {name for k in program.kernels for name in k.scalars}
    unknown = sorted(set(scalars or {}) - declared)
    if unknown:
        raise AttnforgeError(f"scalar {unknown[0]!r} is not declared by the program", where="--scalar",
                             hint="scalars: " + ", ".join(sorted(declared)) if declared else "the program declares no runtime scalars")
    values.update(scalars or {})
    slopes = np.array(alibi_slopes_for(shape.Hq))
    tensors = {
        "q": q, "k": k, "v": v, "alibi_slopes": slopes,
        "o": np.full((shape.B, shape.Hq, shape.Sq, shape.Dv), np.nan),
        "lse": np.full((shape.B, shape.Hq, shape.Sq), np.nan),
    }
    program = specialize(program, dtype=dtype, params=params)
    result = run_program(program, shape.sizes(), tensors, scalars=values, exact=dtype is None, file=file, progress=progress)
    ref_o, ref_lse = reference_for(program, shape, q, k, v, values, slopes)
    return RunReport(shape, dtype, relative_error(result.tensors["o"], ref_o), lse_error(result.tensors["lse"], ref_lse),
                     O_TOLERANCE[dtype], lse_tolerance(dtype), result.programs, result.loop_trips)


def specialize(program: n.Program, *, dtype: str | None = None, params: Mapping[str, int] | None = None) -> n.Program:
    """The program with its input/output format set to ``dtype`` (accumulators stay as they are)
    and header parameters overridden by ``params``; a name no kernel declares is an error."""
    params = dict(params or {})
    declared = {p.name for k in program.kernels for p in k.params}
    unknown = sorted(set(params) - declared)
    if unknown:
        raise AttnforgeError(f"parameter {unknown[0]!r} is not declared by the program", where="--param",
                             hint="parameters: " + ", ".join(sorted(declared)) if declared else "the program declares no parameters")
    kernels = []
    for kernel in program.kernels:
        dtypes = dict(kernel.dtypes)
        for alias in ("qkv", "out"):
            if dtype is not None and alias in dtypes:
                dtypes[alias] = dtype
        values = tuple(replace(p, value=params.get(p.name, p.value)) for p in kernel.params)
        kernels.append(replace(kernel, dtypes=tuple(dtypes.items()), params=values))
    return replace(program, kernels=tuple(kernels))


def default_shapes(program: n.Program) -> list[Shape]:
    """Shapes that make every loop of the program matter: several query blocks and K/V tiles with
    ragged tails, Sq < Sk and Sq > Sk (fully masked rows under bottom-right causal), a decode step
    over more K/V tiles than a split-KV program has splits, GQA ratios 4 and 2, and Dv != D."""
    params = {p.name: p.value for k in program.kernels for p in k.params if p.value}
    bm, bn = params.get("BM", 64), params.get("BN", 64)
    splits = params.get("NSPLIT", 1)
    return [
        Shape(2, 8, 2, 2 * bm + 13, 2 * bm + 3 * bn + 7, 64, 64),
        Shape(1, 4, 2, 3 * bm + 5, bn + 3, 40, 48),
        Shape(1, 8, 2, 1, (2 * splits + 1) * bn + 3, 64, 64),
    ]


__all__ = ["Shape", "RunReport", "run_and_compare", "reference_for", "specialize", "default_shapes"]
