"""The kernel ABI: what every attention kernel takes, whatever language it is written in.

Tensor arguments with their shapes (in size names, BHSD by dimension order; strides are the
launcher's business) and formats, the size arguments, and the runtime scalars a launcher binds.
TL programs, the checker, the interpreter, every backend, verification and the PyTorch API read
these tables; nothing else lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ARG_SHAPES: dict[str, tuple[str, ...]] = {
    "q": ("B", "Hq", "Sq", "D"),
    "k": ("B", "Hkv", "Sk", "D"),
    "v": ("B", "Hkv", "Sk", "Dv"),
    "o": ("B", "Hq", "Sq", "Dv"),
    "lse": ("B", "Hq", "Sq"),
    "alibi_slopes": ("Hq",),
}
# A header alias (qkv, out) or a fixed format: the log-sum-exp and ALiBi slopes are always fp32.
ARG_DTYPE: dict[str, str] = {"q": "qkv", "k": "qkv", "v": "qkv", "o": "out", "lse": "fp32", "alibi_slopes": "fp32"}
INPUTS = ("q", "k", "v", "alibi_slopes")
OUTPUTS = ("o", "lse")

# Sizes passed to every kernel at run time; D and Dv are compile-time specialisations.
SIZE_ARGS = ("B", "Hq", "Hkv", "Sq", "Sk")
HEAD_DIM_NAMES = ("D", "Dv")


@dataclass(frozen=True)
class RuntimeScalar:
    """A number a kernel reads at run time: its type in the kernel and what it means."""

    name: str
    kind: str  # "float" or "int"
    meaning: str


RUNTIME_SCALARS: dict[str, RuntimeScalar] = {s.name: s for s in (
    RuntimeScalar("scale", "float", "softmax scale"),
    RuntimeScalar("softcap", "float", "logit softcap"),
    RuntimeScalar("window_left", "int", "keys left of the diagonal"),
    RuntimeScalar("window_right", "int", "keys right of the diagonal"),
)}
INT_SCALARS = frozenset(s.name for s in RUNTIME_SCALARS.values() if s.kind == "int")


def arg_format(name: str, dtypes: dict[str, str]) -> str:
    """The format of argument ``name`` under a kernel's dtype header (fp32 when the alias is unset)."""
    alias = ARG_DTYPE[name]
    return dtypes.get(alias, alias if alias == "fp32" else "fp32")


def scalar_values(spec: Any) -> dict[str, int | float]:
    """The runtime scalars an AttentionSpec (any object with these fields) gives values to:
    ``scale`` always, each other scalar when its feature is on."""
    out: dict[str, int | float] = {"scale": spec.scale}
    for name in RUNTIME_SCALARS:
        if name != "scale" and getattr(spec, name) is not None:
            out[name] = getattr(spec, name)
    return out


def check_scalars(scalars: dict[str, object]) -> None:
    """Runtime scalars of the right kind, as every backend's kernels take them: finite real
    numbers, integers for window sizes. Raises LaunchError naming the scalar."""
    import math
    import numbers

    from .errors import LaunchError

    for name, value in scalars.items():
        kind = RUNTIME_SCALARS[name].kind if name in RUNTIME_SCALARS else "float"
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise LaunchError(f"{name} = {value!r} is not an integer", where=name, hint=f"{name} is {RUNTIME_SCALARS[name].meaning}: an int >= 0")
        elif isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            raise LaunchError(f"{name} = {value!r} is not a finite number", where=name, hint="pass a Python float")


def new_outputs(q: Any, v: Any, o_dtype: Any = None, *, bshd: bool = False) -> tuple[Any, Any]:
    """Fresh outputs for BHSD-indexed q and v: O (B, Hq, Sq, Dv) in ``o_dtype`` (q's by default),
    laid out (B, Sq, Hq, Dv) underneath with ``bshd``, and the LSE (B, Hq, Sq, fp32)."""
    import torch

    B, Hq, Sq, _ = q.shape
    Dv = v.shape[3]
    dtype = q.dtype if o_dtype is None else o_dtype
    if bshd:
        o = torch.empty((B, Sq, Hq, Dv), dtype=dtype, device=q.device).transpose(1, 2)
    else:
        o = torch.empty((B, Hq, Sq, Dv), dtype=dtype, device=q.device)
    return o, torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device)
