"""The child side of sandbox.py: ``python -m attnforge.llm.sandbox_child`` reads its job from
stdin, confines itself, runs the job and sends one length-prefixed pickle back on a pipe."""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

OUTPUT_FILE = "output.txt"


def main() -> None:
    payload = pickle.load(sys.stdin.buffer)
    fd = payload["result_fd"]
    directory = Path(payload["directory"])
    limits = payload["limits"]
    outcome: tuple[str, Any, str]
    try:
        confine(directory, limits, payload["owner"])
        result = payload["job"](directory / payload["file_name"], *payload["args"])
        outcome = ("ok", result, "")
    except MemoryError:
        outcome = ("memory", "MemoryError", "")  # no traceback: formatting it needs the memory that ran out
    except BaseException as err:  # everything, SystemExit included, goes back as a report
        message = f"{type(err).__name__}: {err}"
        kind = "memory" if _out_of_memory(message) else "exception"
        outcome = (kind, message[:2000], "".join(traceback.format_exception(err, limit=-12))[-6000:])
    # Outside the except blocks: the failed job's frames (and what they allocated) are released.
    try:
        data = pickle.dumps(outcome)
    except Exception as err:  # the result cannot be pickled
        data = pickle.dumps(("exception", f"the job's result cannot be sent back: {type(err).__name__}: {err}", ""))
    message = len(data).to_bytes(8, "big") + data
    view = memoryview(message)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.close(fd)
    os._exit(0)  # no atexit handlers or threads of the code may delay or change the exit


def _out_of_memory(message: str) -> bool:
    lowered = message.lower()
    return any(s in lowered for s in ("can't allocate memory", "cannot allocate memory", "out of memory", "std::bad_alloc"))


def confine(directory: Path, limits: Any, owner: tuple[int, int] | None) -> None:
    """Output to a file, stdin closed, limits set, privileges dropped: before any model code runs."""
    import resource

    output = os.open(directory / OUTPUT_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.max_file_bytes is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
    if limits.cpu_s is not None:
        seconds = max(1, int(limits.cpu_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    if owner is not None:
        os.chown(directory / OUTPUT_FILE, owner[0], owner[1])
        os.setgroups([])
        os.setgid(owner[1])
        os.setuid(owner[0])
    if limits.extra_tasks is not None and hasattr(resource, "RLIMIT_NPROC"):
        cap = tasks_of(os.getuid()) + limits.extra_tasks
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
    if limits.memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))


def tasks_of(uid: int) -> int:
    """Processes and threads a user runs now (what RLIMIT_NPROC counts), from /proc."""
    proc = Path("/proc")
    total = 0
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            total += int(fields.get("Threads", "1").strip() or 1)
    return total


if __name__ == "__main__":
    main()
