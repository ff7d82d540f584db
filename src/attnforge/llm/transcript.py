"""Every prompt and answer of a generation, as JSON lines: the audit trail and the input of
``Replay``.

One line per request, in order: ``n``, ``time`` (UTC), ``client`` (its spec, e.g.
``openai:gpt-4o``), ``max_tokens``, ``messages`` and either ``completion`` (text, token counts,
seconds, model, finish reason) with ``cost_usd``, or ``error``. Keys never appear: clients hold
none in their spec, and every text is scrubbed (``redact``) before it is written.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from . import redact
from .errors import LLMError
from .messages import Completion, Message

FORMAT_VERSION = 1
FILE_NAME = "transcript.jsonl"


class Transcript:
    """Appends records to ``DIR/transcript.jsonl`` (created with DIR); numbering continues an existing file."""

    def __init__(self, directory: str | os.PathLike[str], *, name: str = FILE_NAME):
        self.path = Path(directory).expanduser() / name
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LLMError(f"cannot create the transcript directory: {err.strerror}", where=str(self.path.parent)) from None
        self._lock = threading.Lock()
        self._n = len(read_transcript(self.path)) if self.path.exists() else 0

    def record(self, client: str, messages: Sequence[Message], max_tokens: int, completion: Completion,
               cost_usd: float | None = None) -> None:
        comp = completion.to_dict()
        comp["text"] = redact.scrub(comp["text"])
        self._write({"client": client, "max_tokens": max_tokens, "messages": _messages(messages),
                     "completion": comp, "cost_usd": cost_usd})

    def record_error(self, client: str, messages: Sequence[Message], max_tokens: int, error: BaseException) -> None:
        self._write({"client": client, "max_tokens": max_tokens, "messages": _messages(messages),
                     "error": {"type": type(error).__name__, "message": redact.scrub(str(error))}})

    def _write(self, body: dict[str, Any]) -> None:
        with self._lock:
            self._n += 1
            record = {"v": FORMAT_VERSION, "n": self._n, "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                      **body}
            line = redact.scrub(json.dumps(record, ensure_ascii=False))
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line + "\n")


def _messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": redact.scrub(m.content)} for m in messages]


def read_transcript(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a transcript file, checked line by line."""
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / FILE_NAME
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise LLMError("no transcript here", where=str(file), hint=f"pass a {FILE_NAME} file or the directory holding one") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise LLMError(f"not a JSON line: {err.msg}", where=f"{file}:{number}", hint="the transcript is damaged") from None
        if not isinstance(record, dict) or record.get("v") != FORMAT_VERSION or "messages" not in record \
                or ("completion" not in record and "error" not in record):
            raise LLMError("not a transcript record", where=f"{file}:{number}",
                           hint=f"each line has v={FORMAT_VERSION}, messages and a completion or an error")
        record["_where"] = f"{file}:{number}"
        records.append(record)
    return records


def completion_from(record: dict[str, Any]) -> Completion:
    """The Completion a record holds."""
    data = record["completion"]
    names = {f.name for f in fields(Completion)}
    try:
        return Completion(**{k: v for k, v in data.items() if k in names})
    except TypeError as err:
        raise LLMError(f"bad completion: {err}", where=record.get("_where", "transcript")) from None
