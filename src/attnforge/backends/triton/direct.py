"""Launch a recorded Triton kernel through its C launcher, skipping Triton's Python side.

A launch through Triton's JIT binds and specialises every argument, then ``CudaLauncher.__call__``
allocates (empty) scratch and rebuilds a CUtensorMap for every host ``TensorDescriptor``
(``cuTensorMapEncodeTiled`` plus Python objects): tens of microseconds for a kernel with forty
arguments. ``attention()``'s dispatch cache knows that its calls with one key specialise alike,
so after the first launch of a key it holds a ``DirectLaunch``: the C entry point, the packed
metadata, and the tensor maps already encoded, keyed by the address they describe (the key fixes
the shape, strides, block and swizzle, so the same address gives the same 128-byte map).

Only what Triton 3.x exposes is used: ``CompiledKernel.run`` (the ``CudaLauncher``), its
``launch`` (the C function, wrapped by ``wrap_handle_tensordesc`` when the kernel takes
descriptors) and ``make_tensordesc_arg``. When the launcher is built differently (a later Triton,
scratch memory to allocate per launch), ``record`` returns None and the caller keeps launching
the compiled kernel through ``CompiledKernel.run``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

def _descriptor_classes() -> tuple[type, ...]:
    """The host descriptor classes a launch may take: Triton's, and Gluon's (another class with the
    fields ``make_tensordesc_arg`` reads: base, shape, strides, padding; the box and swizzle come
    from the compiled kernel's ``tensordesc_meta``)."""
    try:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
    except ImportError:
        return (TensorDescriptor,)
    return (TensorDescriptor, GluonTensorDescriptor)


DESCRIPTORS = _descriptor_classes()

# Encoded tensor maps kept per kernel and descriptor argument: a model's layers call one key
# with different buffers, each address encoded once. Past this many the maps are re-encoded.
MAPS_KEPT = 256


def _c_entry(launch: Any) -> Optional[Any]:
    """The C launch function behind ``CudaLauncher.launch``: itself when the kernel takes no
    descriptors, else the one ``wrap_handle_tensordesc``'s closure holds; None if neither."""
    if not hasattr(launch, "__code__"):
        return launch  # a builtin: the compiled module's launch
    cells = dict(zip(launch.__code__.co_freevars, launch.__closure__ or ()))
    inner = cells.get("launcher")
    return inner.cell_contents if inner is not None and not hasattr(inner.cell_contents, "__code__") else None


class DirectLaunch:
    """One compiled kernel and its C launcher, ready to launch on a call's arguments."""

    __slots__ = ("c_launch", "head", "tail", "positions", "metas", "blocks", "maps", "expand")

    def __init__(self, c_launch: Any, head: tuple, tail: tuple, positions: tuple[int, ...], metas: tuple, blocks: tuple,
                 expand: Any):
        self.c_launch, self.head, self.tail = c_launch, head, tail
        self.positions, self.metas, self.blocks, self.expand = positions, metas, blocks, expand
        self.maps: dict[tuple[int, int], list] = {}

    @classmethod
    def record(cls, kernel: Any, args: tuple, tail: tuple) -> Optional["DirectLaunch"]:
        """After ``kernel`` (a CompiledKernel) was launched on ``args`` (the JIT's launch, which
        loaded it) with constexpr values ``tail``: its direct launch, or None when this Triton's
        launcher is not the shape this module knows."""
        try:
            from triton.backends.nvidia.driver import make_tensordesc_arg
        except ImportError:
            return None
        launcher = kernel.run
        needed = ("launch", "launch_cooperative_grid", "launch_pdl", "global_scratch_size", "profile_scratch_size")
        if not all(hasattr(launcher, name) for name in needed) or launcher.global_scratch_size or launcher.profile_scratch_size:
            return None
        c_launch = _c_entry(launcher.launch)
        positions = tuple(i for i, a in enumerate(args) if isinstance(a, DESCRIPTORS))
        metas = tuple(getattr(kernel.metadata, "tensordesc_meta", None) or (None,) * len(positions))
        if c_launch is None or len(metas) != len(positions) or (positions and c_launch is launcher.launch):
            return None
        # (function, cooperative, pdl, global scratch, profile scratch, metadata, launch metadata, enter hook, exit hook)
        head = (kernel.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None, kernel.packed_metadata, None, None, None)
        blocks = tuple((list(args[i].block_shape), args[i].padding) for i in positions)  # the boxes, for a replay's tensors
        return cls(c_launch, head, tuple(tail), positions, metas, blocks, make_tensordesc_arg)

    def _descriptor(self, position: int, arg: Any, meta: Any, block: tuple[list[int], str]) -> list:
        """The expanded arguments of a descriptor, given as a TensorDescriptor or (a replay) as
        the tensor it describes, with this position's recorded box."""
        base = arg if isinstance(arg, torch.Tensor) else arg.base
        if meta is None:  # a descriptor the compiler lowered to pointer arithmetic: nothing to encode
            return self.expand(self._full(arg, block), meta)
        key = (position, base.data_ptr())
        found = self.maps.get(key)
        if found is None:
            if len(self.maps) >= MAPS_KEPT:
                self.maps.clear()
            found = self.maps[key] = self.expand(self._full(arg, block), meta)
        return found

    @staticmethod
    def _full(arg: Any, block: tuple[list[int], str]) -> Any:
        if isinstance(arg, DESCRIPTORS):
            return arg
        return TensorDescriptor(arg, list(arg.shape), list(arg.stride()), block[0], block[1])

    def __call__(self, grid: tuple[int, ...], args: tuple, device: int) -> None:
        final: list = [grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                       torch._C._cuda_getCurrentRawStream(device), *self.head]
        start = 0
        for position, meta, block in zip(self.positions, self.metas, self.blocks):
            final += args[start:position]
            final += self._descriptor(position, args[position], meta, block)
            start = position + 1
        final += args[start:]
        final += self.tail
        self.c_launch(*final)
