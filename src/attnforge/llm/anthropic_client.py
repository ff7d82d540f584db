"""``anthropic:MODEL``: the Anthropic messages API, through the anthropic SDK."""

from __future__ import annotations

import time
from typing import Any, Sequence

from . import redact
from .errors import LLMError
from .messages import Completion, Message, as_messages, check_max_tokens
from .sdk import SDKClient


class AnthropicClient(SDKClient):
    """``complete(messages, max_tokens=)`` against the messages API. System messages become
    the request's ``system`` text; the others must start with a user message."""

    PACKAGE, CLIENT, SERVICE = "anthropic", "Anthropic", "the Anthropic API"

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

        start = time.monotonic()
        response = self._request(lambda: self._call(lambda: self._sdk.messages.create(**kwargs)))
        return self._completion(response, time.monotonic() - start, max_tokens)

    def _completion(self, response: Any, seconds: float, max_tokens: int) -> Completion:
        where = self._where
        if not isinstance(response, self._module.types.Message):
            raise LLMError(f"the server's answer is not a message: {redact.scrub(str(response))[:200]!r}", where=where,
                           hint="is the base URL the Anthropic API (without /v1)?")
        stop = response.stop_reason
        if stop == "refusal":
            raise LLMError("the model refused to answer", where=where, hint="rephrase the request or use another model")
        text = self._text("".join(getattr(b, "text", "") or "" for b in (response.content or []) if getattr(b, "type", None) == "text"),
                          cut_off=stop == "max_tokens", max_tokens=max_tokens)
        usage = response.usage
        if usage is None or usage.input_tokens is None or usage.output_tokens is None:
            raise LLMError("the answer has no token usage", where=where, hint="the messages API always sends usage: check the base URL")
        # Cached prompt tokens are counted apart from input_tokens; a budget counts them all.
        cached = (getattr(usage, "cache_read_input_tokens", None) or 0) + (getattr(usage, "cache_creation_input_tokens", None) or 0)
        return Completion(text=text, input_tokens=int(usage.input_tokens) + int(cached), output_tokens=int(usage.output_tokens),
                          seconds=seconds, model=response.model or self.model, finish_reason=stop, estimated=False)
