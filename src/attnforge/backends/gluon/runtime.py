"""What generated Gluon modules call at launch: TMA descriptors for q, k and v (and o, where O leaves by TMA stores),
and the arrival counters of a split-KV kernel that merges its own splits.

A descriptor covers the whole 4-d BHSD view of a tensor (any strides TMA accepts), with a
``[1, 1, rows, cols]`` block: a tile never crosses into another head, and rows past the end of a
sequence read as zeros. Layouts depend on the block and dtype only and are cached.
"""

from __future__ import annotations

import functools
from typing import Any

from ...errors import LaunchError
from ...targets import tma_can_read


@functools.lru_cache(maxsize=64)
def _layout(block: tuple[int, ...], dtype: Any) -> Any:
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(list(block), {"torch.float16": gl.float16, "torch.bfloat16": gl.bfloat16}[str(dtype)])


def tma_descriptor(t: Any, name: str, block: list[int]) -> Any:
    """A host TMA descriptor for ``t`` (B, H, S, D) with ``block``; LaunchError when TMA cannot read it."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    size = t.element_size()
    if not tma_can_read(tuple(t.stride()), size, t.data_ptr()):
        if name == "o":  # an output: a copy of it would be written, then lost
            raise LaunchError(f"o (strides {tuple(t.stride())}, {size}-byte elements) cannot be written by TMA: every stride but the last must be "
                              "a multiple of 16 bytes, the last 1, and the data 16-byte aligned", where="o",
                              hint="allocate o with torch.empty(...) (contiguous, or a transposed view of a contiguous one), or generate "
                                   "without ostage (O then leaves by pointer stores)")
        raise LaunchError(f"{name} (strides {tuple(t.stride())}, {size}-byte elements) cannot be read by TMA: every stride but the last must be "
                          "a multiple of 16 bytes, the last 1, and the data 16-byte aligned", where=name,
                          hint=f"pass {name}.contiguous(), or generate with --backend triton (pointer loads take any strides)")
    return TensorDescriptor.from_tensor(t, block, _layout(tuple(block), t.dtype))


_COUNTERS: dict[tuple[int, int], Any] = {}  # (device, stream) -> int32 counters, 0 between launches
MIN_COUNTERS = 4096  # (grown by doubling: a new buffer only for a larger call than any before on the stream)


def merge_counters(device: Any, count: int) -> Any:
    """``count`` int32 counters, all 0, for a split-KV partial kernel that merges its own splits
    (gluon/merge.py): each row tile's last split sets its counter back to 0, so a buffer is 0 again
    whenever the launch before it on its stream is done. One buffer per (device, stream): launches on
    one stream run in turn; on two streams they may run at once, each on its own. Under CUDA graph
    capture a fresh zeroed buffer (a memset node of the graph): a captured launch owns its counters,
    whatever stream the graph is replayed on and whatever else runs beside it."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(count, dtype=torch.int32, device=device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, torch._C._cuda_getCurrentRawStream(index))
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < count:
        # the old buffer goes back to torch's allocator, which reuses it only after this stream's launches
        buf = _COUNTERS[key] = torch.zeros(max(count, MIN_COUNTERS, 2 * (buf.numel() if buf is not None else 0)), dtype=torch.int32, device=device)
    return buf
