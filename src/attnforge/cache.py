"""On-disk cache of generated, verified kernels, safe under concurrent processes.

An entry is a directory named by a hash of (spec bucket, target, versions) holding what
``attnforge generate`` writes, and a ``manifest.json`` (``attnforge.manifest``: each file's
size and SHA-256) written last. It is built in a private temporary directory next to the
entries and renamed into place in one step, so a reader never sees a half-written entry; when
two processes build the same entry, the first rename wins and the other's copy is discarded.

Every load checks the entry against its manifest. A damaged entry (emptied, truncated, rewritten,
a file missing, no manifest, a file in its place) is never loaded: it is set aside as
``damaged-KEY-...`` (kept for a post-mortem, not deleted), a ``CacheRepairWarning`` says what was
wrong, the entry is rebuilt, and the new entry's report says it replaced a damaged one. A build
killed at any point leaves only a ``.building-*`` directory, which no load reads (and a later
build removes once it is a day old).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from . import __version__, manifest, outdir
from .backends import Backend, choose_backend, choose_backend_and_reason
from .errors import AttnforgeError, OutputError
from .generate import generate, tuned_candidate
from .report import add_section
from .plan.builtin import Candidate, packs_gqa
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

    Runtime values (batch, heads beyond the group size, sequence lengths, the scale, window sizes,
    softcap, the slopes) do not change the generated code; which features are on does. Decode
    kernels, and the packed-GQA kernels of small Sq (speculative decoding), keep their Sq, which
    decides the kernel (its rows per tile are G x Sq); their split count is chosen at every launch
    (``attnforge.splits``), so batch and KV length move within one bucket and one kernel (a
    serving loop's batch changes every few steps)."""
    g = spec.group_size
    common = dict(scale=None, window_left=None if spec.window_left is None else 1,
                  window_right=None if spec.window_right is None else (0 if spec.causal else 1),
                  alibi_slopes=None if spec.alibi_slopes is None else "auto", softcap=None if spec.softcap is None else 1.0)
    seqlen_q = spec.seqlen_q if spec.is_decode or packs_gqa(spec) else 1024
    # a top-left causal mask with a window must be square (AttentionSpec's rule); any other KV length serves
    square = spec.causal and spec.causal_align == "top_left" and spec.windowed
    return AttentionSpec(batch=1, heads=g, kv_heads=1, seqlen_q=seqlen_q, seqlen_k=seqlen_q if square else 1024, head_dim=spec.head_dim,
                         head_dim_v=spec.head_dim_v, dtype=spec.dtype, causal=spec.causal, causal_align=spec.causal_align,
                         score_mod=spec.score_mod, mask_mod=spec.mask_mod, allow_tf32=spec.allow_tf32, **common)


def entry_key(spec: AttentionSpec, target: Target, *, backend: str | Backend = "auto", tma: bool = True,
              first: Candidate | None | bool = True) -> str:
    """The entry's name: a hash of what decides the kernel. ``first``: ``_first_choice``'s answer when the caller has it
    (True: ask here), so that the key and the build follow one answer."""
    import torch

    backend = _resolve(backend, spec, target)
    bucket = spec_bucket(spec).to_dict()
    tuned = _first_choice(spec, target, backend) if first is True else first  # a new tuning result (or length rule) is a new kernel
    blob = json.dumps({"spec": bucket, "target": target.name, "backend": backend.name, "tma": tma, "attnforge": __version__,
                       **backend.versions(), "torch": torch.__version__, "tuned": tuned and tuned.params}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _first_choice(spec: AttentionSpec, target: Target, backend: Backend) -> Candidate | None:
    """The parameters to offer first for the bucket's program: the tuning database's for the call's
    lengths; else, for a backend of the Hopper form, whose first choice follows the KV length (persistent
    tiles, O's store: ``plan/hopper``), the planner's choice for the call's lengths; for that form, None
    where either is the stand-in's own first choice (one entry, not two, for the same kernel); else None
    (the planner's own order)."""
    tuned = tuned_candidate(spec, target, backend.name)
    if spec.is_decode or packs_gqa(spec):  # split-KV kernels: no length rule; one kernel serves every batch and length
        return None if tuned is None or tuned.params == _split_kv_first(spec_bucket(spec), target, backend) else tuned
    if backend.tl_form != "hopper":
        return tuned
    from .plan.hopper import hopper_candidates

    stand_in = hopper_candidates(spec_bucket(spec), target)[0].params
    if tuned is not None:
        return None if tuned.params == stand_in else tuned
    own = hopper_candidates(spec, target)[0]
    if own.params == stand_in:
        return None
    return Candidate(own.params, f"{own.reason} (the planner's first choice at Sq={spec.seqlen_q}, Sk={spec.seqlen_k})", own.kind)


def _split_kv_first(spec: AttentionSpec, target: Target, backend: Backend) -> dict:
    """The planner's first choice of parameters for a split-KV program (decode, packed small Sq) in ``backend``'s form."""
    if backend.tl_form == "hopper":
        from .plan.hopper import hopper_decode_candidates

        return hopper_decode_candidates(spec, target)[0].params
    from .plan.builtin import candidates

    return candidates(spec, target, refused=backend.refused_strategies(target), mma=backend.mma)[1][0].params


def _resolve(backend: str | Backend, spec: AttentionSpec, target: Target) -> Backend:
    return backend if isinstance(backend, Backend) else choose_backend(backend, spec, target)


class CacheRepairWarning(UserWarning):
    """A damaged cache entry was found, set aside and rebuilt (the message says what and where)."""


def _say(text: str) -> None:
    """One line on stderr: a first call that builds a kernel takes long enough to deserve it."""
    print(text, file=sys.stderr, flush=True)


def _publish(built: Path, entry: Path, module: Path) -> None:
    """Move a finished build into place in one step: the entry appears complete or not at all.
    When another builder got there first, its entry stands and this build is discarded."""
    try:
        os.rename(built, entry)
    except OSError:
        if manifest.damage(entry, (module.name,)) is not None:  # not a lost race: a real error
            raise


def _set_aside(entry: Path, why: str) -> Path | None:
    """Rename a damaged entry to ``damaged-KEY-TIME-PID-RANDOM`` beside it (kept, not deleted) and
    warn; None when another process moved it first."""
    aside = entry.with_name(f"damaged-{entry.name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{os.urandom(3).hex()}")
    try:
        os.rename(entry, aside)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise OutputError(f"the cache entry {entry} is damaged ({why}) and cannot be set aside: {err.strerror or err}", where=str(entry),
                          hint="delete it by hand; attnforge rebuilds it on the next call") from None
    warnings.warn(f"attnforge: the kernel cache entry {entry} is damaged ({why}); it was set aside as {aside} and is being rebuilt",
                  CacheRepairWarning, stacklevel=3)
    return aside


def build_or_load(spec: AttentionSpec, target: Target, *, backend: str | Backend = "auto", root: Path | None = None,
                  verify: bool = True, tma: bool = True) -> Path:
    """The source path of the cached kernel for ``spec`` on ``target`` from ``backend``,
    generating it if absent (``tma=False``: pointer loads, for strides TMA cannot take). An
    entry that does not match its manifest is set aside, reported and rebuilt."""
    reason = None
    if not isinstance(backend, Backend):
        backend, reason = choose_backend_and_reason(backend, spec, target)  # the report says which backend and why
    root = cache_dir() if root is None else Path(root)
    first = _first_choice(spec, target, backend)
    entry = root / entry_key(spec, target, backend=backend, tma=tma, first=first)
    module = entry / backend.source_file
    why = manifest.damage(entry, (backend.source_file,))
    if why is None:
        return module
    repaired = None
    if os.path.lexists(entry):
        with outdir.locked(root):  # one process sets a damaged entry aside; the others then see its rebuild or nothing
            why = manifest.damage(entry, (backend.source_file,))
            if why is None:
                return module
            if os.path.lexists(entry):
                aside = _set_aside(entry, why)
                repaired = {"reason": why, "damaged_copy": None if aside is None else str(aside)}
    _build(spec, target, backend, root, entry, first, verify=verify, tma=tma, repaired=repaired, reason=reason)
    return module


def _build(spec: AttentionSpec, target: Target, backend: Backend, root: Path, entry: Path, first: Candidate | None, *, verify: bool, tma: bool,
           repaired: dict | None, reason: str | None = None) -> None:
    """Generate the entry in a private directory, write its manifest last, and rename it into place."""
    module = entry / backend.source_file
    try:
        root.mkdir(parents=True, exist_ok=True)
        outdir.sweep(root, (".building-", "..building-"))  # what builds killed a day ago left
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    except OSError as err:
        raise OutputError(f"cannot create the kernel cache in {root}: {err.strerror or err}", where=str(root),
                          hint="set $ATTNFORGE_CACHE to a writable directory") from None
    what = "generating, compiling and verifying" if verify else "generating and compiling"
    _say(f"attnforge: {what} a kernel for {spec.describe()} on {target.name} (once per kind of operator: seconds on a GPU, "
         f"tens of seconds in the CPU interpreter); report: {entry / 'report.md'}")
    start = time.perf_counter()
    try:
        # the tuning database and the planner's length rules are asked with the call's own lengths: the bucket's are a stand-in
        result = generate(spec_bucket(spec), target, tmp, backend=backend, backend_reason=reason, run_verification=verify, tma=tma,
                          tuned=first or False)
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
        lines = [f"Cache entry `{entry.name}`; `{manifest.NAME}` beside this report holds the size and SHA-256 of every file."]
        if repaired is not None:
            lines.append(f"Rebuilt: the earlier entry was damaged ({repaired['reason']})"
                         + (f"; it was set aside as `{repaired['damaged_copy']}`." if repaired["damaged_copy"] else "."))
        add_section(tmp, "cache", "Cache", {"entry": entry.name, "manifest": manifest.NAME, "rebuilt": repaired}, lines)
        manifest.write(tmp, entry.name)  # last: an entry without it is incomplete
        _publish(tmp, entry, module)
    except OSError as err:
        raise OutputError(f"cannot write the kernel cache entry {entry}: {err.strerror or err}", where=str(root),
                          hint="free space on that file system, or set $ATTNFORGE_CACHE to another directory") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _say(f"attnforge: kernel ready after {time.perf_counter() - start:.1f} s" + (" (rebuilt)" if repaired else "") + f"; report: {entry / 'report.md'}")
