"""The tuning database: which TL parameters measured fastest, per GPU target, backend, spec
bucket and sequence-length bucket.

Two layers, looked up in order: the user's database (``$ATTNFORGE_TUNING``, else
``tuning.json`` in the kernel cache directory), written by ``attnforge tune``, and the one shipped
in the package (``tune/shipped.json``, measured on the GPUs named in its entries). The planner
offers a found entry's parameters first (``plan.builtin.plans(prefer=...)``); the cache key
includes them, so a new tuning result builds a new kernel instead of reusing the old one.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path


from ..errors import OutputError
from ..spec import AttentionSpec

SHIPPED = Path(__file__).with_name("shipped.json")
VERSION = 1
# Sequence-length buckets (by the longer of Sq and Sk): the best tiles change with the length.
SEQ_BUCKETS = (1024, 4096, 16384)


def seq_bucket(spec: AttentionSpec) -> str:
    """``<=1024``, ``<=4096``, ``<=16384`` or ``>16384`` by the longer of Sq and Sk."""
    longest = max(spec.seqlen_q, spec.seqlen_k)
    for edge in SEQ_BUCKETS:
        if longest <= edge:
            return f"<={edge}"
    return f">{SEQ_BUCKETS[-1]}"


def spec_key(spec: AttentionSpec) -> str:
    """What decides the generated code, without sizes: the cache's spec bucket, lengths left out
    (but for the packed small-Sq kernels, whose Sq decides their tiles)."""
    from ..cache import spec_bucket

    from ..plan.builtin import packs_gqa

    fields = spec_bucket(spec).to_dict()
    # a packed kernel's Sq sets its rows per tile (G x Sq): kept; other lengths are the seq bucket's
    for size in ("batch", "seqlen_k") if packs_gqa(spec) else ("batch", "seqlen_q", "seqlen_k"):
        fields.pop(size, None)
    fields["decode"] = spec.is_decode
    return json.dumps(fields, sort_keys=True, default=str)


@dataclass
class Entry:
    target: str
    backend: str
    spec: str  # spec_key
    seq: str  # seq_bucket
    params: dict[str, int]
    ms: float  # its median time on the bucket's timing shape
    planner_ms: float | None  # the built-in planner's first choice on the same shape, same run
    device: str  # what measured it: a GPU's name, or "cpu (interpreter)"
    shape: str  # the timing shape
    measured: str  # date and versions
    tried: int = 0  # candidates tried
    rejected: list[str] = field(default_factory=list)  # candidates that failed a gate, with why
    kind: str = ""  # the kind of program tuned, "prefill" or "decode" ("" in entries written before it was recorded)


def kind_of(entry: Entry) -> str:
    """The kind of program an entry's parameters were measured on. Entries written before the kind
    was recorded tell it by NSPLIT, which decode parameters carried then (and no longer do: the
    planner offers such an entry to no spec)."""
    return entry.kind or ("decode" if "NSPLIT" in entry.params else "prefill")


def user_path() -> Path:
    if os.environ.get("ATTNFORGE_TUNING"):
        return Path(os.environ["ATTNFORGE_TUNING"])
    from ..cache import cache_dir

    return cache_dir() / "tuning.json"


def read(path: Path) -> list[Entry]:
    """The entries of a database file; a missing file is empty, a damaged one is ignored (tuning
    is advice: the planner's rules still build a verified kernel)."""
    try:
        data = json.loads(path.read_text())
        return [Entry(**e) for e in data["entries"]] if data.get("version") == VERSION else []
    except (OSError, ValueError, KeyError, TypeError):
        return []


# path -> (the file's (mtime, size, inode), its entries by (target, backend, spec, seq)): a lookup reads a file
# once, not at each call (reading the shipped file and building its entries was ~85% of a cache key's ~3 ms on
# the CPU); a rewrite (record's rename: a new inode) or any edit changes the signature and the file is read again
_indexes: dict[Path, tuple[tuple[int, int, int], dict[tuple[str, str, str, str], Entry]]] = {}


def _index(path: Path) -> dict[tuple[str, str, str, str], Entry]:
    try:
        st = path.stat()
    except OSError:
        return {}
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _indexes.get(path)
    if cached is None or cached[0] != signature:
        index: dict[tuple[str, str, str, str], Entry] = {}
        for entry in read(path):
            index.setdefault((entry.target, entry.backend, entry.spec, entry.seq), entry)  # (the first, as a scan finds)
        cached = _indexes[path] = (signature, index)
    return cached[1]


def lookup(spec: AttentionSpec, target: str, backend: str, *, paths: tuple[Path, ...] | None = None) -> Entry | None:
    """The entry for this spec's bucket on ``target`` from ``backend``: the user's first, then the
    shipped one; None when neither has it. (A copy: the caller may change it.)"""
    key = (target, backend, spec_key(spec), seq_bucket(spec))
    for path in paths if paths is not None else (user_path(), SHIPPED):
        entry = _index(Path(path)).get(key)
        if entry is not None:
            return copy.deepcopy(entry)
    return None


def record(entry: Entry, path: Path | None = None) -> Path:
    """Add ``entry`` to the database at ``path`` (the user's by default), replacing an entry for the
    same bucket; written whole to a temporary file and renamed, so a reader never sees half."""
    path = user_path() if path is None else path
    entries = [e for e in read(path) if (e.target, e.backend, e.spec, e.seq) != (entry.target, entry.backend, entry.spec, entry.seq)]
    entries.append(entry)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tuning-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump({"version": VERSION, "entries": [asdict(e) for e in entries]}, f, indent=1)
        os.replace(tmp, path)
    except OSError as err:
        raise OutputError(f"cannot write the tuning database {path}: {err.strerror or err}", where=str(path),
                          hint="set $ATTNFORGE_TUNING to a writable file") from None
    return path


def describe(entry: Entry) -> str:
    """One line for a plan's reasons and a report."""
    # (the planner's first choice when the entry was timed: a later planner may have taken the entry's own parameters first)
    gain = f", {entry.planner_ms / entry.ms:.2f}x the planner's first choice of that run" if entry.planner_ms else ""
    return (f"tuned: fastest of {entry.tried} verified-or-rejected candidates on {entry.device} for lengths {entry.seq} "
            f"({entry.ms:.3f} ms on {entry.shape}{gain}; {entry.measured})")


__all__ = ["Entry", "SHIPPED", "describe", "kind_of", "lookup", "read", "record", "seq_bucket", "spec_key", "user_path"]
