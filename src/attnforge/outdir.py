"""Where ``attnforge generate`` writes: a kernel directory that appears whole or not at all.

A run writes into a private temporary directory beside ``--out`` (``.NAME.attnforge-XXXX``) and,
when it ends, moves it into place in one step (a rename; over an earlier output, an exchange of
the two directories where Linux allows, else two renames). An earlier attnforge output directory
(one that holds ``report.json``) or an empty directory is replaced whole; anything else (a file,
a directory of other files) is refused before any work starts. The swap is serialised between processes by
a lock on the parent directory, so two runs into one ``--out`` leave one run's directory, never a
mix of both: the report in it always describes the files beside it. A run killed before the
swap leaves only its hidden temporary directory, which a later run beside it removes once it is
a day old.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from .errors import AttnforgeError, OutputError

MARKER = "report.json"  # what makes a directory attnforge output (generate writes it in every run)
STALE_SECONDS = 24 * 3600  # a temporary directory this old belongs to a run that was killed


def _prefix(out: Path) -> str:
    return f".{out.name}.attnforge-"


def _oserror(err: OSError) -> str:
    return f"{err.strerror or err}" + (f": {err.filename}" if err.filename else "")


def _replaceable(out: Path) -> str | None:
    """Why ``out`` cannot become a kernel directory, or None when it can (absent, empty, or an
    earlier attnforge output directory)."""
    if not os.path.lexists(out):
        return None
    if out.is_symlink() or not out.is_dir():
        return "exists and is not a directory"
    if (out / MARKER).is_file():
        return None
    try:
        if next(out.iterdir(), None) is None:
            return None
    except OSError as err:
        return f"cannot be read ({_oserror(err)})"
    return f"is a directory of other files (no {MARKER}: not attnforge output); attnforge replaces only its own output"


def destination(out: str | Path) -> Path:
    """``out`` checked before any work: a path generate may write its kernel directory to,
    resolved (a symbolic link to a directory is followed), its parent created. Raises
    ``AttnforgeError`` (bad input) naming ``--out`` otherwise."""
    given = Path(out)
    if str(out) in ("", "."):
        raise AttnforgeError(f"{str(out)!r} is not a directory name", where="--out", hint="give a new directory, e.g. --out out/")
    try:
        path = given.resolve()
    except (OSError, RuntimeError) as err:  # a symlink loop
        raise AttnforgeError(f"{given} cannot be resolved: {err}", where="--out", hint="give a plain directory path") from None
    if path.parent == path:
        raise AttnforgeError(f"{given} is a file system root", where="--out", hint="give a new directory, e.g. --out out/")
    why = _replaceable(path)
    if why is not None:
        raise AttnforgeError(f"{given} {why}", where="--out",
                             hint="give a new or empty directory, or one an earlier 'attnforge generate' wrote")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.parent.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(path.parent))
    except OSError as err:
        raise AttnforgeError(f"{given}: cannot create its parent directory ({_oserror(err)})", where="--out",
                             hint="give a path in a writable directory") from None
    try:  # a directory can be made there (/proc is "writable" to root, yet refuses): found now, not after the work
        os.rmdir(tempfile.mkdtemp(prefix=_prefix(path), dir=path.parent))
    except OSError as err:
        raise AttnforgeError(f"{given}: cannot create a directory in {path.parent} ({err.strerror or err})", where="--out",
                             hint="give a path in a writable directory") from None
    return path


def start(out: Path) -> Path:
    """A new private directory beside ``out`` to write a run into (stale ones of killed runs go)."""
    sweep(out.parent, _prefix(out))
    try:
        return Path(tempfile.mkdtemp(prefix=_prefix(out), dir=out.parent))
    except OSError as err:
        raise AttnforgeError(f"{out}: cannot create a directory in {out.parent} ({err.strerror or err})", where="--out",
                             hint="give a path in a writable directory") from None


def sweep(parent: Path, prefix: str | tuple[str, ...], older_than: float = STALE_SECONDS) -> None:
    """Remove ``prefix*`` directories in ``parent`` not modified for ``older_than`` seconds:
    what runs killed before their swap left behind."""
    now = time.time()
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return
    for p in candidates:
        try:
            if p.is_dir() and not p.is_symlink() and now - p.stat().st_mtime > older_than:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            continue


def discard(work: Path) -> None:
    """Remove a run's temporary directory (nothing, if it was moved into place)."""
    if work.is_dir():
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` (flock on the directory itself: no lock file is left)."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the rename alone still never mixes two runs' files
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where
    the system or file system cannot, and the caller falls back to two renames."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(work: Path, out: Path) -> None:
    """Move the finished run in ``work`` to ``out`` whole, replacing an earlier attnforge output
    directory there (swapped in one step where the system can: ``out`` is never missing, never
    mixed). Raises ``OutputError`` (keeping ``work``) when ``out`` has become something else
    meanwhile, or the move fails."""
    old: Path | None = None
    with locked(out.parent):
        why = _replaceable(out)
        if why is not None:
            raise OutputError(f"{out} {why}, so the run was not moved there", where=str(out),
                              hint=f"its output is kept in {work}")
        try:
            if not os.path.lexists(out):
                os.rename(work, out)
            elif _exchange(work, out):
                old = work  # now holds the earlier output
            else:
                old = Path(tempfile.mkdtemp(prefix=_prefix(out) + "replaced-", dir=out.parent)) / "old"
                os.rename(out, old)  # out is missing only between this rename and the next
                try:
                    os.rename(work, out)
                except OSError:
                    os.rename(old, out)  # put the earlier output back
                    raise
        except OSError as err:
            raise OutputError(f"cannot move the finished run into {out}: {_oserror(err)}", where=str(out),
                              hint=f"its output is kept in {work}") from None
    if old is not None:
        shutil.rmtree(old if old == work else old.parent, ignore_errors=True)
