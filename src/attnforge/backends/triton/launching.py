"""What generated Triton launchers call to launch: TMA descriptors, the SM count, the launch.

Imported by every generated module (``from attnforge.backends.triton.launching import ...``);
torch and Triton are imported here once, not on every launch.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Optional

import torch
from triton import knobs
from triton.knobs import HookChain
from triton.runtime.jit import JITFunction
from triton.tools.tensor_descriptor import TensorDescriptor

from ...errors import LaunchError
from ...splits import INTERPRETER_SM_COUNT, device_sm_count
from ...targets import tma_can_read
from .direct import DirectLaunch

_new = object.__new__


def tma_descriptor(t: torch.Tensor, name: str, block: list[int], *, checked: bool = False) -> TensorDescriptor:
    """A TMA descriptor over the whole tensor ``t`` with ``block``-shaped boxes. ``checked``: an
    earlier call with the same shapes, strides and alignment built one (attention()'s dispatch
    cache), so the checks are skipped, Triton's own included."""
    if checked:  # the dataclass without its __post_init__ assertions, its fields set at once
        desc = _new(TensorDescriptor)
        desc.__dict__ = {"base": t, "shape": list(t.shape), "strides": list(t.stride()), "block_shape": block, "padding": "zero"}
        return desc
    if not tma_can_read(t.stride(), t.element_size(), t.data_ptr()):
        raise LaunchError(f"{name} is read through TMA, which needs a unit inner stride, 16-byte aligned strides and data; "
                          f"got strides {tuple(t.stride())} of {t.element_size()}-byte elements",
                          where=name, hint="regenerate with tma = 0 (generate --pointer-loads) for such tensors")
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block)


def program_slots(device: torch.device) -> int:
    """The device's SM count: the programs a persistent launch starts (one per SM), and what the
    split-KV rule fills. In the CPU interpreter, ``splits.INTERPRETER_SM_COUNT`` (a few)."""
    if device.type != "cuda":
        return INTERPRETER_SM_COUNT
    return device_sm_count(device.index if device.index is not None else torch.cuda.current_device())


class Recording:
    """One call of a dispatch key being recorded (``replay.KeyLaunch``): its launches (direct
    launch or None, grid, arguments), and the ids of the scratch buffers its launcher made."""

    __slots__ = ("launches", "scratch")

    def __init__(self) -> None:
        self.launches: list[tuple[Optional[DirectLaunch], tuple[int, ...], tuple]] = []
        self.scratch: set[int] = set()


# the call being recorded, per thread and task (None: not recording)
recording: ContextVar[Optional[Recording]] = ContextVar("attnforge_launch_recording", default=None)


def scratch(t: torch.Tensor) -> torch.Tensor:
    """``t``, a buffer a generated launcher allocated for this call alone; a recording notes it,
    so a replay allocates a fresh one where it went (and refuses any other unknown tensor)."""
    rec = recording.get()
    if rec is not None:
        rec.scratch.add(id(t))
    return t


def _hooked(hook: Any) -> bool:
    return bool(hook.calls) if type(hook) is HookChain else hook is not None


def launch_hooked() -> bool:
    """Whether Triton has launch hooks (a profiler): then launches go through its JIT, which
    calls them. Triton 3.6 keeps them in HookChains; older code may assign a function."""
    return _hooked(knobs.runtime.launch_enter_hook) or _hooked(knobs.runtime.launch_exit_hook)


class _Slot:
    """The compiled kernel one launch of a dispatch key recorded, on the device it was loaded on."""

    __slots__ = ("kernel", "tail", "device", "direct")

    def __init__(self, kernel: Any, tail: tuple, device: int, direct: DirectLaunch | None):
        self.kernel, self.tail, self.device, self.direct = kernel, tail, device, direct


def launch_kernel(fn: Any, grid: tuple[int, ...], args: tuple, constexprs: dict[str, Any], *, num_warps: int, num_stages: int | None = None,
                  maxnreg: int | None = None, slots: list | None = None, index: int = 0) -> None:
    """``fn[grid](*args, **constexprs, num_warps=..., num_stages=...)`` (no ``num_stages`` for a Gluon
    kernel, which lays out its own pipeline; ``maxnreg``: the registers a thread may hold, where a
    kernel is meant to leave room for another program on its SM), or, with ``slots``, the
    compiled kernel in ``slots[index]`` launched directly.

    Triton's JIT binds and specialises every argument on every call (tens of microseconds for a
    kernel with forty arguments). ``attention()``'s dispatch cache knows that its calls with one
    key (shapes, strides, dtypes, 16-byte alignment of the inputs, scalars) specialise alike --
    everything Triton specialises on is in that key, and the outputs and scratch come fresh from
    torch's allocator, aligned -- so it keeps one ``slots`` list per key: the first call goes
    through the JIT and records the kernel it launched, later calls launch that kernel through
    its C launcher (``direct.DirectLaunch``). Launch hooks (profilers), the interpreter, and a
    current device other than the one the kernel was recorded on always take the JIT's path.
    While a call is being recorded (``recording``), each launch is noted in it (``replay.KeyLaunch``)."""
    slot: _Slot | None = slots[index] if slots is not None and index < len(slots) else None
    jit = isinstance(fn, JITFunction)
    device = torch._C._cuda_getDevice() if jit else None  # torch.cuda.current_device() without its lazy-init check
    rec = recording.get() if slots is not None else None
    # the recorded kernel is loaded on the device that was current when it was recorded
    if slot is None or slot.device != device or launch_hooked() or not jit:
        if rec is not None:
            rec.launches.append((None, grid, args))  # through the JIT: not replayable
        options = {"num_warps": num_warps} if num_stages is None else {"num_warps": num_warps, "num_stages": num_stages}
        if maxnreg is not None:
            options["maxnreg"] = maxnreg
        kernel = fn[grid](*args, **constexprs, **options)
        if slots is not None and jit and slot is None:
            slots.extend([None] * (index + 1 - len(slots)))
            # the constexprs are literals of the generated call, the same at every launch of this slot
            tail = tuple(constexprs[name] for name in fn.arg_names[len(args):])
            slots[index] = _Slot(kernel, tail, device, DirectLaunch.record(kernel, args, tail))
        return
    if rec is not None:
        rec.launches.append((slot.direct, grid, args))
    if slot.direct is not None:
        slot.direct(grid, args, device)
        return
    kernel = slot.kernel
    stream = torch._C._cuda_getCurrentRawStream(device)  # what Triton's JIT launches on
    kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream, kernel.function,
               kernel.packed_metadata, None, None, None, *args, *slot.tail)
