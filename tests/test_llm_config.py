"""Where settings come from: arguments, environment, the config file; and what is refused."""

from __future__ import annotations

import os

import pytest

from attnforge.llm import LLMError, Prices, open_client
from attnforge.llm.config import LOCAL_SERVER_KEY, load_config, parse_spec, prices_for, resolve
from llm_servers import clean_env  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def _env(clean_env):
    return clean_env


def write_config(tmp_path, text):
    path = tmp_path / "llm.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_parse_spec():
    assert parse_spec("openai:gpt-4o") == ("openai", "gpt-4o")
    assert parse_spec("openai:llama3.1:70b") == ("openai", "llama3.1:70b")  # Ollama tags keep their colon
    assert parse_spec("Anthropic:claude-x") == ("anthropic", "claude-x")
    assert parse_spec("file:/tmp/prompts") == ("file", "/tmp/prompts")
    for bad, message in [("gpt-4o", "not PROVIDER:MODEL"), ("gemini:pro", "unknown LLM provider 'gemini'"),
                         ("openai:", "has no model name"), ("file: ", "has no directory")]:
        with pytest.raises(LLMError, match=message):
            parse_spec(bad)


def test_argument_beats_environment_beats_config(tmp_path, clean_env):
    config = write_config(tmp_path, '[openai]\nbase_url = "http://config:1/v1"\napi_key = "sk-from-config-000000"\n')
    s = resolve("openai:m", config=config)
    assert (s.base_url, s.api_key) == ("http://config:1/v1", "sk-from-config-000000") and "llm.toml" in s.key_source
    clean_env.setenv("OPENAI_API_KEY", "sk-from-openai-env-0000")
    clean_env.setenv("OPENAI_BASE_URL", "http://openai-env:1/v1")
    s = resolve("openai:m", config=config)
    assert (s.base_url, s.api_key, s.key_source) == ("http://openai-env:1/v1", "sk-from-openai-env-0000", "OPENAI_API_KEY")
    clean_env.setenv("ATTNFORGE_LLM_API_KEY", "sk-from-attnforge-env-0")
    clean_env.setenv("ATTNFORGE_LLM_BASE_URL", "http://attnforge-env:1/v1/")
    s = resolve("openai:m", config=config)
    assert (s.base_url, s.api_key, s.key_source) == ("http://attnforge-env:1/v1", "sk-from-attnforge-env-0", "ATTNFORGE_LLM_API_KEY")
    s = resolve("openai:m", api_key="sk-argument-000000", base_url="http://arg:1/v1", config=config)
    assert (s.base_url, s.api_key, s.key_source) == ("http://arg:1/v1", "sk-argument-000000", "argument")


def test_config_file_from_environment_and_key_from_a_named_variable(tmp_path, clean_env):
    config = write_config(tmp_path, '[anthropic]\napi_key_env = "MY_CLAUDE_KEY"\ntimeout_s = 90\nretries = 2\n'
                                    '[prices]\n"anthropic:claude-x" = { input = 3.0, output = 15.0 }\n')
    clean_env.setenv("ATTNFORGE_LLM_CONFIG", str(config))
    with pytest.raises(LLMError, match="names MY_CLAUDE_KEY for the anthropic key, but it is not set"):
        resolve("anthropic:claude-x")
    clean_env.setenv("MY_CLAUDE_KEY", "sk-ant-from-named-var")
    s = resolve("anthropic:claude-x")
    assert s.api_key == "sk-ant-from-named-var" and s.key_source == "MY_CLAUDE_KEY"
    assert (s.timeout_s, s.retries, s.base_url) == (90.0, 2, None)
    assert s.prices == Prices(3.0, 15.0) == prices_for("anthropic:claude-x")
    assert prices_for("anthropic:other") is None


def test_default_config_path_is_under_xdg(tmp_path, clean_env):
    home = tmp_path / "xdg" / "attnforge"
    home.mkdir(parents=True)
    (home / "llm.toml").write_text('[openai]\nbase_url = "http://127.0.0.1:8000/v1"\n')
    s = resolve("openai:qwen")
    assert s.base_url == "http://127.0.0.1:8000/v1" and s.api_key == LOCAL_SERVER_KEY  # a local server needs no key


def test_missing_key_is_explained(clean_env):
    with pytest.raises(LLMError, match="no API key for anthropic") as info:
        resolve("anthropic:claude-x")
    assert "ANTHROPIC_API_KEY" in info.value.hint and "ATTNFORGE_LLM_API_KEY" in info.value.hint


@pytest.mark.parametrize("text, message", [
    ("[openai\n", "not valid TOML"),
    ("[gemini]\nx = 1\n", "unknown table \\[gemini\\]"),
    ("[openai]\nbase = 'x'\n", "unknown key 'base' in \\[openai\\]"),
    ("[openai]\ntimeout_s = 'long'\n", "is not a number"),
    ("[openai]\nretries = -1\n", "retries must be an integer >= 0"),
    ("[file]\ntimeout_s = 0\n", "timeout_s must be > 0"),
    ("[prices]\n'openai:m' = { input = 1 }\n", "a price is"),
])
def test_bad_config_is_refused_with_its_place(tmp_path, text, message):
    config = write_config(tmp_path, text)
    with pytest.raises(LLMError, match=message) as info:
        load_config(config)
    assert str(config) in str(info.value.where)


def test_named_config_must_exist(tmp_path):
    with pytest.raises(LLMError, match="no LLM config file"):
        load_config(tmp_path / "nope.toml")


def test_readable_config_with_a_key_warns(tmp_path):
    config = write_config(tmp_path, '[openai]\napi_key = "sk-plain-in-file-0000"\n')
    config.chmod(0o644)
    with pytest.warns(UserWarning, match="chmod 600"):
        load_config(config)


def test_bad_base_url_and_arguments(clean_env):
    with pytest.raises(LLMError, match="is not http:// or https://"):
        resolve("openai:m", base_url="localhost:8000")
    with pytest.raises(LLMError, match="timeout 0 is not"):
        open_client("openai:m", base_url="http://127.0.0.1:1/v1", timeout_s=0)
    with pytest.raises(LLMError, match="retries -1 is not"):
        open_client("openai:m", base_url="http://127.0.0.1:1/v1", retries=-1)


def test_missing_sdk_names_the_pip_command(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_openai(name, *args, **kwargs):
        if name == "openai" or name.startswith("openai."):
            raise ImportError("No module named 'openai'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_openai)
    import importlib
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: no_openai(name))
    with pytest.raises(LLMError, match="the openai package is not installed") as info:
        open_client("openai:m", base_url="http://127.0.0.1:1/v1")
    assert 'pip install "attnforge[llm]"' in info.value.hint


def test_importing_attnforge_does_not_import_the_sdks():
    import subprocess
    import sys
    code = "import attnforge, attnforge.llm, sys; print('openai' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ).stdout
    assert out.split() == ["False", "False"]


def test_budget_from_config_and_arguments(tmp_path):
    from attnforge.llm.config import budget_for
    config = write_config(tmp_path, '[budget]\nmax_rounds = 7\nmax_total_tokens = 5000\nmax_cost = 0.5\n'
                                    '[prices]\n"openai:m" = { input = 1.0, output = 2.0 }\n')
    b = budget_for("openai:m", config=config)
    assert (b.max_rounds, b.max_total_tokens, b.max_cost, b.prices) == (7, 5000, 0.5, Prices(1.0, 2.0))
    b = budget_for("openai:m", max_rounds=3, config=config)
    assert b.max_rounds == 3 and b.max_total_tokens == 5000
    with pytest.raises(LLMError, match="max_cost needs prices"):
        budget_for("openai:other", config=config)
