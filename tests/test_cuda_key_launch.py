"""The CUDA backend's launch path for attention()'s dispatch-cache hits (``CudaKernel.checked_launch``),
on the CPU: the planning step and the argument buffers run without a GPU when the driver and the
stream are faked, so what a hit launches can be checked exactly."""

from __future__ import annotations

import contextlib
import ctypes
import types

import pytest
import torch

from attnforge.api import PreparedCall
from attnforge.backends.cuda import kernel as ck


def test_contiguous_strides_are_torchs():
    for shape in [(2, 3, 5, 7), (1, 1, 1, 8), (4, 0, 3, 2), (6,), ()]:
        assert ck.contiguous_strides(shape) == torch.empty(shape).stride()


class _Recorder:
    """A loaded kernel function as ``CudaKernel._function`` gives it: ``prepare`` records what it
    was given, the launch records each call's addresses."""

    def __init__(self):
        self.prepared, self.calls = [], []

    def prepare(self, pointers, fixed):
        self.prepared.append((tuple(pointers), tuple(fixed)))

        def launch(tensors, grid, threads, smem, stream):
            self.calls.append({"grid": grid, "threads": threads, "smem": smem,
                               "ptrs": {name: tensors[name].data_ptr() for name in pointers},
                               "shapes": {name: tuple(tensors[name].shape) for name in pointers},
                               "contiguous": {name: tensors[name].is_contiguous() for name in pointers}})
        return launch


def _kernel(monkeypatch, recorder, meta):
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(ck, "device_sm_count", lambda device: 132)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    k = ck.CudaKernel.__new__(ck.CudaKernel)
    k.meta, k.takes_alibi = meta, False
    k._function = lambda device, info: recorder
    return k


_PREFILL = {"kernels": [{"name": "attn_fwd", "tensors": ["q", "k", "v", "o", "lse"], "grid": ["B", "Hq", "(-((-Sq) // 128))"],
                         "threads": 256, "smem": 139264, "scalars": ["scale"], "scalar_kinds": {"scale": "float"}, "launch": []}],
            "launch": [], "scratch": []}


def _tensors(B=2, Hq=4, Hkv=2, Sq=300, Sk=500, D=64, q_bshd=False):
    q = torch.randn(B, Sq, Hq, D).transpose(1, 2) if q_bshd else torch.randn(B, Hq, Sq, D)
    return dict(q=q, k=torch.randn(B, Hkv, Sk, D), v=torch.randn(B, Hkv, Sk, D), o=torch.empty(B, Hq, Sq, D), lse=torch.empty(B, Hq, Sq))


def test_a_hit_plans_once_and_launches_each_calls_own_tensors(monkeypatch):
    rec = _Recorder()
    kernel = _kernel(monkeypatch, rec, _PREFILL)
    fast = kernel.checked_launch([], scale=0.125)
    for _ in range(3):
        t = _tensors()
        fast(t["q"], t["k"], t["v"], t["o"], t["lse"])
        assert rec.calls[-1]["ptrs"] == {name: t[name].data_ptr() for name in ("q", "k", "v", "o", "lse")}
        assert rec.calls[-1]["grid"] == 2 * 4 * 3 and rec.calls[-1]["threads"] == 256 and rec.calls[-1]["smem"] == 139264
    assert len(rec.prepared) == 1  # planned at the first hit only
    pointers, fixed = rec.prepared[0]
    strides = [st for name in pointers for st in _tensors()[name].stride()]
    assert [v for _, v in fixed] == strides + [2, 4, 2, 300, 500] + [0.125]
    assert [kind for kind, _ in fixed] == ["i64"] * len(strides) + ["i32"] * 5 + ["f32"]


def test_an_input_the_copies_cannot_read_goes_through_a_contiguous_copy_on_every_hit(monkeypatch):
    rec = _Recorder()
    kernel = _kernel(monkeypatch, rec, _PREFILL)
    fast = kernel.checked_launch([], scale=0.125)
    for _ in range(2):
        t = _tensors(D=64)
        t["k"] = torch.randn(2, 2, 500, 65)[..., :64]  # rows 65 elements apart: not 16-byte units
        fast(t["q"], t["k"], t["v"], t["o"], t["lse"])
        call = rec.calls[-1]
        assert call["contiguous"]["k"] and call["ptrs"]["k"] != t["k"].data_ptr()
        assert call["ptrs"]["q"] == t["q"].data_ptr()
    k_strides = rec.prepared[0][1][4:8]
    assert [v for _, v in k_strides] == list(torch.empty(2, 2, 500, 64).stride())


def test_a_contiguous_input_off_16_bytes_is_copied_to_an_aligned_buffer(monkeypatch):
    """.contiguous() would hand back the misaligned tensor itself: the copy must be a fresh allocation."""
    rec = _Recorder()
    kernel = _kernel(monkeypatch, rec, _PREFILL)
    fast = kernel.checked_launch([], scale=0.125)
    for _ in range(2):
        t = _tensors()
        flat = torch.randn(t["q"].numel() + 2)
        t["q"] = flat[2:].view(t["q"].shape)  # contiguous, 8 bytes past an aligned start
        assert t["q"].is_contiguous() and t["q"].data_ptr() % 16 != 0
        fast(t["q"], t["k"], t["v"], t["o"], t["lse"])
        assert rec.calls[-1]["ptrs"]["q"] % 16 == 0 and rec.calls[-1]["ptrs"]["q"] != t["q"].data_ptr()


def test_split_kv_scratch_is_allocated_per_call_in_the_keys_shapes_and_shared_by_both_kernels(monkeypatch):
    meta = {"launch": [{"name": "NSPLIT", "programs": "B * Hkv", "tiles": "(-((-Sk) // 64))"}],
            "scratch": [{"name": "o_part", "shape": ["B", "NSPLIT", "Hq", "Sq", "128"], "format": "fp32"},
                        {"name": "lse_part", "shape": ["B", "NSPLIT", "Hq", "Sq"], "format": "fp32"}],
            "kernels": [{"name": "partial", "tensors": ["q", "k", "v", "o_part", "lse_part"], "grid": ["B", "Hkv", "NSPLIT"],
                         "threads": 32, "smem": 73728, "scalars": ["scale"], "scalar_kinds": {"scale": "float"}, "launch": ["NSPLIT"]},
                        {"name": "combine", "tensors": ["o", "lse", "o_part", "lse_part"], "grid": ["B", "Hkv"],
                         "threads": 32, "smem": 0, "scalars": [], "scalar_kinds": {}, "launch": ["NSPLIT"]}]}
    rec = _Recorder()
    kernel = _kernel(monkeypatch, rec, meta)
    fast = kernel.checked_launch([], scale=0.1)
    for _ in range(2):
        t = _tensors(B=4, Hq=32, Hkv=8, Sq=1, Sk=4099, D=128)
        fast(t["q"], t["k"], t["v"], t["o"], t["lse"])
        partial, combine = rec.calls[-2:]
        nsplit = ck.split_count(4 * 8, 65, 132)
        assert partial["grid"] == 4 * 8 * nsplit and combine["grid"] == 32
        assert partial["shapes"]["o_part"] == (4, nsplit, 32, 1, 128)
        assert partial["ptrs"]["o_part"] == combine["ptrs"]["o_part"]  # the combine reads what the partial kernel wrote
    assert len(rec.prepared) == 2  # two kernels, planned once


def test_attention_dispatch_takes_a_kernels_checked_launch_after_its_first_call():
    """A kernel without recorded launches (the CUDA backend's) still gets its fast path."""
    calls = []

    class Plain:
        def launch(self, q, k, v, o, lse, **scalars):
            calls.append("checked")

        def checked_launch(self, slots, **scalars):
            return lambda q, k, v, o, lse, **per_call: calls.append("fast")

    prepared = PreparedCall(Plain(), {"scale": 0.5}, None, False)
    for _ in range(3):
        prepared.launch(*(torch.empty(1),) * 5)
    assert calls == ["checked", "fast", "fast"]


def test_the_driver_argument_buffer_takes_each_calls_addresses(monkeypatch):
    launched = []

    class Lib:
        class _F:
            argtypes = None

            def __call__(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
                # read the kernel's parameters back out of the buffer, as the driver would
                n = 3
                arr = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p * n)).contents
                ptr = ctypes.cast(arr[0], ctypes.POINTER(ctypes.c_uint64)).contents.value
                i64 = ctypes.cast(arr[1], ctypes.POINTER(ctypes.c_int64)).contents.value
                f32 = ctypes.cast(arr[2], ctypes.POINTER(ctypes.c_float)).contents.value
                launched.append((gx, bx, smem, ptr, i64, f32))
                return 0
        cuLaunchKernel = _F()

    fn = ck._DriverFunction.__new__(ck._DriverFunction)
    fn.fn = ctypes.c_void_p(0)
    monkeypatch.setattr(ck._DriverFunction, "lib", classmethod(lambda cls: Lib()))
    launch = fn.prepare(["q"], [("i64", 64), ("f32", 0.25)])
    for _ in range(2):
        q = torch.randn(8)
        launch({"q": q}, 7, 128, 4096, 0)
        assert launched[-1] == (7, 128, 4096, q.data_ptr(), 64, 0.25)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
