"""``attnforge warmup``: build the cached kernels of a list of specs ahead of time.

For deployment: run it once on the serving machine (or one of the same GPU) with the specs the
model will call, and the first ``attention()`` call of each is a cache hit instead of a build.
A spec list is a JSON file holding a list of spec tables (or ``{"specs": [...]}``), a TOML file
with ``[[specs]]`` tables, or one spec file (``attnforge spec validate`` reads the same fields).
Sequence lengths and batch in a spec do not matter for prefill kernels: one kernel serves every
length, except where the tuning database, or the Hopper form's planner (its persistent tiles and O's
store follow the KV length), picks other parameters for another length bucket, and those entries are
built too. For decode they pick the split count, as at run time.
"""

from __future__ import annotations

import json
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import AttnforgeError, SpecError
from .spec import AttentionSpec, load_spec_dict
from .targets import Target


@dataclass
class Built:
    """One spec's outcome: the cache entry's source path, or the error that stopped it."""

    spec: AttentionSpec
    seconds: float
    path: Path | None = None
    error: str | None = None


def read_specs(path: str | Path) -> list[AttentionSpec]:
    """The specs of one file: a list file (JSON list, ``{"specs": [...]}``, TOML ``[[specs]]``)
    or a single spec file. Each spec is validated, and an error names its position in the list."""
    p = Path(path)
    listed = _listed(p)
    if listed is None:
        return [AttentionSpec.from_dict(load_spec_dict(p))]
    specs = []
    for i, item in enumerate(listed):
        try:
            specs.append(AttentionSpec.from_dict(item))
        except SpecError as err:
            raise SpecError(f"specs[{i}].{err.field}", err.value, err.allowed, hint=f"in {p}" + (f"; {err.hint}" if err.hint else "")) from None
    if not specs:
        raise SpecError("specs", str(p), "at least one spec", hint="the list is empty")
    return specs


def _listed(p: Path) -> list[Any] | None:
    """The list of spec tables in ``p``, or None when ``p`` is a single spec file."""
    suffix = p.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise SpecError("file", str(p), "a .json or .toml spec list", hint=f"unknown suffix {p.suffix or '(none)'!r}")
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise SpecError("file", str(p), "a readable .json or .toml file", hint=err.strerror or str(err)) from None
    try:
        data = json.loads(raw) if suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None  # load_spec_dict says what is wrong, with the position
    if isinstance(data, dict) and "specs" in data:
        data = data["specs"]
        if not isinstance(data, list):
            raise SpecError("specs", str(p), "a list of spec tables", hint=f"'specs' holds a {type(data).__name__}")
    return data if isinstance(data, list) else None


def warm(specs: Iterable[AttentionSpec], target: Target, *, backend: str = "auto", verify: bool = True, tma: bool = True,
         progress: Callable[[int, Built], None] | None = None) -> list[Built]:
    """Build (or find) the cache entry of every spec, in order; ``progress(i, built)`` after each.
    A spec that fails is recorded with its error, and the others still build."""
    from .cache import build_or_load

    results = []
    for i, spec in enumerate(specs):
        start = time.perf_counter()
        try:
            path = build_or_load(spec, target, backend=backend, verify=verify, tma=tma)
            for other in _other_lengths(spec, target, backend, tma):
                build_or_load(other, target, backend=backend, verify=verify, tma=tma)
            built = Built(spec, 0.0, path=path)
        except AttnforgeError as err:
            built = Built(spec, 0.0, error=str(err))
        built.seconds = time.perf_counter() - start
        results.append(built)
        if progress is not None:
            progress(i, built)
    return results


def _other_lengths(spec: AttentionSpec, target: Target, backend: str, tma: bool) -> list[AttentionSpec]:
    """A prefill spec at one length per tuning sequence bucket whose cache entry is not ``spec``'s:
    the tuning database (the shipped one included) picks parameters per bucket and the cache key
    holds them, so a prefill kernel serves every length only within the lengths that pick alike.
    Decode and packed small-Sq kernels are built for their own lengths, as at run time."""
    from .cache import entry_key
    from .plan.builtin import packs_gqa
    from .tune.database import SEQ_BUCKETS

    if spec.is_decode or packs_gqa(spec):
        return []
    keys, out = {entry_key(spec, target, backend=backend, tma=tma)}, []
    for length in (*SEQ_BUCKETS, 2 * SEQ_BUCKETS[-1]):
        try:
            other = AttentionSpec(**{**spec.to_dict(), "seqlen_q": length, "seqlen_k": length})
        except SpecError:  # a length this spec's fields do not allow
            continue
        key = entry_key(other, target, backend=backend, tma=tma)
        if key not in keys:
            keys.add(key)
            out.append(other)
    return out
