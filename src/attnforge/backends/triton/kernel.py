"""A generated Triton module on disk, loaded and callable on torch tensors.

On a machine with a CUDA GPU the module's kernels are compiled by Triton's JIT as usual; without
one (or with ``interpret=True``) the module is imported with Triton's interpreter on, with
attnforge's fixes for its bf16 arithmetic, and runs on CPU tensors.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import sys
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from ...errors import AttnforgeError, LaunchError
from .interpreter import KNOB_LOCK, interpreting


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
        sys.modules[name] = module
        return module

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, **scalars) -> None:
        """Run into caller-provided outputs (o: B,Hq,Sq,Dv in the output dtype; lse: B,Hq,Sq fp32)."""
        takes = self.accepts - {"q", "k", "v", "o", "lse"}
        unknown = sorted(set(scalars) - takes)
        if unknown:
            raise LaunchError(f"this kernel takes no {', '.join(unknown)}", where="kernel call",
                                 hint=f"it takes {', '.join(sorted(takes))} (a feature the kernel was not generated for cannot be switched on at call time)")
        kwargs = dict(scalars)
        missing = sorted(takes - set(kwargs))
        if missing:
            raise LaunchError(f"this kernel needs {', '.join(missing)}", where="kernel call", hint="pass them as keyword arguments")
        if self.interpret:
            # numpy warns on the inf/nan the kernel computes on purpose (masked scores, empty rows),
            # and Triton's interpreter on its own use of numpy (__index__ of 1-element arrays).
            with interpreting(), np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                self.module.launch(q, k, v, o, lse, **kwargs)
        else:
            self.module.launch(q, k, v, o, lse, **kwargs)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None, **scalars) -> tuple[torch.Tensor, torch.Tensor]:
        """O (B, Hq, Sq, Dv) and the log-sum-exp (B, Hq, Sq, fp32) for BHSD-indexed q, k, v."""
        B, Hq, Sq, _ = q.shape
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        o = torch.empty((B, Hq, Sq, v.shape[-1]), dtype=self.dtypes.get("o", q.dtype), device=q.device)
        lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device)
        self.launch(q, k, v, o, lse, scale=scale, **scalars)
        return o, lse
