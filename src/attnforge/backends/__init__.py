"""The registry of stage-2 backends (see ``base.Backend``); ``auto`` picks the first that can
build a spec for a target: the tuning database's fastest where it timed several on sm_80+, else
the target's order. Backends are imported on first use, so listing them stays cheap."""

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
_REGISTRY = {"triton": "attnforge.backends.triton:TritonBackend", "cuda": "attnforge.backends.cuda:CudaBackend",
             "gluon": "attnforge.backends.gluon:GluonBackend"}
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
    return choose_backend_and_reason(name, spec, target)[0]


def choose_backend_and_reason(name: str, spec: AttentionSpec, target: Target) -> tuple[Backend, str]:
    """``choose_backend``'s backend and, in one line for the reports, why: asked for by name, or
    ``auto``'s order for ``target`` (``auto_reason``) and the backends it passed over, with their reasons."""
    candidates, timed = _auto_order(target), None
    if name == "auto":
        candidates, timed = _tuned_order(spec, target, candidates)
    else:
        candidates = (name,)
    reasons = []
    for candidate in candidates:
        backend = get_backend(candidate)
        why = backend.unsupported(spec, target)
        if why is None:
            if name != "auto":
                return backend, f"{candidate}: asked for by name"
            passed = "".join(f"; passed over {r}" for r in reasons)
            return backend, f"{candidate}: chosen by auto: {timed or auto_reason(target)}{passed}"
        reasons.append(f"{candidate}: {why}")
    raise AttnforgeError(f"no backend builds {spec.describe()} for {target.name}: " + "; ".join(reasons), where="backend",
                         hint="see 'attnforge backends' for what each backend supports")


def auto_reason(target: Target) -> str:
    """Why ``auto`` tries the backends in the order it does for ``target``."""
    if _auto_order(target)[0] == "cuda":
        return (f"{target.name} ({target.sm}): Triton emits no tensor-core instructions before sm_80; the CUDA backend's "
                "mma.sync m16n8k8 kernels use them, and a local GPU can verify them")
    if target.cc < (8, 0) and "cuda" in _REGISTRY:
        return (f"Triton first on {target.name} ({target.sm}) without a local GPU: the CUDA backend's tensor-core kernels have no "
                "CPU interpreter to be verified in (Triton's emit no tensor-core instructions before sm_80; --backend cuda "
                "builds them, verified only on a GPU)")
    return "Triton first (verifiable in its CPU interpreter; the faster of the two on every sm_80+ row measured, bench/results/2026-11-30-h200-cuda)"


def _tuned_order(spec: AttentionSpec, target: Target, order: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """On sm_80+ targets, where every backend's kernels use the tensor cores: the backends the
    tuning database timed for ``spec``'s bucket on ``target`` on one shape, fastest first, then
    the others in ``order``; with the reason. ``order`` and None when fewer than two were timed
    alike (on one shape and one GPU)."""
    if target.cc < (8, 0):
        return order, None
    from ..tune import database

    entries = {name: e for name in order if (e := database.lookup(spec, target.name, name)) is not None}
    if len(entries) < 2 or len({(e.shape, e.device) for e in entries.values()}) != 1 or next(iter(entries.values())).device.startswith("cpu"):
        return order, None  # times on other shapes or devices do not compare, nor interpreter times
    fastest = tuple(sorted(entries, key=lambda name: entries[name].ms))
    times = ", ".join(f"{name} {entries[name].ms:.3f} ms" for name in fastest)
    # timed head to head (attnforge tune --backend a,b): each entry names the others it was timed beside
    side_by_side = all(f"head to head with {other} " in entries[name].measured for name in entries for other in entries if other != name)
    how = "timed head to head" if side_by_side else "times from separate runs"
    return fastest + tuple(n for n in order if n not in entries), (
        f"the tuning database's fastest for this bucket on {target.name} ({times} on {next(iter(entries.values())).shape}; {how})")


def _auto_order(target: Target) -> tuple[str, ...]:
    """cuda first on sm_75 when a CUDA GPU is here to verify its kernels natively (it has no CPU
    interpreter); Triton first everywhere else."""
    if target.cc < (8, 0) and "cuda" in _REGISTRY:
        import torch

        if torch.cuda.is_available():
            return ("cuda",) + tuple(n for n in names() if n != "cuda")
    return names()


def backend_for_directory(directory: Path) -> Backend:
    """The backend whose source file a kernel directory (from ``attnforge generate``) holds."""
    for candidate in names():
        backend = get_backend(candidate)
        if (directory / backend.source_file).is_file():
            return backend
    raise AttnforgeError(f"no generated kernel in {directory}", where=str(directory),
                         hint="run 'attnforge generate --out DIR' first; DIR then holds " + " or ".join(get_backend(b).source_file for b in names()))


__all__ = ["Backend", "Capabilities", "Kernel", "Translation", "names", "get_backend", "choose_backend", "choose_backend_and_reason", "auto_reason", "backend_for_directory"]
