"""Where a client's settings come from: arguments, then environment, then a config file.

Order, first found wins, for each setting separately:

* key:      argument; ATTNFORGE_LLM_API_KEY; OPENAI_API_KEY / ANTHROPIC_API_KEY; the config
            file's ``api_key_env`` (the name of a variable holding the key), then ``api_key``.
* base URL: argument; ATTNFORGE_LLM_BASE_URL; OPENAI_BASE_URL / ANTHROPIC_BASE_URL; the config
            file's ``base_url``; else the SDK's default (the provider's hosted API).

The config file is ``$ATTNFORGE_LLM_CONFIG``, else ``$XDG_CONFIG_HOME/attnforge/llm.toml``
(``~/.config/attnforge/llm.toml``); docs/LLM.md shows its format. Keys are registered with
``redact`` as soon as they are read, and ``Settings`` never prints one.
"""

from __future__ import annotations

import os
import stat
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import parse_qs, urlsplit

from . import redact
from .budget import Budget, Prices
from .errors import LLMError

PROVIDERS = ("openai", "anthropic", "file", "replay")
_ENV = {"openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"), "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
NEUTRAL_KEY, NEUTRAL_URL = "ATTNFORGE_LLM_API_KEY", "ATTNFORGE_LLM_BASE_URL"
CONFIG_ENV = "ATTNFORGE_LLM_CONFIG"
# vLLM, llama.cpp, Ollama and LM Studio ignore the key, but the openai SDK insists on one.
LOCAL_SERVER_KEY = "EMPTY"

DEFAULT_TIMEOUT_S = 600.0  # a long answer from a large model takes minutes
DEFAULT_RETRIES = 4
DEFAULT_MAX_WAIT_S = 120.0

_PROVIDER_KEYS = {"base_url", "api_key", "api_key_env", "timeout_s", "retries", "max_wait_s"}
_FILE_KEYS = {"timeout_s", "settle_s"}
_BUDGET_KEYS = {"max_rounds", "max_total_tokens", "max_cost"}


def parse_spec(spec: str) -> tuple[str, str]:
    """``PROVIDER:REST`` -> (provider, rest). The model may itself hold colons (``llama3.1:70b``)."""
    if not isinstance(spec, str) or ":" not in spec:
        raise LLMError(f"LLM spec {spec!r} is not PROVIDER:MODEL", where="--llm",
                       hint="e.g. openai:gpt-4o, anthropic:claude-sonnet-4-5, file:prompts/, replay:run/transcript.jsonl")
    provider, rest = spec.split(":", 1)
    provider = provider.strip().lower()
    if provider not in PROVIDERS:
        raise LLMError(f"unknown LLM provider {provider!r}", where="--llm", hint="providers: " + ", ".join(PROVIDERS))
    if not rest.strip():
        what, name = {"file": ("directory", "DIR"), "replay": ("transcript path", "TRANSCRIPT")}.get(provider, ("model name", "MODEL"))
        raise LLMError(f"LLM spec {spec!r} has no {what} after the colon", where="--llm", hint=f"write {provider}:{name}")
    return provider, rest.strip()


def config_path(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """The config file to read and whether it must exist (it must when named explicitly)."""
    if explicit is not None:
        return Path(explicit).expanduser(), True
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).expanduser(), True
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "attnforge" / "llm.toml", False


def load_config(path: str | os.PathLike[str] | None = None) -> tuple[dict[str, Any], Path | None]:
    """The config file's tables, checked (empty when the default file does not exist)."""
    file, required = config_path(path)
    if not file.is_file():
        if required:
            raise LLMError(f"no LLM config file at {file}", where=str(file),
                           hint=f"create it (docs/LLM.md shows the format) or unset {CONFIG_ENV}")
        return {}, None
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise LLMError(f"LLM config is not valid TOML: {redact.scrub(str(err))}", where=str(file),
                       hint="docs/LLM.md shows the format") from None
    _validate(data, file)
    for name in ("openai", "anthropic"):
        redact.remember(data.get(name, {}).get("api_key"))
    if any("api_key" in data.get(p, {}) for p in ("openai", "anthropic")) and file.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.warn(f"{file} holds an API key and others can read it: chmod 600 {file}", stacklevel=2)
    return data, file


def _validate(data: Mapping[str, Any], file: Path) -> None:
    def bad(where: str, msg: str, hint: str) -> LLMError:
        return LLMError(msg, where=f"{file}: {where}", hint=hint)

    known = {"openai": _PROVIDER_KEYS, "anthropic": _PROVIDER_KEYS, "file": _FILE_KEYS, "budget": _BUDGET_KEYS, "prices": None}
    for table, value in data.items():
        if table not in known:
            raise bad(f"[{table}]", f"unknown table [{table}]", "tables: " + ", ".join(f"[{t}]" for t in known))
        if not isinstance(value, dict):
            raise bad(table, f"{table} must be a table", f"write [{table}] and its keys below it")
        if table == "prices":
            for spec, price in value.items():
                if not isinstance(price, dict) or set(price) != {"input", "output"}:
                    raise bad(f"prices.{spec!r}", "a price is { input = N, output = N }", "US dollars per million tokens")
                _number(price["input"], f"prices.{spec!r}.input", file)
                _number(price["output"], f"prices.{spec!r}.output", file)
            continue
        for key, item in value.items():
            if key not in known[table]:
                raise bad(f"{table}.{key}", f"unknown key {key!r} in [{table}]", "keys: " + ", ".join(sorted(known[table])))
            if key in ("base_url", "api_key", "api_key_env") and not isinstance(item, str):
                raise bad(f"{table}.{key}", f"{key} must be a string", "quote it")
            if key in ("timeout_s", "max_wait_s", "settle_s", "max_cost"):
                if _number(item, f"{table}.{key}", file) == 0 and key in ("timeout_s", "max_cost"):
                    raise bad(f"{table}.{key}", f"{key} must be > 0", "e.g. 600 seconds" if key == "timeout_s" else "US dollars")
            if key in ("retries", "max_rounds", "max_total_tokens") and (isinstance(item, bool) or not isinstance(item, int) or item < 0):
                raise bad(f"{table}.{key}", f"{key} must be an integer >= 0", "e.g. 4")


def _number(value: object, where: str, file: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise LLMError(f"{value!r} is not a number >= 0", where=f"{file}: {where}", hint="e.g. 3.0")
    return float(value)


@dataclass(frozen=True, repr=False)
class Settings:
    """A provider's resolved settings. ``api_key`` is hidden from repr; ``key_source`` says
    where it came from (a variable or file name, never the key)."""

    provider: str
    model: str
    base_url: str | None
    api_key: str | None = field(repr=False)
    key_source: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    prices: Prices | None = None

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.model}"

    def __repr__(self) -> str:  # no key, and no credentials a base URL may carry
        return (f"Settings({self.spec!r}, base_url={redact.display_url(self.base_url) or None!r}, "
                f"key_source={self.key_source!r}, timeout_s={self.timeout_s}, retries={self.retries})")


def resolve(spec: str, *, api_key: str | None = None, base_url: str | None = None, timeout_s: float | None = None,
            retries: int | None = None, prices: Prices | None = None,
            config: str | os.PathLike[str] | None = None) -> Settings:
    """Settings for ``openai:MODEL`` or ``anthropic:MODEL`` from arguments, environment and config."""
    provider, model = parse_spec(spec)
    if provider not in _ENV:
        raise LLMError(f"{provider}: has no network settings", where="--llm", hint="only openai: and anthropic: do")
    data, file = load_config(config)
    table = data.get(provider, {})
    key_env, url_env = _ENV[provider]

    key, source = _first(("argument", api_key), (NEUTRAL_KEY, os.environ.get(NEUTRAL_KEY)), (key_env, os.environ.get(key_env)))
    if key is None and "api_key_env" in table:
        name = table["api_key_env"]
        if not os.environ.get(name):
            raise LLMError(f"the config names {name} for the {provider} key, but it is not set", where=f"{file}: {provider}.api_key_env",
                           hint=f"export {name}=... or change api_key_env")
        key, source = os.environ[name], name
    if key is None and table.get("api_key"):
        key, source = table["api_key"], f"{file} [{provider}] api_key"
    url = _first(("", base_url), ("", os.environ.get(NEUTRAL_URL)), ("", os.environ.get(url_env)), ("", table.get("base_url")))[0]
    if url is not None and not url.startswith(("http://", "https://")):
        raise LLMError(f"base URL {redact.display_url(url) or redact.MASK!r} is not http:// or https://", where="base URL",
                       hint="e.g. http://127.0.0.1:8000/v1 for a local vLLM server")
    if url is not None:  # a password or a query in the URL is a credential too
        parts = urlsplit(url)
        redact.remember(parts.password)
        for values in parse_qs(parts.query).values():
            for value in values:
                redact.remember(value)
    if key is None and provider == "openai" and url is not None:
        key, source = LOCAL_SERVER_KEY, "none (a local server needs none)"
    if key is None:
        raise LLMError(f"no API key for {provider}", where=f"--llm {spec}",
                       hint=f"export {key_env} (or {NEUTRAL_KEY}), or put api_key_env in {config_path(config)[0]}; "
                            "for a local server give its base URL instead")
    redact.remember(key)

    price = prices
    if price is None and spec in data.get("prices", {}):
        entry = data["prices"][spec]
        price = Prices(float(entry["input"]), float(entry["output"]))
    return Settings(provider=provider, model=model, base_url=url.rstrip("/") if url else None, api_key=key, key_source=source,
                    timeout_s=float(timeout_s if timeout_s is not None else table.get("timeout_s", DEFAULT_TIMEOUT_S)),
                    retries=int(retries if retries is not None else table.get("retries", DEFAULT_RETRIES)),
                    max_wait_s=float(table.get("max_wait_s", DEFAULT_MAX_WAIT_S)), prices=price)


def _first(*pairs: tuple[str, str | None]) -> tuple[str | None, str]:
    for source, value in pairs:
        if value:
            return value, source
    return None, ""


def prices_for(spec: str, config: str | os.PathLike[str] | None = None) -> Prices | None:
    """The config file's prices for ``spec`` (``[prices]`` table), or None."""
    data, _ = load_config(config)
    entry = data.get("prices", {}).get(spec)
    return None if entry is None else Prices(float(entry["input"]), float(entry["output"]))


def file_settings(config: str | os.PathLike[str] | None = None) -> dict[str, float]:
    """The config file's ``[file]`` table (timeout_s, settle_s) as given."""
    data, _ = load_config(config)
    return {k: float(v) for k, v in data.get("file", {}).items()}


def budget_for(spec: str, *, max_rounds: int | None = None, max_total_tokens: int | None = None,
               max_cost: float | None = None, prices: Prices | None = None,
               config: str | os.PathLike[str] | None = None) -> Budget:
    """A Budget for ``spec``: each cap from its argument, else the config's ``[budget]``; prices
    from the argument, else ``[prices]`` for this spec."""
    data, _ = load_config(config)
    table = data.get("budget", {})
    cost = max_cost if max_cost is not None else table.get("max_cost")
    return Budget(max_rounds=max_rounds if max_rounds is not None else table.get("max_rounds"),
                  max_total_tokens=max_total_tokens if max_total_tokens is not None else table.get("max_total_tokens"),
                  max_cost=float(cost) if cost is not None else None,
                  prices=prices if prices is not None else prices_for(spec, config))
