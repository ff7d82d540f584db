"""A generated CUDA file on disk, compiled for the local GPU (cached cubin) and launched on torch
tensors on torch's current stream: through CuPy (``RawModule``) when it is installed, else
through the CUDA driver API directly (``libcuda`` via ctypes). ``ATTNFORGE_CUDA_LOADER=cupy|driver``
picks one. No PyTorch extension is built: nvcc makes a cubin, the driver loads it.

A program of several kernels (split-KV decode: the partial kernel, then the combine) is launched
in order on one stream. Its host side runs per call from the file's launch facts: the split count
(``launch_values``: ``attnforge.splits.split_count`` on the call's sizes and the GPU's SM count),
the scratch buffers (``scratch_shapes``, allocated with torch.empty on the device) and each
kernel's grid (``grid_blocks``); these three are plain Python, testable without a GPU.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ...abi import ARG_SHAPES, SIZE_ARGS, check_scalars, new_outputs
from ...dtypes import torch_dtype
from ...errors import AttnforgeError, CompileError, LaunchError
from ...splits import DEFAULT_PER_SM, device_sm_count, split_count
from ..triton.runtime import check_arguments, window_bound  # plain Python (no triton import): the ABI's argument checks
from .compile import PATHS, arch_of, compile_cubin
from .module import read_meta

_LOCK = threading.Lock()


def _cdiv_env() -> dict:
    return {"min": min, "max": max, "abs": abs}


def _host_int(expr: str, env: dict) -> int:
    return int(eval(expr, {"__builtins__": {}}, {**_cdiv_env(), **env}))  # noqa: S307 (our own integer expressions)


# ------------------------------------------------------------------------------ the host side of a call

def launch_values(meta: dict, sizes: dict[str, int], sm_count: int) -> dict[str, int]:
    """The call's launch-time values (``launch NSPLIT = splits(PROGRAMS, TILES)``): the split-KV rule
    on these sizes and the GPU's SM count, as the Triton launcher and the TL interpreter apply it."""
    values: dict[str, int] = {}
    for v in meta.get("launch", []):
        env = {**sizes, **values}
        values[v["name"]] = split_count(_host_int(v["programs"], env), _host_int(v["tiles"], env), sm_count, v.get("per_sm", DEFAULT_PER_SM))
    return values


def scratch_shapes(meta: dict, env: dict[str, int]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Each scratch tensor's shape and dtype for a call (``env``: the sizes and launch-time values)."""
    return {sc["name"]: (tuple(_host_int(e, env) for e in sc["shape"]), torch_dtype(sc["format"])) for sc in meta.get("scratch", [])}


def grid_blocks(info: dict, env: dict[str, int]) -> int:
    """The blocks of one kernel's launch: the product of its TL grid's extents (flattened onto x)."""
    return math.prod(_host_int(g, env) for g in info["grid"]) if info["grid"] else 1


# ------------------------------------------------------------------------------ loaders

_NUMPY = {"ptr": np.uint64, "i64": np.int64, "i32": np.int32, "f32": np.float32}
_CTYPES = {"ptr": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float}


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (what ``.contiguous()`` and ``torch.empty`` give)."""
    out, step = [], 1
    for extent in reversed(shape):
        out.append(step)
        step *= max(extent, 1)
    return tuple(reversed(out))


class _CupyFunction:
    def __init__(self, cubin: bytes, name: str, smem: int, device: int):
        import cupy

        self.cupy = cupy
        import hashlib
        import tempfile

        file = Path(tempfile.gettempdir()) / f"attnforge-{hashlib.sha256(cubin).hexdigest()[:24]}.cubin"
        if not file.is_file():
            part = file.with_suffix(f".{os.getpid()}.part")
            part.write_bytes(cubin)
            os.replace(part, file)
        with cupy.cuda.Device(device):
            self.module = cupy.RawModule(path=str(file))
            self.fn = self.module.get_function(name)
            if smem > 48 * 1024:
                self.fn.max_dynamic_shared_size_bytes = smem
        self.device = device

    def prepare(self, pointers: list[str], fixed: list[tuple[str, Any]]) -> Callable[..., None]:
        """``launch(tensors, grid, threads, smem, stream)``: the kernel on ``tensors[name]`` for each
        of ``pointers``, then the ``fixed`` (kind, value) arguments, converted once here."""
        cupy, fn, device = self.cupy, self.fn, self.device
        rest = tuple(_NUMPY[kind](value) for kind, value in fixed)

        def launch(tensors: dict, grid: int, threads: int, smem: int, stream: int) -> None:
            ptrs = tuple(np.uint64(tensors[name].data_ptr()) for name in pointers)
            with cupy.cuda.Device(device), cupy.cuda.ExternalStream(stream):
                fn((grid,), (threads,), ptrs + rest, shared_mem=smem)
        return launch


class _DriverFunction:
    _lib = None

    @classmethod
    def lib(cls):
        if cls._lib is None:
            lib = ctypes.CDLL("libcuda.so.1")
            cls._check(lib.cuInit(0), "cuInit")
            cls._lib = lib
        return cls._lib

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise LaunchError(f"CUDA driver call {what} failed with error {code}", where="cuda launch")

    def __init__(self, cubin: bytes, name: str, smem: int, device: int):
        lib = self.lib()
        torch.cuda.current_stream(device)  # the runtime's primary context exists and is current
        ctx = ctypes.c_void_p()
        self._check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            dev = ctypes.c_int()
            self._check(lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
            self._check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
            self._check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self._image = ctypes.create_string_buffer(cubin, len(cubin))
        self.module = ctypes.c_void_p()
        self._check(lib.cuModuleLoadData(ctypes.byref(self.module), self._image), "cuModuleLoadData")
        self.fn = ctypes.c_void_p()
        self._check(lib.cuModuleGetFunction(ctypes.byref(self.fn), self.module, name.encode()), "cuModuleGetFunction")
        if smem > 48 * 1024:
            self._check(lib.cuFuncSetAttribute(self.fn, 8, ctypes.c_int(smem)), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")

    def prepare(self, pointers: list[str], fixed: list[tuple[str, Any]]) -> Callable[..., None]:
        """As ``_CupyFunction.prepare``: the argument buffer is built once, each call writes its
        tensors' addresses into the pointer slots and launches."""
        values = [ctypes.c_uint64(0) for _ in pointers] + [_CTYPES[kind](value) for kind, value in fixed]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        slots = values[: len(pointers)]
        lib, fn, lock = self.lib(), self.fn, threading.Lock()
        lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                       ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]

        def launch(tensors: dict, grid: int, threads: int, smem: int, stream: int) -> None:
            with lock:  # one argument buffer: two threads launching this key at once take turns
                for slot, name in zip(slots, pointers):
                    slot.value = tensors[name].data_ptr()
                self._check(lib.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, smem, ctypes.c_void_p(stream), params, None), "cuLaunchKernel")
        return launch


def _loader() -> str:
    want = os.environ.get("ATTNFORGE_CUDA_LOADER", "auto")
    if want in ("cupy", "driver"):
        return want
    try:
        import cupy  # noqa: F401

        return "cupy"
    except Exception:
        return "driver"


# ------------------------------------------------------------------------------ the kernel

class CudaKernel:
    """``kernel(q, k, v, scale=..., ...) -> (o, lse)`` for a generated CUDA file (BHSD-indexed tensors).

    ``path``: "native" (the GPU's own code) or "turing" (the sm_75 code: m16n8k8, no cp.async)."""

    interpret = False

    def __init__(self, path: str | Path, *, interpret: bool | None = None, code_path: str | None = None, loader: str | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise AttnforgeError(f"no generated CUDA file at {self.path}", where=str(self.path), hint="run 'attnforge generate --backend cuda --out DIR' first")
        if interpret:
            raise AttnforgeError("the CUDA backend has no CPU interpreter: its kernels run on an NVIDIA GPU (sm_75 or newer)", where=str(self.path),
                                 hint="verify it on a GPU, generate with --no-verify on a CPU machine, or use --backend triton (which interprets on a CPU)")
        if not torch.cuda.is_available():
            raise AttnforgeError("no CUDA GPU here: the CUDA backend's kernels run natively only (it has no CPU interpreter)", where=str(self.path),
                                 hint="generate with --no-verify here and verify on a GPU ('attnforge verify DIR'), or use --backend triton")
        self.source = self.path.read_text()
        try:
            self.meta = read_meta(self.source)
        except (ValueError, KeyError) as err:
            raise CompileError(f"{self.path} has no readable attnforge-cuda-meta line: {err}", where=str(self.path), hint="regenerate it") from err
        self.code_path = code_path or os.environ.get("ATTNFORGE_CUDA_PATH", "native")
        if self.code_path not in PATHS:
            raise AttnforgeError(f"unknown CUDA code path {self.code_path!r}", where="ATTNFORGE_CUDA_PATH", hint="native or turing")
        self.loader = loader or _loader()
        self.head_dim, self.head_dim_v = self.meta["head_dim"], self.meta["head_dim_v"]
        kinfo = self.meta["kernels"]
        formats = {t: f for k in kinfo for t, f in k["formats"].items()}
        self.dtypes = {t: torch_dtype(f) for t, f in formats.items() if t in ARG_SHAPES}
        self.scalar_names = sorted({s for k in kinfo for s in k["scalars"]})
        self.takes_alibi = any("alibi_slopes" in k["tensors"] for k in kinfo)
        self._functions: dict[tuple[int, str], Any] = {}

    @property
    def device(self) -> str:
        return "cuda"

    def _function(self, device: int, info: dict):
        key = (device, info["name"])
        with _LOCK:
            if key not in self._functions:
                cc = torch.cuda.get_device_capability(device)
                cubin, _, _, _ = compile_cubin(self.source, arch_of(cc), self.code_path)
                cls = _CupyFunction if self.loader == "cupy" else _DriverFunction
                self._functions[key] = cls(cubin, info["name"], info["smem"], device)
            return self._functions[key]

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, **scalars) -> None:
        takes = set(self.scalar_names) | ({"alibi_slopes"} if self.takes_alibi else set())
        unknown = sorted(set(scalars) - takes)
        if unknown:
            raise LaunchError(f"this kernel takes no {', '.join(unknown)}", where="kernel call", hint=f"it takes {', '.join(sorted(takes))}")
        missing = sorted(takes - set(scalars))
        if missing:
            raise LaunchError(f"this kernel needs {', '.join(missing)}", where="kernel call", hint="pass them as keyword arguments")
        tensors = dict(q=q, k=k, v=v, o=o, lse=lse)
        if self.takes_alibi:
            tensors["alibi_slopes"] = scalars["alibi_slopes"]
        for name, t in tensors.items():
            if not isinstance(t, torch.Tensor):
                raise LaunchError(f"{name} is a {type(t).__name__}, not a torch.Tensor", where=name)
            if t.device.type != "cuda":
                raise LaunchError(f"{name} is on {t.device}; this kernel runs on a CUDA GPU", where=name, hint="move the tensors with .to('cuda')")
        check_scalars({n_: x for n_, x in scalars.items() if n_ != "alibi_slopes"})
        check_arguments(tensors, self.head_dim, self.head_dim_v, self.dtypes)
        self._plan(tensors, scalars).run(tensors)

    def _plan(self, tensors: dict[str, torch.Tensor], scalars: dict) -> "_Launches":
        """Everything a call's launches need that follows from its shapes, strides, alignment and
        scalars (never from the addresses): which inputs go through a contiguous copy, the
        launch-time values, the scratch shapes, and per kernel its grid and argument list."""
        q, k, o = tensors["q"], tensors["k"], tensors["o"]
        B, Hq, Sq, _ = q.shape
        Hkv, Sk = k.shape[1], k.shape[2]
        device = q.device.index if q.device.index is not None else torch.cuda.current_device()
        # 16-byte row copies need unit inner strides, rows at 8-element multiples and 16-byte aligned data;
        # pair stores need even row strides. Other layouts go through a contiguous copy.
        copied = tuple(name for name in ("q", "k", "v") if not (tensors[name].stride(-1) == 1 and all(s % 8 == 0 for s in tensors[name].stride()[:-1])
                                                                and tensors[name].data_ptr() % 16 == 0))
        o_direct = o.stride(-1) == 1 and all(s % 2 == 0 for s in o.stride()[:-1]) and o.data_ptr() % 4 == 0
        strides = {name: (t.stride() if name not in copied else contiguous_strides(tuple(t.shape))) for name, t in tensors.items()}
        if not o_direct:
            strides["o"] = contiguous_strides(tuple(o.shape))
        if "alibi_slopes" in tensors:
            strides["alibi_slopes"] = (1,)  # passed contiguous
        values = dict(scalars)
        for name in ("window_left", "window_right"):
            if name in values:
                values[name] = window_bound(name, values[name], Sq, Sk)
        sizes = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Sk": Sk}
        env = {**sizes, **launch_values(self.meta, sizes, device_sm_count(device))}
        scratch = scratch_shapes(self.meta, env)
        for name, (shape, _) in scratch.items():
            strides[name] = contiguous_strides(shape)
        launches = []
        if B * Hq * Sq != 0:
            for info in self.meta["kernels"]:  # in program order, on one stream: the combine reads what the partial kernel wrote
                grid = grid_blocks(info, env)
                if grid <= 0:
                    continue
                if grid >= 2**31:
                    raise LaunchError(f"{grid} blocks exceed the grid limit", where="kernel call", hint="split the batch")
                fixed = [("i64", st) for t in info["tensors"] for st in strides[t]]
                fixed += [("i32", sizes[s_]) for s_ in SIZE_ARGS]
                fixed += [("i32" if info["scalar_kinds"][s_] == "int" else "f32", values[s_]) for s_ in info["scalars"]]
                fixed += [("i32", env[v_]) for v_ in info.get("launch", [])]
                fn = self._function(device, info)
                launches.append((fn.prepare(info["tensors"], fixed), grid, info["threads"], info["smem"]))
        return _Launches(device, copied, o_direct, scratch, launches)

    def checked_launch(self, slots: list, **scalars) -> Callable[..., None]:
        """For the later calls of a key of ``attention()``'s dispatch cache whose first launch
        passed every check: the launches with the checks skipped, planned at the first of them
        (grids, arguments, scratch shapes follow from the key, not from the addresses) and each
        call's tensors put in. ``slots`` is the Triton launchers' recording; these launches need none."""
        return _KeyLaunch(self, scalars)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None, **scalars) -> tuple[torch.Tensor, torch.Tensor]:
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        o, lse = new_outputs(q, v, self.dtypes.get("o", q.dtype))
        self.launch(q, k, v, o, lse, scale=scale, **scalars)
        return o, lse


class _Launches:
    """One key's planned launches (``CudaKernel._plan``); ``run`` puts a call's tensors in."""

    __slots__ = ("device", "copied", "o_direct", "scratch", "launches")

    def __init__(self, device: int, copied: tuple[str, ...], o_direct: bool, scratch: dict, launches: list):
        self.device, self.copied, self.o_direct, self.scratch, self.launches = device, copied, o_direct, scratch, launches

    def run(self, tensors: dict[str, torch.Tensor]) -> None:
        if not self.launches:
            return
        tensors = dict(tensors)
        for name in self.copied:  # a fresh allocation (aligned): .contiguous() returns a misaligned contiguous view as it is
            tensors[name] = tensors[name].clone(memory_format=torch.contiguous_format)
        o_target = tensors["o"]
        if not self.o_direct:
            tensors["o"] = torch.empty(o_target.shape, dtype=o_target.dtype, device=o_target.device)
        if "alibi_slopes" in tensors:
            tensors["alibi_slopes"] = tensors["alibi_slopes"].contiguous()
        for name, (shape, dtype) in self.scratch.items():  # this call's own: the kernels run on one stream
            tensors[name] = torch.empty(shape, dtype=dtype, device=o_target.device)
        stream = torch.cuda.current_stream(self.device).cuda_stream
        with torch.cuda.device(self.device):
            for launch, grid, threads, smem in self.launches:
                launch(tensors, grid, threads, smem, stream)
        if tensors["o"] is not o_target:
            o_target.copy_(tensors["o"])


class _KeyLaunch:
    """``CudaKernel.checked_launch``: ``fn(q, k, v, o, lse[, alibi_slopes=...])`` with the checks
    skipped; the first call plans the key's launches, every call runs them on its own tensors."""

    __slots__ = ("kernel", "scalars", "planned")

    def __init__(self, kernel: CudaKernel, scalars: dict):
        self.kernel, self.scalars, self.planned = kernel, scalars, None

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, **per_call) -> None:
        tensors = dict(q=q, k=k, v=v, o=o, lse=lse)
        scalars = {**self.scalars, **per_call}
        if self.kernel.takes_alibi:
            tensors["alibi_slopes"] = scalars["alibi_slopes"]
        if self.planned is None:
            self.planned = self.kernel._plan(tensors, {n_: x for n_, x in scalars.items() if n_ != "alibi_slopes"})
        self.planned.run(tensors)
