"""The registry of stage-2 backends (see ``base.Backend``); ``auto`` picks the first that can
build a spec for a target. Backends are imported on first use, so listing them stays cheap."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AttnforgeError
from .base import Backend, Capabilities, Kernel, Translation

if TYPE_CHECKING:
    from ..spec import AttentionSpec
    from ..targets import Target

# name -> "module:class", in the order ``auto`` tries them.
_REGISTRY = {"triton": "attnforge.backends.triton:TritonBackend"}
_instances: dict[str, Backend] = {}


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (see ``names()``)."""
    if name not in _REGISTRY:
        raise AttnforgeError(f"unknown backend {name!r}", where="backend", hint="backends: auto, " + ", ".join(_REGISTRY))
    if name not in _instances:
        module, cls = _REGISTRY[name].split(":")
        _instances[name] = getattr(importlib.import_module(module), cls)()
    return _instances[name]


def choose_backend(name: str, spec: AttentionSpec, target: Target) -> Backend:
    """``name``'s backend, or for ``auto`` the first that can build ``spec`` for ``target``;
    a backend that cannot is refused with its reason."""
    candidates = names() if name == "auto" else (name,)
    reasons = []
    for candidate in candidates:
        backend = get_backend(candidate)
        why = backend.unsupported(spec, target)
        if why is None:
            return backend
        reasons.append(f"{candidate}: {why}")
    raise AttnforgeError(f"no backend builds {spec.describe()} for {target.name}: " + "; ".join(reasons), where="backend",
                         hint="see 'attnforge backends' for what each backend supports")


def backend_for_directory(directory: Path) -> Backend:
    """The backend whose source file a kernel directory (from ``attnforge generate``) holds."""
    for candidate in names():
        backend = get_backend(candidate)
        if (directory / backend.source_file).is_file():
            return backend
    raise AttnforgeError(f"no generated kernel in {directory}", where=str(directory),
                         hint="run 'attnforge generate --out DIR' first; DIR then holds " + " or ".join(get_backend(b).source_file for b in names()))


__all__ = ["Backend", "Capabilities", "Kernel", "Translation", "names", "get_backend", "choose_backend", "backend_for_directory"]
