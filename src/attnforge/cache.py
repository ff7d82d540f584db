"""On-disk cache of generated, verified kernels, safe under concurrent processes.

An entry is a directory named by a hash of (spec bucket, target, versions) holding what
``attnforge generate`` writes. It is built in a private temporary directory next to the entries
and renamed into place in one step, so a reader never sees a half-written entry; when two
processes build the same entry, the first rename wins and the other's copy is discarded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from . import __version__
from .backends import Backend, choose_backend
from .errors import AttnforgeError
from .generate import generate
from .sizes import next_pow2
from .spec import AttentionSpec
from .targets import Target


def cache_dir() -> Path:
    """``$ATTNFORGE_CACHE``, else ``$XDG_CACHE_HOME/attnforge``, else ``~/.cache/attnforge``."""
    if os.environ.get("ATTNFORGE_CACHE"):
        return Path(os.environ["ATTNFORGE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnforge"


def spec_bucket(spec: AttentionSpec) -> AttentionSpec:
    """The representative of every spec that gets the same kernel.

    Runtime values (batch, sequence lengths, the scale, window sizes, softcap, the slopes) do not
    change the generated code; which features are on does. Decode kernels choose their number of
    splits from batch x heads and the KV length, so those are kept, rounded up to powers of two."""
    g = spec.group_size
    common = dict(scale=None, window_left=None if spec.window_left is None else 1,
                  window_right=None if spec.window_right is None else (0 if spec.causal else 1),
                  alibi_slopes=None if spec.alibi_slopes is None else "auto", softcap=None if spec.softcap is None else 1.0)
    if spec.is_decode:
        kv = spec.kv_heads or 1
        return AttentionSpec(batch=next_pow2(spec.batch), heads=g * kv, kv_heads=kv, seqlen_q=1,
                             seqlen_k=next_pow2(spec.seqlen_k), head_dim=spec.head_dim, head_dim_v=spec.head_dim_v,
                             dtype=spec.dtype, causal=spec.causal, causal_align=spec.causal_align,
                             score_mod=spec.score_mod, mask_mod=spec.mask_mod, allow_tf32=spec.allow_tf32, **common)
    return AttentionSpec(batch=1, heads=g, kv_heads=1, seqlen_q=1024, seqlen_k=1024, head_dim=spec.head_dim,
                         head_dim_v=spec.head_dim_v, dtype=spec.dtype, causal=spec.causal, causal_align=spec.causal_align,
                         score_mod=spec.score_mod, mask_mod=spec.mask_mod, allow_tf32=spec.allow_tf32, **common)


def entry_key(spec: AttentionSpec, target: Target, *, backend: str | Backend = "auto", tma: bool = True) -> str:
    import torch

    backend = _resolve(backend, spec, target)
    bucket = spec_bucket(spec).to_dict()
    blob = json.dumps({"spec": bucket, "target": target.name, "backend": backend.name, "tma": tma, "attnforge": __version__,
                       **backend.versions(), "torch": torch.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _resolve(backend: str | Backend, spec: AttentionSpec, target: Target) -> Backend:
    return backend if isinstance(backend, Backend) else choose_backend(backend, spec, target)


def build_or_load(spec: AttentionSpec, target: Target, *, backend: str | Backend = "auto", root: Path | None = None,
                  verify: bool = True, tma: bool = True) -> Path:
    """The source path of the cached kernel for ``spec`` on ``target`` from ``backend``,
    generating it if absent (``tma=False``: pointer loads, for strides TMA cannot take)."""
    backend = _resolve(backend, spec, target)
    root = cache_dir() if root is None else Path(root)
    entry = root / entry_key(spec, target, backend=backend, tma=tma)
    module = entry / backend.source_file
    if module.is_file():
        return module
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        result = generate(spec_bucket(spec), target, tmp, backend=backend, run_verification=verify, tma=tma)
        if not result.ok:
            kept = root / f"failed-{entry.name}"
            shutil.rmtree(kept, ignore_errors=True)
            try:
                os.rename(tmp, kept)
            except OSError:  # another process is keeping its own failed build there
                kept = tmp
                tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))  # so the finally clause spares the report
            raise AttnforgeError(f"building the kernel for {spec.describe()} on {target.name} failed at step {result.failed_step}: {result.error}",
                                 where=str(kept / "report.md"), hint="the report in that directory has every step's output")
        try:
            os.rename(tmp, entry)  # atomic: the entry appears complete or not at all
        except OSError:
            if not module.is_file():  # not a lost race: a real error
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return module
