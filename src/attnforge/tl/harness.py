"""Run a TL program on random inputs and compare it with the float64 reference.

What a program computes comes from its ``computes`` header (causal alignment, window, ALiBi,
softcap, custom score and mask modifiers); the numbers those features need come from runtime
scalars, with defaults chosen to make each feature bite on small shapes.
"""

from __future__ import annotations

import math
import numbers
from functools import partial
from dataclasses import asdict, dataclass, replace
from typing import Callable, Mapping

import numpy as np

from ..dtypes import round_to
from ..errors import AttnforgeError, shorten
from ..numerics import O_TOLERANCE, lse_tolerance, scale_hot_rows
from ..reference import alibi_slopes_for, attention_reference, lse_error, relative_error
from . import nodes as n
from .evaluate import expr_fn
from .interpreter import run_program
from .limits import MAX_ELEMENTS, MAX_STEPS

# Integer scalars (window sizes) beyond this are refused: numpy index arithmetic is int64.
_SCALAR_INT_MAX = 2**62


def _check_scalar(name: str, value: object) -> None:
    """A runtime scalar must be a finite number: NaN or inf would poison the program and the
    reference alike, and their comparison would then prove nothing."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise AttnforgeError(f"scalar {shorten(str(name), 80)} = {shorten(repr(value))} is not a number", where="--scalar", hint="e.g. --scalar softcap=30")
    if isinstance(value, numbers.Integral):
        if abs(int(value)) > _SCALAR_INT_MAX:
            raise AttnforgeError(f"scalar {shorten(str(name), 80)} = {shorten(str(value))} is out of range", where="--scalar", hint="integer scalars (window sizes) are at most 2**62")
    elif not math.isfinite(float(value)):
        raise AttnforgeError(f"scalar {shorten(str(name), 80)} = {value!r} is not a finite number", where="--scalar", hint="give a finite value, e.g. --scalar scale=0.125")



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
        # isdecimal, not isdigit: '²' is a digit that int() refuses; 18 digits keep every size an int64
        if len(parts) not in (6, 7) or not all(p.isascii() and p.isdecimal() and len(p) <= 18 for p in parts):
            raise AttnforgeError(f"shape {shorten(repr(text))} is not B,HQ,HKV,SQ,SK,D[,DV]", where="--shape", hint="e.g. --shape 2,8,2,113,203,64")
        values = [int(p) for p in parts] + ([int(parts[5])] if len(parts) == 6 else [])
        shape = cls(*values)
        if min(values) < 1:
            raise AttnforgeError(f"shape {text!r} has a zero size", where="--shape", hint="every size must be >= 1")
        if shape.Hq % shape.Hkv:
            raise AttnforgeError(f"HQ={shape.Hq} is not a multiple of HKV={shape.Hkv}", where="--shape", hint="GQA needs HQ = G * HKV")
        shape.check_size("--shape")
        return shape

    def check_size(self, where: str = "shape") -> None:
        """Refuse a shape whose inputs, output or reference scores would not fit the interpreter:
        more than ``limits.MAX_ELEMENTS`` elements in any one array."""
        arrays = {"q (B*Hq*Sq*D)": self.B * self.Hq * self.Sq * self.D, "k (B*Hkv*Sk*D)": self.B * self.Hkv * self.Sk * self.D,
                  "v (B*Hkv*Sk*Dv)": self.B * self.Hkv * self.Sk * self.Dv, "o (B*Hq*Sq*Dv)": self.B * self.Hq * self.Sq * self.Dv,
                  "the reference's scores (B*Hq*Sq*Sk)": self.B * self.Hq * self.Sq * self.Sk}
        name, elements = max(arrays.items(), key=lambda item: item[1])
        if elements > MAX_ELEMENTS:
            raise AttnforgeError(f"shape {self.B},{self.Hq},{self.Hkv},{self.Sq},{self.Sk},{self.D},{self.Dv} needs {elements:,} elements for {name}; "
                                 f"the interpreter takes at most {MAX_ELEMENTS:,} (2**26) per array", where=where,
                                 hint="interpret smaller shapes (odd lengths of a few hundred exercise every tile path); it runs in float64 on the CPU")

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
    worst: str = ""  # the rows farthest from the reference, by (b, h, row)

    @property
    def passed(self) -> bool:
        return self.err_o <= self.tolerance and self.err_lse <= self.tolerance_lse

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{verdict} {self.shape} dtype={self.dtype or 'float64'} err(O)={self.err_o:.2e}/{format_tolerance(self.tolerance)} "
                f"err(LSE)={self.err_lse:.2e}/{format_tolerance(self.tolerance_lse)} programs={self.programs} kv_tiles={self.loop_trips}"
                + ("" if self.passed else f"; {self.worst}"))


def format_tolerance(x: float) -> str:
    """A tolerance with the digits it has: 1e-10, 2e-02, 1.5e-01 (not 2e-01: fp8e4m3's is 0.15)."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"


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


# (shape, q, k, v, scalars, slopes) -> (O, LSE) in float64
Reference = Callable[["Shape", np.ndarray, np.ndarray, np.ndarray, Mapping[str, float], np.ndarray], tuple[np.ndarray, np.ndarray]]


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
    max_steps: int = MAX_STEPS,
    reference: Reference | None = None,
) -> RunReport:
    """Interpret ``program`` on fresh random inputs and compare O and LSE with the reference.

    ``dtype=None`` runs exactly in float64 (bound 1e-10); a dtype rounds inputs, casts and
    stores to that format and uses its tolerance. Outputs start as NaN, so an element the
    program never writes fails the comparison. The hot query rows (``numerics.scale_hot_rows``) have
    logits near +-1000, so a program that skips the running-max subtraction overflows.
    ``max_steps`` is the interpreter's work budget (``run_program``). ``reference(shape, q, k, v,
    scalars, slopes) -> (O, LSE)`` replaces the reference of what the program claims (its
    ``computes`` header) with another, e.g. that of the spec the program must implement.
    """
    shape.check_size()
    for name, value in (scalars or {}).items():
        _check_scalar(name, value)
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
    result = run_program(program, shape.sizes(), tensors, scalars=values, exact=dtype is None, file=file, progress=progress, max_steps=max_steps)
    ref_o, ref_lse = (reference or partial(reference_for, program))(shape, q, k, v, values, slopes)
    out_o, out_lse = result.tensors["o"], result.tensors["lse"]
    return RunReport(shape, dtype, relative_error(out_o, ref_o), lse_error(out_lse, ref_lse),
                     O_TOLERANCE[dtype], lse_tolerance(dtype), result.programs, result.loop_trips, _worst_rows(out_o, ref_o, out_lse, ref_lse))


def _worst_rows(out_o: np.ndarray, ref_o: np.ndarray, out_lse: np.ndarray, ref_lse: np.ndarray) -> str:
    """The (b, h, row) farthest from the reference in O (relative to the row's norm; a row the
    reference leaves empty must be exactly 0) and in the LSE."""
    with np.errstate(all="ignore"):
        ref_norm = np.linalg.norm(ref_o, axis=-1)
        o_abs = np.linalg.norm(np.nan_to_num(out_o - ref_o, nan=np.inf), axis=-1)
        o_err = np.where(np.isnan(out_o).any(axis=-1), np.inf, np.where(ref_norm > 0, o_abs / np.where(ref_norm > 0, ref_norm, 1.0), o_abs))
        same = (out_lse == ref_lse) | (np.isinf(out_lse) & np.isinf(ref_lse) & (np.sign(out_lse) == np.sign(ref_lse)))
        lse_err = np.where(same, 0.0, np.abs(np.nan_to_num(out_lse - ref_lse, nan=np.inf)) / (1.0 + np.abs(np.nan_to_num(ref_lse))))
    parts = []
    for name, err in (("O", o_err), ("LSE", lse_err)):
        if err.size and np.max(err) > 0:
            i = np.unravel_index(int(np.argmax(err)), err.shape)
            note = " (|O| where the spec's row is empty)" if name == "O" and ref_norm[i] == 0 else ""
            parts.append(f"{name} worst at b={i[0]} h={i[1]} row={i[2]} ({err[i]:.2e}{note})")
    return "; ".join(parts) or "exact"


def specialize(program: n.Program, *, dtype: str | None = None, params: Mapping[str, int] | None = None) -> n.Program:
    """The program with its input/output format set to ``dtype`` (accumulators stay as they are)
    and header parameters overridden by ``params``; a name no kernel declares is an error. A
    launch-time value named in ``params`` is fixed: its ``launch`` line becomes ``param NAME = value``
    (what a run with that split count, whatever the sizes, means)."""
    params = dict(params or {})
    declared = {name for k in program.kernels for name in (*k.param_map(), *k.launch_names())}
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
        fixed = tuple(n.Param(v.name, params[v.name], line=v.line, col=v.col) for v in kernel.launch if v.name in params)
        launch = tuple(v for v in kernel.launch if v.name not in params)
        kernels.append(replace(kernel, dtypes=tuple(dtypes.items()), params=values + fixed, launch=launch))
    return replace(program, kernels=tuple(kernels))


def default_shapes(program: n.Program) -> list[Shape]:
    """Shapes that make every loop of the program matter: several query blocks and K/V tiles with
    ragged tails, Sq < Sk and Sq > Sk (fully masked rows under bottom-right causal), a decode step
    over more K/V tiles than a split-KV program has splits, GQA ratios 4 and 2, and Dv != D. A
    program whose split count is chosen at launch gets a fourth shape, a decode step of few
    programs over ten K/V tiles: the interpreter's rule then takes several splits of several tiles."""
    params = {p.name: p.value for k in program.kernels for p in k.params if p.value}
    bm, bn = params.get("BM", 64), params.get("BN", 64)
    splits = params.get("NSPLIT", 1)
    shapes = [
        Shape(2, 8, 2, 2 * bm + 13, 2 * bm + 3 * bn + 7, 64, 64),
        Shape(1, 4, 2, 3 * bm + 5, bn + 3, 40, 48),
        Shape(1, 8, 2, 1, (2 * splits + 1) * bn + 3, 64, 64),
    ]
    if any(k.launch for k in program.kernels):
        shapes.append(Shape(1, 4, 2, 1, 9 * bn + 3, 64, 64))
    return shapes


__all__ = ["Shape", "RunReport", "run_and_compare", "reference_for", "specialize", "default_shapes"]
