"""A generated Triton module on disk, loaded and callable on torch tensors.

On a machine with a CUDA GPU the module's kernels are compiled by Triton's JIT as usual; without
one (or with ``interpret=True``) the module is imported with Triton's interpreter on, with
attnforge's fixes for its bf16 arithmetic, and runs on CPU tensors.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import math
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional

import numpy as np
import torch

from ...abi import ARG_SHAPES, check_scalars, new_outputs
from ...errors import AttnforgeError, CompileError, LaunchError
from .interpreter import KNOB_LOCK, interpreting
from .runtime import check_arguments


# Keyword options of a generated ``launch`` that are not kernel arguments (see launcher.py).
LAUNCH_OPTIONS = frozenset({"checked", "slots"})


def gpu_available() -> bool:
    return torch.cuda.is_available()


class GeneratedKernel:
    """``kernel(q, k, v, scale=..., ...) -> (o, lse)`` for a generated module (BHSD-indexed tensors)."""

    def __init__(self, path: str | Path, *, interpret: bool | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise AttnforgeError(f"no generated module at {self.path}", where=str(self.path), hint="run 'attnforge generate --out DIR' first; the module is DIR/kernel_triton.py")
        self.interpret = (not gpu_available()) if interpret is None else interpret
        self.module = self._load()
        self.head_dim = self.module.HEAD_DIM
        self.head_dim_v = self.module.HEAD_DIM_V
        self.dtypes: dict[str, torch.dtype] = self.module.TENSOR_DTYPES
        self.accepts = set(inspect.signature(self.module.launch).parameters)

    @property
    def device(self) -> str:
        return "cpu" if self.interpret else "cuda"

    def _load(self) -> ModuleType:
        # A unique module name per file content: two generated kernels never share a module object.
        digest = hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]
        name = f"attnforge_generated_{digest}_{'interp' if self.interpret else 'jit'}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, self.path)
        if spec is None or spec.loader is None:
            raise AttnforgeError(f"cannot import {self.path}", where=str(self.path))
        module = importlib.util.module_from_spec(spec)
        try:
            if self.interpret:
                with interpreting():
                    spec.loader.exec_module(module)
            else:
                with KNOB_LOCK:  # not while another thread has the interpreter switched on
                    spec.loader.exec_module(module)
        except SyntaxError as err:
            raise AttnforgeError(f"generated module does not parse: {err}", where=f"{self.path}:{err.lineno}", hint="regenerate it; report a translator bug if it persists") from err
        except Exception as err:  # the module's own top-level code failed: its text, not attnforge, is at fault
            raise CompileError(f"the kernel module fails to import: {type(err).__name__}: {err}"[:500], where=str(self.path),
                               hint="regenerate it; if it was edited by hand, undo the edit") from err
        sys.modules[name] = module
        return module

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, **scalars) -> None:
        """Run into caller-provided outputs (o: B,Hq,Sq,Dv in the output dtype; lse: B,Hq,Sq fp32)."""
        takes = self.accepts - {"q", "k", "v", "o", "lse"} - LAUNCH_OPTIONS
        slots = scalars.pop("slots", None)
        unknown = sorted(set(scalars) - takes)
        if unknown:
            raise LaunchError(f"this kernel takes no {', '.join(unknown)}", where="kernel call",
                                 hint=f"it takes {', '.join(sorted(takes))} (a feature the kernel was not generated for cannot be switched on at call time)")
        kwargs = dict(scalars)
        missing = sorted(takes - set(kwargs))
        if missing:
            raise LaunchError(f"this kernel needs {', '.join(missing)}", where="kernel call", hint="pass them as keyword arguments")
        tensors = dict(q=q, k=k, v=v, o=o, lse=lse, **{n: t for n, t in kwargs.items() if n in ARG_SHAPES})
        self._check_tensors(tensors)
        check_scalars({n: x for n, x in kwargs.items() if n not in ARG_SHAPES})
        # The module's launcher checks again; this check comes first so that it never unpacks a bad shape.
        check_arguments({n: t for n, t in tensors.items() if n in self.dtypes}, self.head_dim, self.head_dim_v, self.dtypes)
        if self.interpret:
            # numpy warns on the inf/nan the kernel computes on purpose (masked scores, empty rows),
            # and Triton's interpreter on its own use of numpy (__index__ of 1-element arrays).
            with interpreting(), np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                self.module.launch(q, k, v, o, lse, **kwargs)
        elif slots is not None:
            self.module.launch(q, k, v, o, lse, **kwargs, slots=slots)
        else:
            self.module.launch(q, k, v, o, lse, **kwargs)

    def launch_keyed(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, *,
                     slots: list, **scalars) -> None:
        """``launch`` for the first call of one key of ``attention()``'s dispatch cache (shapes,
        strides, dtypes, devices, alignment, scalars), recording its compiled kernels in that
        key's ``slots`` (``launching.launch_kernel``)."""
        if self.interpret or not LAUNCH_OPTIONS <= self.accepts:
            self.launch(q, k, v, o, lse, **scalars)
        else:
            self.launch(q, k, v, o, lse, **scalars, slots=slots)

    def checked_launch(self, slots: list, **scalars) -> Optional[Callable[..., None]]:
        """For the later calls of a key whose first launch passed every check: the module's
        launch with the checks skipped, bound to the key's ``slots`` and scalars, called as
        ``fn(q, k, v, o, lse[, alibi_slopes=...])``, which records the launches of its first call and
        replays them after (``replay.KeyLaunch``). None for modules without these options
        (written by a model, or by an older attnforge) and in the interpreter: they keep
        ``launch`` and its checks."""
        if self.interpret or not LAUNCH_OPTIONS <= self.accepts:
            return None
        from .replay import KeyLaunch

        return KeyLaunch(functools.partial(self.module.launch, checked=True, slots=slots, **scalars), scalars.get("alibi_slopes"))

    def _check_tensors(self, tensors: dict[str, object]) -> None:
        """Each argument a torch tensor with the ABI's number of dims, on this kernel's device:
        what the launcher assumes before its own checks (``runtime.check_arguments``) run."""
        where = "cpu (Triton's interpreter)" if self.interpret else "a CUDA GPU"
        for name, t in tensors.items():
            dims = ARG_SHAPES[name]
            shape = f"({', '.join(dims)})"
            if not isinstance(t, torch.Tensor):
                raise LaunchError(f"{name} is a {type(t).__name__}, not a torch.Tensor; this kernel takes {name} of shape {shape}", where=name,
                                  hint="pass torch tensors")
            if t.dim() != len(dims):
                hint = ("BHSD-indexed: (batch, heads, seq, head_dim); add a batch dim with .unsqueeze(0), "
                        "or pass (B, S, H, D) tensors as t.transpose(1, 2)") if len(dims) == 4 else f"shape {shape}"
                raise LaunchError(f"{name} has shape {tuple(t.shape)} ({t.dim()}-d); this kernel takes {name} of shape {shape}", where=name, hint=hint)
            if t.device.type != self.device:
                raise LaunchError(f"{name} is on {t.device}; this kernel runs on {where}", where=name,
                                  hint=f"move the tensors with .to('{self.device}')" + ("" if self.interpret else ", or load the kernel with interpret=True for CPU tensors"))

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None, **scalars) -> tuple[torch.Tensor, torch.Tensor]:
        """O (B, Hq, Sq, Dv) and the log-sum-exp (B, Hq, Sq, fp32) for BHSD-indexed q, k, v."""
        self._check_tensors(dict(q=q, k=k, v=v))
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        o, lse = new_outputs(q, v, self.dtypes.get("o", q.dtype))
        self.launch(q, k, v, o, lse, scale=scale, **scalars)
        return o, lse


