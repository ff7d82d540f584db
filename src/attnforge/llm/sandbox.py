"""Runs model-written Python in a child process with limits, so a hang, a runaway allocation, a
fork bomb or a crash costs a typed error and never the parent.

``run_untrusted(source, job, *args)`` checks the source with the static gate (gate.py), writes
it to a fresh private directory and, in a new Python process (``sandbox_child``), calls
``job(path, *args)`` (``import_and_call`` imports the module and calls one of its functions; the
pipeline's own jobs load and verify a kernel). The child, before the job runs:

* starts a new session, so the parent can kill it and everything it started as one group;
* runs as ``nobody`` when the parent is root and nobody can read the Python installation (files
  elsewhere are then out of reach, and the process cap below binds: the kernel exempts root from
  it; ``containment()`` says what holds on this machine);
* gets ``RLIMIT_AS`` (address space: ``memory_bytes``), ``RLIMIT_NPROC`` (processes and threads:
  those its user already has plus ``extra_tasks``), ``RLIMIT_FSIZE`` (largest file it may write),
  ``RLIMIT_CORE`` 0 and optionally ``RLIMIT_CPU``;
* writes its stdout and stderr to a file whose tail comes back with a failure;
* inherits no credentials: environment variables named like keys, tokens or passwords are dropped.

The parent waits at most ``timeout_s`` of wall-clock time from the spawn, then kills the group.
Failures are ``SandboxError`` with ``kind``: "timeout", "memory", "signal", "exception" or
"no-result". CUDA reserves far more address space than it uses: for GPU jobs pass
``memory_bytes=None`` (docs/LLM.md).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from . import gate
from .errors import LLMError, SandboxError

T = TypeVar("T")
GiB = 1 << 30
MiB = 1 << 20
OUTPUT_FILE = "output.txt"
_TAIL = 2000
# Environment variables the child does not inherit: credentials of any kind.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|^ATTNFORGE_LLM_", re.IGNORECASE)


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 300.0  # wall clock from spawn to result, imports included
    memory_bytes: int | None = 8 * GiB  # RLIMIT_AS; None for CUDA jobs
    extra_tasks: int | None = 512  # processes + threads beyond the user's current count (torch wants one a core)
    max_file_bytes: int | None = 256 * MiB  # RLIMIT_FSIZE: room for Triton's cache, not for filling a disk
    cpu_s: float | None = None  # RLIMIT_CPU; off by default: threads use CPU seconds faster than wall seconds
    drop_privileges: bool = True  # when root, run the code as nobody

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise LLMError(f"sandbox timeout {self.timeout_s!r} is not > 0", where="sandbox limits")
        for name in ("memory_bytes", "extra_tasks", "max_file_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise LLMError(f"sandbox {name} = {value!r} is not an integer >= 0 or None", where="sandbox limits")


def run_untrusted(source: str, job: Callable[..., T], *args: Any, limits: Limits = Limits(),
                  file_name: str = "kernel_llm.py") -> T:
    """Gate ``source``, then ``job(path_to_source, *args)`` in a limited child process; its result.

    ``job`` and ``args`` cross a process boundary: a module-level function and picklable values."""
    gate.check_source(source, file=file_name)
    return run_isolated(source, job, *args, limits=limits, file_name=file_name)


def run_isolated(source: str, job: Callable[..., T], *args: Any, limits: Limits = Limits(),
                 file_name: str = "kernel_llm.py") -> T:
    """The containment alone, without the gate (for sources already gated, and to test the limits)."""
    directory = Path(tempfile.mkdtemp(prefix="attnforge-sandbox-"))
    try:
        (directory / file_name).write_text(source, encoding="utf-8")
        owner = _unprivileged_user() if limits.drop_privileges else None
        if owner is not None:
            for path in (directory, directory / file_name):
                os.chown(path, owner[0], owner[1])
        return _run(directory, file_name, job, args, limits, owner)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _unprivileged_user() -> tuple[int, int] | None:
    """(uid, gid) of nobody when this process is root, such a user exists and it can read the
    Python installation and import path (a Python under /root cannot be run as nobody); else None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    needed = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), *sys.path}
    if not all(_others_can_read(p) for p in needed if p and os.path.exists(p)):
        return None
    return entry.pw_uid, entry.pw_gid


def _others_can_read(path: str) -> bool:
    """Whether a user with no group in common can reach and read ``path`` (mode bits only)."""
    real = Path(os.path.realpath(path))
    for parent in reversed(real.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(real).st_mode
    return bool(mode & stat.S_IROTH) and (not stat.S_ISDIR(mode) or bool(mode & stat.S_IXOTH))


def containment() -> dict[str, bool]:
    """What the sandbox can enforce on this machine (for reports and docs): running as an
    unprivileged user, and the process cap (the kernel exempts root from RLIMIT_NPROC)."""
    drop = _unprivileged_user() is not None
    return {"unprivileged": drop or (hasattr(os, "geteuid") and os.geteuid() != 0), "process_cap": drop or os.geteuid() != 0,
            "memory_cap": True, "wall_clock": True}


# Places of the user's that a child would otherwise read or write: dumps and overrides of Triton's,
# caches of other libraries (the child gets its own, above), a bytecode prefix whose .pyc files the
# parent would load later, the user's tuning database.
_USER_PLACES = ("TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TORCHINDUCTOR_CACHE_DIR", "PYTHONPYCACHEPREFIX",
                "ATTNFORGE_TUNING")


def _child_env(directory: Path) -> dict[str, str]:
    """The parent's environment without credentials, with the parent's import path and a private
    home and caches: the code in the child neither reads nor writes the user's attnforge or Triton
    cache (a cache entry it planted would be loaded later, outside the sandbox)."""
    env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
    # Absolute: the child works in another directory ("" and relative entries mean the parent's).
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(os.path.abspath(p) for p in sys.path if os.path.isdir(p or ".")))
    for name in _USER_PLACES:
        env.pop(name, None)
    env.update(HOME=str(directory), TMPDIR=str(directory), TRITON_CACHE_DIR=str(directory / "triton-cache"),
               ATTNFORGE_CACHE=str(directory / "attnforge-cache"), XDG_CACHE_HOME=str(directory / "cache"),
               CUDA_CACHE_PATH=str(directory / "cuda-cache"), PYTHONDONTWRITEBYTECODE="1")
    return env


def _run(directory: Path, file_name: str, job: Callable[..., T], args: tuple, limits: Limits,
         owner: tuple[int, int] | None) -> T:
    read_end, write_end = os.pipe()
    payload = pickle.dumps({"job": job, "args": args, "limits": limits, "file_name": file_name, "owner": owner,
                            "result_fd": write_end, "directory": str(directory)})
    start = time.monotonic()
    try:
        # A fresh interpreter (no parent state or locks), in a session of its own (killed as one group).
        process = subprocess.Popen([sys.executable, "-m", "attnforge.llm.sandbox_child"], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=directory,
                                   env=_child_env(directory), pass_fds=(write_end,), start_new_session=True)
    except OSError as err:
        os.close(read_end)
        os.close(write_end)
        raise SandboxError("no-result", f"cannot start the child process: {err.strerror}") from None
    os.close(write_end)
    outcome = None
    try:
        try:
            process.stdin.write(payload)
            process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died on start; its exit status says how
        outcome = _receive(read_end, start + limits.timeout_s, process)
        if outcome is None and process.poll() is None:
            try:
                process.wait(max(0.0, start + limits.timeout_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        timed_out = outcome is None and process.poll() is None
    finally:
        _kill_group(process)
        os.close(read_end)
    output = _tail(directory / OUTPUT_FILE)
    if timed_out:
        raise SandboxError("timeout", f"timed out after {limits.timeout_s:g} s", detail=output,
                           hint="the code never finished: an endless loop, or a kernel far too slow for the interpreter")
    if outcome is None:
        code = process.returncode
        if code is not None and code < 0:
            raise _signalled(-code, limits, output)
        raise SandboxError("no-result", f"the child process exited with code {code} without a result", detail=output,
                           hint="the code ended the process itself, or crashed on start: see detail")
    kind, payload_back, detail = outcome
    if kind == "ok":
        return payload_back
    if kind == "memory":
        limit = f"the memory limit of {limits.memory_bytes / MiB:g} MiB" if limits.memory_bytes else "the memory available"
        cuda = "cuda" in f"{payload_back} {detail}".lower()
        raise SandboxError("memory", f"exceeded {limit}: {payload_back}", detail=detail or output,
                           hint="CUDA reserves far more address space than it uses: pass memory_bytes=None for GPU jobs"
                           if cuda else "the code allocates without bound, or needs a larger memory_bytes")
    raise SandboxError("exception", payload_back, detail=(detail + "\n" + output).strip(),
                       hint="the code raised: see detail for its traceback and output")


def _receive(fd: int, deadline: float, process: subprocess.Popen) -> tuple | None:
    """One length-prefixed pickle from the child, or None at the deadline or when the child dies
    without one. Not "read to EOF": processes the code forked may hold the pipe open."""
    data = b""
    need: int | None = None
    while True:
        if need is None and len(data) >= 8:
            need = 8 + int.from_bytes(data[:8], "big")
        if need is not None and len(data) >= need:
            try:
                return pickle.loads(data[8:need])
            except Exception as err:  # a result the parent cannot rebuild (a class it cannot import)
                return ("exception", f"the job's result cannot be read back: {type(err).__name__}: {err}", "")
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if not ready:
            if process.poll() is not None and not _readable(fd):
                return None
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        data += chunk


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _signalled(number: int, limits: Limits, output: str) -> SandboxError:
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    cause = {"SIGXCPU": f"used more than {limits.cpu_s} s of CPU time", "SIGXFSZ": "wrote a file over the size limit",
             "SIGSEGV": "crashed (out of memory, or a bad pointer in native code)",
             "SIGKILL": "was killed (out of memory?)", "SIGABRT": "aborted (native code failed, often on memory)"}.get(name, "")
    return SandboxError("signal", f"killed by signal {name}" + (f": {cause}" if cause else ""), detail=output,
                        hint="see detail for the code's last output")


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the child and whatever it started (its session), then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
    if process.poll() is None:
        process.kill()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ------------------------------------------------------------------ jobs


def import_module(path: Path) -> Any:
    """Import the source file as a module of its own (Triton's jit reads its source from the file)."""
    spec = importlib.util.spec_from_file_location(f"attnforge_untrusted_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def import_and_call(path: Path, entry: str, *args: Any) -> Any:
    """A job: import the module, call its function ``entry(*args)``, return what it returns."""
    return getattr(import_module(path), entry)(*args)
