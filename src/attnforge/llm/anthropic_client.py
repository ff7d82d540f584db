"""``anthropic:MODEL``: the Anthropic messages API, through the anthropic SDK."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from . import redact, sdk
from .config import Settings
from .errors import LLMError
from .messages import Completion, Message, as_messages, check_max_tokens
from .retry import RetryPolicy, with_retries


class AnthropicClient:
    """``complete(messages, max_tokens=)`` against the messages API. System messages become
    the request's ``system`` text; the others must start with a user message."""

    def __init__(self, settings: Settings, *, on_event: Callable[[str], None] | None = None):
        self._anthropic = sdk.require("anthropic")
        self.spec = settings.spec
        self.model = settings.model
        self.timeout_s = settings.timeout_s
        self._key_source = settings.key_source
        self._where = f"{settings.spec} at {redact.display_url(settings.base_url) or 'the Anthropic API'}"
        self._policy = RetryPolicy(retries=settings.retries, max_wait_s=settings.max_wait_s)
        self._on_event = on_event
        # An explicit timeout also stops the SDK refusing large max_tokens without streaming.
        self._sdk = self._anthropic.Anthropic(api_key=settings.api_key, base_url=settings.base_url,
                                              timeout=settings.timeout_s, max_retries=0)

    def complete(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        msgs = as_messages(messages)
        check_max_tokens(max_tokens)
        system = "\n\n".join(m.content for m in msgs if m.role == "system")
        turns = [m.to_dict() for m in msgs if m.role != "system"]
        if not turns or turns[0]["role"] != "user":
            raise LLMError("the messages API needs a user message first (after any system messages)",
                           where="messages", hint="put the prompt in a user message")
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "messages": turns}
        if system:
            kwargs["system"] = system

        def send() -> Any:
            return sdk.call(lambda: self._sdk.messages.create(**kwargs), self._anthropic, where=self._where,
                            timeout_s=self.timeout_s, key_source=self._key_source)

        start = time.monotonic()
        response = with_retries(send, self._policy, where=self._where, on_wait=self._on_event)
        return self._completion(response, time.monotonic() - start, max_tokens)

    def _completion(self, response: Any, seconds: float, max_tokens: int) -> Completion:
        where = self._where
        if not isinstance(response, self._anthropic.types.Message):
            raise LLMError(f"the server's answer is not a message: {redact.scrub(str(response))[:200]!r}", where=where,
                           hint="is the base URL the Anthropic API (without /v1)?")
        stop = response.stop_reason
        if stop == "refusal":
            raise LLMError("the model refused to answer", where=where, hint="rephrase the request or use another model")
        text = "".join(getattr(b, "text", "") or "" for b in (response.content or []) if getattr(b, "type", None) == "text")
        if not text.strip():
            if stop == "max_tokens":
                raise LLMError(f"the answer was cut off at max_tokens={max_tokens} before any text", where=where,
                               hint="raise max_tokens")
            raise LLMError("the answer has no text", where=where, hint="try again, or another model")
        usage = response.usage
        if usage is None or usage.input_tokens is None or usage.output_tokens is None:
            raise LLMError("the answer has no token usage", where=where, hint="the messages API always sends usage: check the base URL")
        # Cached prompt tokens are counted apart from input_tokens; a budget counts them all.
        cached = (getattr(usage, "cache_read_input_tokens", None) or 0) + (getattr(usage, "cache_creation_input_tokens", None) or 0)
        return Completion(text=text, input_tokens=int(usage.input_tokens) + int(cached), output_tokens=int(usage.output_tokens),
                          seconds=seconds, model=response.model or self.model, finish_reason=stop, estimated=False)
