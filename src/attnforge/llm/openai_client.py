"""``openai:MODEL``: any OpenAI-compatible chat-completions endpoint, through the openai SDK.

OpenAI, DeepSeek, vLLM, llama.cpp's server, Ollama and LM Studio all speak it; the base URL
picks the server (see config.py for where it and the key come from).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from . import redact
from .config import Settings
from .errors import LLMError
from .messages import Completion, Message, as_messages, check_max_tokens, estimate_tokens
from .sdk import SDKClient


class OpenAIClient(SDKClient):
    """``complete(messages, max_tokens=)`` against a chat-completions endpoint."""

    PACKAGE, CLIENT, SERVICE = "openai", "OpenAI", "the OpenAI API"

    def __init__(self, settings: Settings, *, on_event: Callable[[str], None] | None = None):
        super().__init__(settings, on_event=on_event)
        # OpenAI's reasoning models take max_completion_tokens and refuse max_tokens; switched on
        # the first such refusal.
        self._token_param = "max_tokens"

    def complete(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        msgs = as_messages(messages)
        check_max_tokens(max_tokens)
        start = time.monotonic()
        response = self._request(lambda: self._once(msgs, max_tokens))
        return self._completion(response, time.monotonic() - start, msgs, max_tokens)

    def _once(self, msgs: list[Message], max_tokens: int) -> Any:
        def send() -> Any:
            return self._sdk.chat.completions.create(model=self.model, messages=[m.to_dict() for m in msgs],
                                                     **{self._token_param: max_tokens})
        try:
            return self._call(send)
        except LLMError as err:
            if self._token_param == "max_tokens" and "max_completion_tokens" in err.message and "HTTP 400" in err.message:
                self._token_param = "max_completion_tokens"
                return self._call(send)
            raise

    def _completion(self, response: Any, seconds: float, msgs: list[Message], max_tokens: int) -> Completion:
        where = self._where
        if not isinstance(response, self._module.types.chat.ChatCompletion):
            raise LLMError(f"the server's answer is not a chat completion: {redact.scrub(str(response))[:200]!r}",
                           where=where, hint="is the base URL an OpenAI-compatible endpoint (ending in /v1)?")
        if not response.choices:
            raise LLMError("the answer has no choices", where=where, hint="the server returned an empty completion; try again")
        choice = response.choices[0]
        message = choice.message
        finish = choice.finish_reason
        if message is None:
            raise LLMError("the answer's first choice has no message", where=where)
        refusal = getattr(message, "refusal", None)
        if refusal:
            raise LLMError(f"the model refused: {redact.scrub(refusal)[:300]}", where=where,
                           hint="rephrase the request or use another model")
        if finish == "content_filter":
            raise LLMError("the provider's content filter stopped the answer", where=where, hint="use another model or provider")
        text = self._text(message.content or "", cut_off=finish == "length", max_tokens=max_tokens,
                          hint="raise max_tokens (reasoning models spend tokens before they answer)")
        usage = response.usage
        if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
            tokens, estimated = (int(usage.prompt_tokens), int(usage.completion_tokens)), False
        else:  # some local servers send no usage
            tokens, estimated = (sum(estimate_tokens(m.content) for m in msgs), estimate_tokens(text)), True
        return Completion(text=text, input_tokens=tokens[0], output_tokens=tokens[1], seconds=seconds,
                          model=response.model or self.model, finish_reason=finish, estimated=estimated)
