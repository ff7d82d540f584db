"""Keeps API keys out of everything attnforge writes: errors, transcripts, prompts on disk.

A client registers each key it resolves; ``scrub`` replaces every registered key, and anything
that looks like a bearer token or a provider key, before text leaves the process.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import urlsplit, urlunsplit

_LOCK = threading.Lock()
_SECRETS: set[str] = set()

# Shapes of keys we may not have been told about (a server echoing another key, a header dump).
_KEY_SHAPES = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}|sk_[A-Za-z0-9_\-]{16,}|Bearer\s+[A-Za-z0-9._\-]{8,})"
)
MASK = "[redacted]"


def remember(secret: str | None) -> None:
    """Register a key so that ``scrub`` removes it (short strings are ignored: they would mask words)."""
    if secret and len(secret) >= 6:
        with _LOCK:
            _SECRETS.add(secret)


def scrub(text: str) -> str:
    """``text`` with every registered key and every key-shaped token replaced by a mask."""
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, MASK)
    return _KEY_SHAPES.sub(MASK, text)


def display_url(url: str | None) -> str:
    """A base URL fit to show: without ``user:password@`` and without a query (some gateways take
    the key as ``?key=``)."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    return scrub(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
