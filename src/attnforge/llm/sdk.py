"""The official SDKs, imported only when a client is made, and their failures as LLMErrors.

openai and anthropic are generated from one template (Stainless): the same exception classes
(``APIStatusError`` with ``status_code``/``response``/``body``, ``APITimeoutError``,
``APIConnectionError``, ``APIResponseValidationError``), so one mapping serves both.
"""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import Any, Callable, TypeVar

from . import redact
from .config import Settings
from .errors import LLMError
from .retry import RetryPolicy, Transient, is_transient, retry_after_seconds, with_retries

T = TypeVar("T")
PIP_EXTRA = 'pip install "attnforge[llm]"'


def require(name: str) -> ModuleType:
    """Import an SDK or say how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise LLMError(f"the {name} package is not installed", where=f"{name}: provider",
                       hint=f"{PIP_EXTRA} (or pip install {name})") from None


def body_excerpt(err: Any, limit: int = 300) -> str:
    """The server's own words from an error response: its error message, else the raw body; scrubbed."""
    body = getattr(err, "body", None)
    text = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        text = inner.get("message") if isinstance(inner, dict) else inner
    if text is None:
        response = getattr(err, "response", None)
        try:
            text = response.text if response is not None else None
        except Exception:  # a streamed or closed body has no text to show
            text = None
    if text is None:
        text = str(body) if body is not None else ""
    text = redact.scrub(" ".join(str(text).split()))
    return text[:limit] + ("..." if len(text) > limit else "")


def call(fn: Callable[[], T], sdk: ModuleType, *, where: str, timeout_s: float, key_source: str) -> T:
    """``fn()`` with the SDK's exceptions turned into LLMErrors (``Transient`` for 429/5xx).

    Errors are raised ``from None``: the SDK's exception text may quote the request or an echoing
    server, and a traceback must not carry it."""
    try:
        return fn()
    except sdk.APITimeoutError:
        raise LLMError(f"no answer within {timeout_s:g} s", where=where,
                       hint="the model may still be writing: raise the timeout, or lower max_tokens") from None
    except sdk.APIConnectionError as err:
        cause = redact.scrub(str(err.__cause__ or err))
        raise LLMError(f"cannot reach the server: {cause}", where=where,
                       hint="is the server running and the base URL right (OpenAI-compatible servers end in /v1)?") from None
    except sdk.APIStatusError as err:
        status = int(err.status_code)
        excerpt = body_excerpt(err)
        message = f"HTTP {status}: {excerpt}" if excerpt else f"HTTP {status}"
        if is_transient(status):
            headers = getattr(getattr(err, "response", None), "headers", None)
            raise Transient(message, status=status, retry_after=retry_after_seconds(headers), where=where) from None
        if status in (401, 403):
            raise LLMError(f"the server refused the key ({message})", where=where,
                           hint=f"check the key (taken from {key_source})") from None
        if status == 404:
            raise LLMError(f"not found ({message})", where=where,
                           hint="check the model name and the base URL") from None
        raise LLMError(message, where=where, hint="the request was refused as sent; the server's message says why") from None
    except sdk.APIResponseValidationError as err:
        raise LLMError(f"the server's answer does not have the expected form: {body_excerpt(err)}", where=where,
                       hint="is the base URL an OpenAI-compatible / Anthropic endpoint?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise LLMError(f"the server's answer is not valid JSON ({err.__class__.__name__}: {redact.scrub(str(err))[:200]})",
                       where=where, hint="is the base URL an API endpoint (not a web page or a proxy error)?") from None
    except sdk.APIError as err:  # the SDKs' remaining failures (e.g. a malformed stream)
        raise LLMError(redact.scrub(str(err))[:300], where=where) from None


class SDKClient:
    """What the openai and anthropic clients share: the SDK imported (or how to install it), its
    client made with the SDK's retries off (ours are ``retry.py``'s) and an explicit timeout
    (which also stops the anthropic SDK refusing a large max_tokens without streaming), where
    messages say they come from, and ``_request``: one request, its failures mapped by ``call``
    and retried by ``with_retries``."""

    PACKAGE = ""  # the SDK's module: "openai" or "anthropic"
    CLIENT = ""  # its client class: "OpenAI" or "Anthropic"
    SERVICE = ""  # what the default base URL is, for messages: "the OpenAI API"

    def __init__(self, settings: Settings, *, on_event: Callable[[str], None] | None = None):
        self._module = require(self.PACKAGE)
        self.spec = settings.spec
        self.model = settings.model
        self.timeout_s = settings.timeout_s
        self._key_source = settings.key_source
        self._where = f"{settings.spec} at {redact.display_url(settings.base_url) or self.SERVICE}"
        self._policy = RetryPolicy(retries=settings.retries, max_wait_s=settings.max_wait_s)
        self._on_event = on_event
        self._sdk = getattr(self._module, self.CLIENT)(api_key=settings.api_key, base_url=settings.base_url,
                                                        timeout=settings.timeout_s, max_retries=0)

    def _call(self, fn: Callable[[], T]) -> T:
        """``fn()`` once, the SDK's exceptions as LLMErrors."""
        return call(fn, self._module, where=self._where, timeout_s=self.timeout_s, key_source=self._key_source)

    def _request(self, fn: Callable[[], T]) -> T:
        """``fn()`` with retries on 429/5xx (``fn`` makes one request through ``_call``)."""
        return with_retries(fn, self._policy, where=self._where, on_wait=self._on_event)

    def _text(self, text: str, *, cut_off: bool, max_tokens: int, hint: str = "raise max_tokens") -> str:
        """An answer's text, or an LLMError saying why there is none (``cut_off``: at max_tokens)."""
        if not text.strip():
            if cut_off:
                raise LLMError(f"the answer was cut off at max_tokens={max_tokens} before any text", where=self._where, hint=hint)
            raise LLMError("the answer has no text", where=self._where, hint="try again, or another model")
        return text
