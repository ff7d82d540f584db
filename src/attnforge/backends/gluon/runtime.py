"""What generated Gluon modules call at launch: TMA descriptors for q, k and v (and o, where O leaves by TMA stores).

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
