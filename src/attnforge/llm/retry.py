"""Retries with exponential backoff for rate limits (429) and server errors (5xx).

One policy for every provider (the SDKs' own retries are switched off), so waits are the same
everywhere and a caller can show them. A server's Retry-After is honoured (seconds, or an HTTP
date); one longer than ``max_wait_s`` is an error rather than a silent hour-long sleep.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Mapping, TypeVar

from .errors import LLMError

T = TypeVar("T")


class Transient(LLMError):
    """A failure worth retrying: HTTP 429 or 5xx. ``retry_after`` is the server's wait in seconds."""

    def __init__(self, message: str, *, status: int, retry_after: float | None = None, where: str = "LLM request"):
        self.status = status
        self.retry_after = retry_after
        super().__init__(message, where=where)


def is_transient(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def retry_after_seconds(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """The wait a response asks for: ``Retry-After: 2`` or ``Retry-After: <HTTP date>`` (and
    OpenAI's ``retry-after-ms``); None when absent or unreadable."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
    return max(0.0, (when - current).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 4  # attempts after the first
    base_delay_s: float = 1.0  # first backoff; doubles each time
    max_delay_s: float = 30.0  # cap on a backoff we choose
    max_wait_s: float = 120.0  # cap on a wait the server asks for

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if retry_after is not None:
            return retry_after
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return backoff * (1 + random.uniform(0, 0.25))  # jitter: concurrent clients do not retry in step


def with_retries(call: Callable[[], T], policy: RetryPolicy, *, where: str,
                 on_wait: Callable[[str], None] | None = None, sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, retried on ``Transient`` failures as ``policy`` says; other errors pass through."""
    attempt = 0
    while True:
        try:
            return call()
        except Transient as err:
            attempt += 1
            if attempt > policy.retries:
                raise LLMError(f"gave up after {attempt} attempts; last: {err.message}", where=where,
                               hint="the server is overloaded or failing; try again later or raise retries") from None
            wait = policy.delay(attempt, err.retry_after)
            if wait > policy.max_wait_s:
                raise LLMError(f"the server asks to retry after {wait:.0f} s, more than the {policy.max_wait_s:.0f} s limit "
                               f"({err.message})", where=where, hint="try again later, or raise max_wait_s in the config") from None
            if on_wait is not None:
                on_wait(f"{where}: {err.message}; retry {attempt}/{policy.retries} in {wait:.1f} s")
            sleep(wait)
