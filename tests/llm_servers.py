"""Real protocol servers on 127.0.0.1 for the LLM client tests (not a test module).

The OpenAI and Anthropic endpoints are pytest-httpserver (werkzeug) servers scripted per test;
these helpers build the JSON bodies the two protocols answer with, and a server that accepts
connections and never answers.
"""

from __future__ import annotations

import socket

import pytest

SECRET = "sk-test-SECRETKEY1234567890"
ENV_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
            "ATTNFORGE_LLM_API_KEY", "ATTNFORGE_LLM_BASE_URL", "ATTNFORGE_LLM_CONFIG")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No key, URL or config file from the machine running the tests."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return monkeypatch


def openai_body(text: str, *, model: str = "gpt-test-0613", prompt_tokens: int = 12, completion_tokens: int = 5,
                finish: str = "stop", usage: bool = True, refusal: str | None = None) -> dict:
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": refusal},
                         "finish_reason": finish}]}
    if usage:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}
    return body


def anthropic_body(text: str, *, model: str = "claude-test-20250101", input_tokens: int = 12, output_tokens: int = 5,
                   stop: str = "end_turn") -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}] if text else [], "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


PROTOCOLS = {
    # provider -> (path the SDK posts to, base URL suffix, answer body builder)
    "openai": ("/v1/chat/completions", "/v1", openai_body),
    "anthropic": ("/v1/messages", "", anthropic_body),
}


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections (the kernel completes the handshake) and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
