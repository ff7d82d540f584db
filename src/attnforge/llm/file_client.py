"""``file:DIR``: a person (or another tool) answers each prompt through files.

Each prompt is written to ``DIR/NNN-prompt.md``; the client then waits for ``DIR/NNN-answer.md``
and reads it once it has stopped changing. For users without API access, and for auditing:
the directory is the full record of the exchange.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from . import redact
from .errors import LLMError
from .messages import Completion, Message, as_messages, check_max_tokens, estimate_tokens

DEFAULT_TIMEOUT_S = 3600.0  # a person reads the prompt, asks a chat model, pastes the answer
DEFAULT_SETTLE_S = 1.0  # an answer file counts as written once unchanged this long
_POLL_S = 0.1
_NUMBERED = re.compile(r"^(\d{3,})-(prompt|answer)\.md$")


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def prompt_markdown(messages: Sequence[Message], *, number: int, answer: Path, max_tokens: int) -> str:
    """The prompt file: every message under its role, then where to put the answer."""
    parts = [f"<!-- attnforge prompt {number}: answer in {answer.name} (about {max_tokens} tokens at most) -->", ""]
    for m in messages:
        parts += [f"## {m.role}", "", m.content.rstrip(), ""]
    return redact.scrub("\n".join(parts))


class FileClient:
    """Writes prompts as numbered files and waits for the answer file beside each."""

    def __init__(self, directory: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 settle_s: float = DEFAULT_SETTLE_S, on_event: Callable[[str], None] | None = None):
        if not timeout_s > 0:
            raise LLMError(f"timeout {timeout_s!r} is not > 0", where="file: provider", hint="seconds to wait for an answer")
        self.directory = Path(directory).expanduser()
        self.spec = f"file:{self.directory}"
        self.timeout_s = float(timeout_s)
        self.settle_s = float(settle_s)
        self._on_event = on_event or _to_stderr  # the person answering must be told where
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LLMError(f"cannot create the prompt directory: {err.strerror}", where=str(self.directory),
                           hint="pass a directory you can write to") from None

    def _next_number(self) -> int:
        """One past the highest number in the directory, so a second run never overwrites the first."""
        numbers = [int(m[1]) for p in self.directory.iterdir() if (m := _NUMBERED.match(p.name))]
        return max(numbers, default=0) + 1

    def complete(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        msgs = as_messages(messages)
        check_max_tokens(max_tokens)
        number = self._next_number()
        prompt = self.directory / f"{number:03d}-prompt.md"
        answer = self.directory / f"{number:03d}-answer.md"
        text = prompt_markdown(msgs, number=number, answer=answer, max_tokens=max_tokens)
        temporary = prompt.with_suffix(".md.part")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, prompt)  # whole or absent: a watcher never reads half a prompt
        self._on_event(f"attnforge: prompt {number} is in {prompt}\n"
                       f"attnforge: write the model's answer to {answer} (waiting up to {self.timeout_s:g} s)")
        start = time.monotonic()
        reply = self._wait(answer, start)
        return Completion(text=reply, input_tokens=estimate_tokens(text), output_tokens=estimate_tokens(reply),
                          seconds=time.monotonic() - start, model=self.spec, finish_reason=None, estimated=True)

    def _wait(self, answer: Path, start: float) -> str:
        seen: tuple[int, int] | None = None
        seen_at = start
        while True:
            now = time.monotonic()
            try:
                st = answer.stat()
                state: tuple[int, int] | None = (st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                state = None
            if state != seen:
                seen, seen_at = state, now
            elif state is not None and state[0] > 0 and now - seen_at >= self.settle_s:
                try:
                    reply = answer.read_text(encoding="utf-8")
                except UnicodeDecodeError as err:
                    raise LLMError(f"the answer file is not UTF-8 text (byte {err.start})", where=str(answer),
                                   hint="save it as UTF-8") from None
                if reply.strip():
                    return reply
            if now - start > self.timeout_s:
                raise LLMError(f"no answer in {answer} after {self.timeout_s:g} s", where=str(answer),
                               hint=f"write the answer to {answer.name} beside the prompt, or allow more time")
            time.sleep(_POLL_S)
