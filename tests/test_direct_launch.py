"""The direct launch of a recorded kernel (backends/triton/direct.py), without a GPU.

Triton's own ``wrap_handle_tensordesc`` wraps a recording stand-in for the C launcher, as
``CudaLauncher`` wraps the compiled one: the direct launch must hand the C function exactly the
arguments Triton's path hands it, and encode a tensor map once per address.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from triton.backends.nvidia import driver
from triton.tools.tensor_descriptor import TensorDescriptor

from attnforge.backends.triton import direct
from attnforge.backends.triton.direct import DirectLaunch

SIGNATURE = {0: "*fp16", 1: "tensordesc<fp16[16, 32]>", 2: "i32", 3: "tensordesc<fp16[16, 32]>", 4: "fp32", 5: "constexpr"}


def _kernel(calls: list, meta: list | None, *, scratch: int = 0) -> SimpleNamespace:
    """A CompiledKernel after its first launch: ``run`` is the launcher, ``launch`` Triton's wrapper."""
    c_launch = functools.partial(lambda calls, *a: calls.append(a), calls)  # no __code__: stands for the C function
    launcher = SimpleNamespace(launch=driver.wrap_handle_tensordesc(c_launch, SIGNATURE, meta), launch_cooperative_grid=False,
                               launch_pdl=False, global_scratch_size=scratch, profile_scratch_size=0)
    return SimpleNamespace(run=launcher, function=0xF00, packed_metadata=(4, 1, 1024), metadata=SimpleNamespace(tensordesc_meta=meta))


def _args(q: torch.Tensor, k: torch.Tensor) -> tuple:
    return (q, TensorDescriptor(q, list(q.shape), list(q.stride()), [16, 32]), 7, TensorDescriptor(k, list(k.shape), list(k.stride()), [16, 32]), 0.5)


def _triton_path(kernel: SimpleNamespace, grid: tuple, stream: int, args: tuple, tail: tuple) -> None:
    """What CudaLauncher.__call__ passes to its launch (no scratch)."""
    run = kernel.run
    run.launch(*grid, stream, kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
               kernel.packed_metadata, None, None, None, *args, *tail)


def test_the_c_function_gets_what_tritons_launcher_gives_it(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234, raising=False)
    q, k = torch.zeros(64, 32, dtype=torch.float16), torch.zeros(128, 32, dtype=torch.float16)
    calls: list = []
    kernel = _kernel(calls, None)
    args, tail = _args(q, k), (64,)
    launch = DirectLaunch.record(kernel, args, tail)
    assert launch is not None
    _triton_path(kernel, (3, 1, 1), 1234, args, tail)
    launch((3,), args, 0)
    expected, got = calls
    assert len(expected) == len(got)
    assert all(a is b or a == b for a, b in zip(expected, got)), (expected, got)


def test_a_tensor_map_is_encoded_once_per_address(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    encoded = []

    def encode(desc, meta):  # stands for make_tensordesc_arg's cuTensorMapEncodeTiled
        encoded.append(desc.base.data_ptr())
        return [("map", desc.base.data_ptr()), *desc.shape, *desc.strides]

    calls: list = []
    meta = [{"swizzle": 128}, {"swizzle": 128}]
    launch = DirectLaunch.record(_kernel(calls, meta), _args(torch.zeros(64, 32, dtype=torch.float16), torch.zeros(64, 32, dtype=torch.float16)), (64,))
    launch.expand = encode
    buffers = [torch.zeros(64, 32, dtype=torch.float16) for _ in range(3)]
    for q in buffers:
        for _ in range(2):
            launch((1,), _args(q, buffers[0]), 0)
    assert sorted(encoded) == sorted([q.data_ptr() for q in buffers] + [buffers[0].data_ptr()])  # each q once at position 1; k once at 3
    assert calls[-1][14] == ("map", buffers[2].data_ptr()) and calls[-1][15:17] == (64, 32)  # 13 fixed arguments, then q


def test_the_maps_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(direct, "MAPS_KEPT", 4)
    launch = DirectLaunch.record(_kernel([], [{}, {}]), _args(torch.zeros(64, 32, dtype=torch.float16), torch.zeros(64, 32, dtype=torch.float16)), ())
    launch.expand = lambda desc, meta: ["map"]
    for _ in range(10):
        q = torch.zeros(64, 32, dtype=torch.float16)
        launch((1,), _args(q, q), 0)
        assert len(launch.maps) <= 4


@pytest.mark.parametrize("why", ["scratch", "python-launcher", "descriptor-count"])
def test_a_launcher_of_another_shape_is_not_recorded(why):
    q = torch.zeros(64, 32, dtype=torch.float16)
    kernel = _kernel([], None, scratch=256 if why == "scratch" else 0)
    if why == "python-launcher":
        kernel.run.launch = driver.wrap_handle_tensordesc(lambda *a: None, SIGNATURE, None)  # a Python function inside: unknown
    if why == "descriptor-count":
        kernel.metadata.tensordesc_meta = [{}]
    assert DirectLaunch.record(kernel, _args(q, q), ()) is None
