"""``replay:PATH``: answers from a saved transcript, in order, offline.

Re-runs a generation exactly (for regression tests and for reproducing a report): the n-th
request gets the n-th recorded answer, or the n-th recorded error raised again.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Sequence

from .errors import LLMError
from .messages import Completion, Message, as_messages, check_max_tokens
from .transcript import completion_from, read_transcript


class Replay:
    """A client whose answers come from a transcript. With ``check_prompts=True`` each request's
    messages must equal the recorded ones (the run has not drifted from the recording)."""

    def __init__(self, path: str | os.PathLike[str], *, check_prompts: bool = False):
        self.path = Path(path)
        self.spec = f"replay:{self.path}"
        self.check_prompts = check_prompts
        self._records = read_transcript(self.path)
        self._next = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        return len(self._records) - self._next

    def complete(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        msgs = as_messages(messages)
        check_max_tokens(max_tokens)
        with self._lock:
            if self._next >= len(self._records):
                raise LLMError(f"the transcript has {len(self._records)} answer(s); request {self._next + 1} has none",
                               where=str(self.path), hint="this run asks more than the recorded one did")
            record = self._records[self._next]
            self._next += 1
        if self.check_prompts:
            _compare(msgs, record)
        if "error" in record:
            raise LLMError(f"recorded failure: {record['error'].get('message', '')}", where=record["_where"])
        return completion_from(record)


def _compare(msgs: list[Message], record: dict) -> None:
    recorded = record["messages"]
    if len(recorded) != len(msgs):
        raise LLMError(f"{len(msgs)} message(s) sent, {len(recorded)} recorded", where=record["_where"],
                       hint="the run differs from the recording")
    for i, (m, r) in enumerate(zip(msgs, recorded)):
        if m.role != r.get("role") or m.content != r.get("content"):
            mine, theirs = m.content.splitlines(), str(r.get("content", "")).splitlines()
            line = next((k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            raise LLMError(f"message {i + 1} differs from the recording at its line {line + 1}", where=record["_where"],
                           hint="the prompt changed since the recording (template, manual or spec); record again")
