"""What every client takes and returns, and the one interface they share."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

from .errors import LLMError

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise LLMError(f"message role {self.role!r} is not one of {', '.join(ROLES)}", where="messages",
                           hint="use system for instructions, user for prompts, assistant for earlier answers")
        if not isinstance(self.content, str):
            raise LLMError(f"message content is {type(self.content).__name__}, not text", where="messages")

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Completion:
    """One answer: its text, token counts, wall time and the model name the server reported.

    ``estimated`` is True when the server gave no token counts (the file provider, some local
    servers) and the counts are estimates from the text length."""

    text: str
    input_tokens: int
    output_tokens: int
    seconds: float
    model: str
    finish_reason: str | None = None
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Client(Protocol):
    """A model behind ``complete``. ``spec`` names it (``openai:MODEL``); it never holds a key."""

    spec: str

    def complete(self, messages: Sequence[Message], *, max_tokens: int) -> Completion: ...


def estimate_tokens(text: str) -> int:
    """About four characters a token for English and code: good enough to keep a budget honest."""
    return math.ceil(len(text) / 4)


def as_messages(messages: Sequence[Message] | str) -> list[Message]:
    """Messages as given, or one user message for a bare prompt string."""
    if isinstance(messages, str):
        return [Message("user", messages)]
    out = list(messages)
    if not out:
        raise LLMError("no messages to send", where="messages", hint="pass at least one user message")
    for m in out:
        if not isinstance(m, Message):
            raise LLMError(f"expected Message, got {type(m).__name__}", where="messages")
    return out


def check_max_tokens(max_tokens: int) -> int:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise LLMError(f"max_tokens = {max_tokens!r} is not a positive integer", where="max_tokens",
                       hint="e.g. max_tokens=8192")
    return max_tokens
