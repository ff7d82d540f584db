"""A directory's manifest: the SHA-256 and size of each of its files, written last.

The kernel cache writes ``manifest.json`` into an entry after everything else, just before the
entry is renamed into place, and checks it whenever the entry is loaded: an entry whose manifest
is missing, unreadable, or disagrees with a file (missing, truncated, rewritten) is damaged.
Checking is cheap: a file's SHA-256 is computed once per process for each (size, mtime, inode)
it has; later checks of an unchanged entry only stat its files.

Format (``FORMAT`` names it)::

    {"format": "attnforge-manifest/1", "key": "<cache entry name>",
     "files": {"kernel_triton.py": {"bytes": 10454, "sha256": "<64 hex digits>"}, ...}}

Paths are relative to the directory, with ``/`` separators; ``__pycache__`` is left out (Python
may write it there when the module is imported), as is the manifest itself.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath

NAME = "manifest.json"
FORMAT = "attnforge-manifest/1"
SKIPPED = ("__pycache__",)

_verified: set[tuple] = set()  # (directory, file stats) already hashed and found sound in this process


def _files(directory: Path) -> list[str]:
    out = []
    for p in directory.rglob("*"):
        rel = p.relative_to(directory)
        if p.is_file() and rel.as_posix() != NAME and not any(part in SKIPPED for part in rel.parts):
            out.append(rel.as_posix())
    return sorted(out)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write(directory: Path, key: str) -> dict:
    """Hash every file of ``directory`` and write its manifest (atomically: a temporary file
    renamed); call it after the last other file is written. Returns the manifest."""
    data = {"format": FORMAT, "key": key,
            "files": {rel: {"bytes": (directory / rel).stat().st_size, "sha256": _sha256(directory / rel)} for rel in _files(directory)}}
    tmp = directory / (NAME + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, directory / NAME)
    return data


def damage(directory: Path, required: tuple[str, ...] = ()) -> str | None:
    """Why ``directory`` does not match its manifest (a short phrase), or None when it does and
    lists every file in ``required``."""
    if directory.is_symlink() or not directory.is_dir():
        return "it is not a directory" if os.path.lexists(directory) else "it does not exist"
    path = directory / NAME
    try:
        stat = path.stat()
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return f"it has no {NAME} (an interrupted build, or one from before manifests)"
    except (OSError, ValueError) as err:
        return f"its {NAME} is unreadable ({type(err).__name__})"
    files = data.get("files") if isinstance(data, dict) and data.get("format") == FORMAT else None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        return f"its {NAME} is not an {FORMAT} manifest"
    for name in required:
        if name not in files:
            return f"its {NAME} does not list {name}"
    stats = []
    for rel, want in sorted(files.items()):
        parts = PurePosixPath(rel).parts
        if not rel or PurePosixPath(rel).is_absolute() or ".." in parts:
            return f"its {NAME} names a file outside it ({rel!r})"
        try:
            st = (directory / rel).stat()
        except OSError:
            return f"{rel} is missing"
        if not (directory / rel).is_file():
            return f"{rel} is not a file"
        if st.st_size != want.get("bytes"):
            return f"{rel} has {st.st_size} bytes, its manifest says {want.get('bytes')}"
        stats.append((rel, st.st_size, st.st_mtime_ns, st.st_ino))
    seen = (str(directory), stat.st_mtime_ns, stat.st_ino, tuple(stats))
    if seen in _verified:
        return None
    for rel, want in files.items():
        try:
            if _sha256(directory / rel) != want.get("sha256"):
                return f"{rel} does not match its SHA-256 in {NAME}"
        except OSError:
            return f"{rel} cannot be read"
    _verified.add(seen)
    return None
