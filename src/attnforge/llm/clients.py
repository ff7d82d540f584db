"""``open_client("PROVIDER:MODEL")``: the one place a spec string becomes a client."""

from __future__ import annotations

import os
from typing import Callable

from .budget import Prices
from .config import file_settings, parse_spec, resolve
from .errors import LLMError
from .messages import Client


def open_client(spec: str, *, api_key: str | None = None, base_url: str | None = None, timeout_s: float | None = None,
                retries: int | None = None, prices: Prices | None = None, config: str | os.PathLike[str] | None = None,
                on_event: Callable[[str], None] | None = None) -> Client:
    """A client for ``openai:MODEL``, ``anthropic:MODEL``, ``file:DIR`` or ``replay:TRANSCRIPT``.

    ``on_event`` receives lines meant for the user: retry waits, and for ``file:`` which file to
    answer (stderr when None). Settings not given here come from the environment and the config
    file (config.py)."""
    provider, rest = parse_spec(spec)
    if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise LLMError(f"timeout {timeout_s!r} is not a number of seconds > 0", where="--llm-timeout", hint="e.g. 600")
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
        raise LLMError(f"retries {retries!r} is not an integer >= 0", where="--llm-retries", hint="e.g. 4")
    if provider == "openai":
        from .openai_client import OpenAIClient
        return OpenAIClient(resolve(spec, api_key=api_key, base_url=base_url, timeout_s=timeout_s, retries=retries,
                                    prices=prices, config=config), on_event=on_event)
    if provider == "anthropic":
        from .anthropic_client import AnthropicClient
        return AnthropicClient(resolve(spec, api_key=api_key, base_url=base_url, timeout_s=timeout_s, retries=retries,
                                       prices=prices, config=config), on_event=on_event)
    if provider == "file":
        from .file_client import DEFAULT_SETTLE_S, DEFAULT_TIMEOUT_S, FileClient
        table = file_settings(config)
        return FileClient(rest, timeout_s=timeout_s or table.get("timeout_s", DEFAULT_TIMEOUT_S),
                          settle_s=table.get("settle_s", DEFAULT_SETTLE_S), on_event=on_event)
    from .replay import Replay
    return Replay(rest)
