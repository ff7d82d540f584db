"""What generated Triton modules call at launch time: argument checks, TMA descriptors, the SM
count, and the split-KV rule (``split_count``, re-exported from its one home, ``attnforge.splits``).

Generated launchers import these (``from attnforge.backends.triton.runtime import ...``), so
the checks are ordinary, tested Python rather than source strings pasted into every module.
Every refusal is a ``LaunchError`` naming the argument and what it must be.
"""

from __future__ import annotations

import functools
from typing import Any

from ...abi import ARG_SHAPES
from ...errors import LaunchError
from ...splits import INTERPRETER_SM_COUNT, split_count
from ...targets import tma_can_read


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


def tma_descriptor(t: Any, name: str, block: list[int], *, checked: bool = False) -> Any:
    """A TMA descriptor over the whole tensor ``t`` with ``block``-shaped boxes. ``checked``: an
    earlier call with the same shapes, strides and alignment built one (attention()'s dispatch
    cache), so the checks are skipped, Triton's own included."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if checked:
        desc = object.__new__(TensorDescriptor)  # the dataclass without its __post_init__ assertions
        desc.base, desc.shape, desc.strides, desc.block_shape, desc.padding = t, list(t.shape), list(t.stride()), block, "zero"
        return desc
    if not tma_can_read(t.stride(), t.element_size(), t.data_ptr()):
        raise LaunchError(f"{name} is read through TMA, which needs a unit inner stride, 16-byte aligned strides and data; "
                          f"got strides {tuple(t.stride())} of {t.element_size()}-byte elements",
                          where=name, hint="regenerate with tma = 0 (generate --pointer-loads) for such tensors")
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block)


def program_slots(device: Any) -> int:
    """The device's SM count: the programs a persistent launch starts (one per SM), and what the
    split-KV rule fills. In the CPU interpreter, ``splits.INTERPRETER_SM_COUNT`` (a few)."""
    return _sm_count(device.type, device.index)


@functools.lru_cache(maxsize=None)
def _sm_count(kind: str, index: int | None) -> int:
    # cached: a decode launch asks on every call, and the device's properties never change
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count if kind == "cuda" else INTERPRETER_SM_COUNT


def launch_kernel(fn: Any, grid: tuple[int, ...], args: tuple, constexprs: dict[str, Any], *, num_warps: int, num_stages: int,
                  slots: list | None = None, index: int = 0) -> None:
    """``fn[grid](*args, **constexprs, num_warps=..., num_stages=...)``, or, with ``slots``, the
    compiled kernel in ``slots[index]`` launched directly.

    Triton's JIT binds and specialises every argument on every call (tens of microseconds for a
    kernel with forty arguments). ``attention()``'s dispatch cache knows that its calls with one
    key (shapes, strides, dtypes, 16-byte alignment of the inputs, scalars) specialise alike --
    everything Triton specialises on is in that key, and the outputs and scratch come fresh from
    torch's allocator, aligned -- so it keeps one ``slots`` list per key: the first call goes
    through the JIT and records the kernel it launched, later calls launch that kernel straight
    away. Launch hooks (profilers), the interpreter, and a current device other than the one the
    kernel was recorded on always take the JIT's path."""
    import torch
    from triton import knobs
    from triton.runtime.jit import JITFunction

    compiled = slots[index] if slots is not None and index < len(slots) else None
    hook = knobs.runtime.launch_enter_hook  # a HookChain in triton 3.6: hooked when it holds calls
    device = torch.cuda.current_device() if isinstance(fn, JITFunction) else None
    # the recorded kernel is loaded on the device that was current when it was recorded
    if compiled is None or compiled[2] != device or getattr(hook, "calls", hook) or not isinstance(fn, JITFunction):
        kernel = fn[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
        if slots is not None and isinstance(fn, JITFunction) and compiled is None:
            slots.extend([None] * (index + 1 - len(slots)))
            # the constexprs are literals of the generated call, the same at every launch of this slot
            slots[index] = (kernel, tuple(constexprs[name] for name in fn.arg_names[len(args):]), device)
        return
    kernel, tail, _ = compiled
    stream = torch._C._cuda_getCurrentRawStream(device)  # what Triton's JIT launches on
    kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream, kernel.function,
               kernel.packed_metadata, None, None, None, *args, *tail)


__all__ = ["check_arguments", "launch_kernel", "program_slots", "split_count", "tma_descriptor", "window_bound"]
