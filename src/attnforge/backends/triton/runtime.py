"""The argument checks generated Triton launchers run, and the split-KV rule (``split_count``,
re-exported from its one home, ``attnforge.splits``): plain Python, no Triton import (the CUDA
backend's launchers run the checks too).

Generated launchers import these (``from attnforge.backends.triton.runtime import ...``), so
the checks are ordinary, tested Python rather than source strings pasted into every module.
Every refusal is a ``LaunchError`` naming the argument and what it must be. What needs torch
and Triton at launch (descriptors, the launch itself) is in ``launching``.
"""

from __future__ import annotations

from typing import Any

from ...abi import ARG_SHAPES
from ...errors import LaunchError
from ...splits import split_count


def check_arguments(tensors: dict[str, Any], head_dim: int, head_dim_v: int, dtypes: dict[str, Any]) -> None:
    """Refuse what a kernel specialised to these head dims and formats cannot run, instead of
    computing something wrong. ``tensors`` maps ABI names (q, k, v, o, lse, ...) to torch tensors."""
    q, k, v = tensors["q"], tensors["k"], tensors["v"]
    if q.shape[-1] != head_dim or k.shape[-1] != head_dim or v.shape[-1] != head_dim_v:
        raise LaunchError(f"this kernel is specialised to head dims D={head_dim}, Dv={head_dim_v}; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}",
                          where="q, k, v", hint="generate a kernel for these head dims")
    for name, t in tensors.items():
        if t.dtype != dtypes[name]:
            raise LaunchError(f"{name} must be {dtypes[name]}, got {t.dtype}", where=name)
        if t.dim() != len(ARG_SHAPES[name]):
            raise LaunchError(f"{name} must have dims {ARG_SHAPES[name]}, got shape {tuple(t.shape)}", where=name)
        if t.device != q.device:
            raise LaunchError(f"{name} is on {t.device}, q on {q.device}", where=name, hint="put every tensor on one device")
        # Offsets inside a head (sequence x head dim) are int32 in the kernel; batch and head offsets are int64.
        span = sum((size - 1) * abs(stride) for size, stride in list(zip(t.shape, t.stride()))[-2:])
        if span >= 2**31:
            raise LaunchError(f"{name}: one head spans {span} elements, more than int32 offsets reach", where=name, hint="split the sequence")
    # Every size must agree with the one q, k and v fix: a mismatch would read or write out of bounds.
    B, Hq, Sq, _ = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise LaunchError(f"query heads {Hq} must be a multiple of key/value heads {Hkv}", where="q, k")
    sizes = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Sk": Sk, "D": head_dim, "Dv": head_dim_v}
    for name, t in tensors.items():
        want = tuple(sizes[d] for d in ARG_SHAPES[name])
        if tuple(t.shape) != want:
            raise LaunchError(f"{name} has shape {tuple(t.shape)}; with q {tuple(q.shape)} and k {tuple(k.shape)} it must be {want} ({', '.join(ARG_SHAPES[name])})",
                              where=name)


def window_bound(name: str, value: int, Sq: int, Sk: int) -> int:
    """A window side as the kernel reads it: >= 0, and clamped to Sq + Sk (a wider window is
    unbounded, and clamping keeps the kernel's int32 bounds from wrapping)."""
    if value < 0:
        raise LaunchError(f"{name} must be >= 0, got {value}", where=name)
    return min(int(value), Sq + Sk)


__all__ = ["check_arguments", "split_count", "window_bound"]
