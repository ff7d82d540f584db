"""The kernels a loaded Triton module can launch: its module-level ``@triton.jit`` functions
(and ``autotune``/``heuristics`` wrappers of them), each with the innermost launcher whose
``run`` every launch goes through (``kernel[grid](...)`` calls ``run``), in the interpreter and
natively alike. ``llm.kernel_jobs`` wraps those ``run`` methods to count a model-written module's
launches and to switch its kernels off."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable


def module_kernels(module: ModuleType) -> dict[str, tuple[Any, Callable[..., Any]]]:
    """name -> (the innermost launcher, its Python function) for every module-level kernel;
    a second name for a kernel already listed (an alias) is left out."""
    from triton.runtime.jit import KernelInterface

    found: dict[str, tuple[Any, Callable[..., Any]]] = {}
    seen: set[int] = set()
    for name, obj in list(vars(module).items()):
        if not isinstance(obj, KernelInterface):
            continue
        inner = obj
        while isinstance(getattr(inner, "fn", None), KernelInterface):
            inner = inner.fn
        python_fn = getattr(inner, "fn", None)
        if python_fn is None or id(inner) in seen:
            continue
        seen.add(id(inner))
        found[name] = (inner, python_fn)
    return found
