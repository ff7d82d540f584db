"""The "llm" section of a kernel's report.json (and report.md), and the comparison of --mode tl
with --mode direct. Nothing here holds a key: the client is named by its spec, the base URL
without credentials or query (redact.display_url)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from . import prompts, redact
from .config import parse_spec
from .rounds import Round, failures_by_kind, totals

TRANSCRIPT = "llm/transcript.jsonl"


def llm_section(*, client: str, base_url: str | None, options: dict[str, Any], rounds: Sequence[Round], budget: dict[str, Any],
                ok: bool, error: str | None, optimize: dict | None = None, speed_ms: float | None = None,
                timings_ms: Sequence[float] = ()) -> dict[str, Any]:
    """What report.json records of an LLM run: who answered, every round, totals, cost, failures by kind."""
    provider, model = parse_spec(client)
    used = sorted({r.prompt for r in rounds})
    return {
        "provider": provider,
        "model": model,
        "client": client,
        "base_url": redact.display_url(base_url) or None,
        "models_reported": sorted({r.model for r in rounds if r.model}),
        "options": dict(options),
        "ok": ok,
        "error": error,
        "rounds": [r.to_dict() for r in rounds],
        "totals": totals(rounds),
        "tokens_estimated": bool(budget.get("estimated")),
        "cost_usd": budget.get("cost_usd"),
        "failures_by_kind": failures_by_kind(rounds),
        "prompt_versions": {name: prompts.prompt_version(name) for name in used},
        "transcript": TRANSCRIPT,
        "optimize": optimize,
        "speed_ms": speed_ms,
        "timings_ms": list(timings_ms),  # every kernel time measured, in order: a replay uses them instead of a GPU
    }


def add_to_reports(directory: Path, section: dict[str, Any]) -> None:
    """Put ``section`` into ``directory``'s report.json as "llm" and append it to report.md."""
    path = directory / "report.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data["llm"] = section
    path.write_text(redact.scrub(json.dumps(data, indent=2, default=str)) + "\n")
    md = directory / "report.md"
    text = md.read_text() if md.is_file() else ""
    marker = "\n## LLM\n"
    if marker in text:
        text = text[:text.index(marker)]
    md.write_text(redact.scrub(text.rstrip("\n") + "\n" + markdown(section)))


def markdown(s: dict[str, Any]) -> str:
    t = s["totals"]
    cost = f", ${s['cost_usd']:.4f}" if s.get("cost_usd") is not None else ""
    est = " (estimated from text length)" if s["tokens_estimated"] else ""
    lines = ["", "## LLM", "",
             f"- client: {s['client']}" + (f" at {s['base_url']}" if s.get("base_url") else "")
             + (f"; the server reported {', '.join(s['models_reported'])}" if s["models_reported"] else ""),
             f"- options: " + ", ".join(f"{k}={v}" for k, v in s["options"].items()),
             f"- result: {'accepted' if s['ok'] else 'FAILED: ' + str(s['error'])}",
             f"- {t['rounds']} round(s), {t['input_tokens']} input + {t['output_tokens']} output tokens{est}{cost}; "
             f"model {t['llm_seconds']:.1f} s, gates {t['gate_seconds']:.1f} s",
             "- failures by kind: " + (", ".join(f"{k} {v}" for k, v in s["failures_by_kind"].items()) or "none"),
             f"- transcript: {s['transcript']}", "",
             "| round | stage | prompt | tokens in/out | seconds | result |", "|---|---|---|---|---|---|"]
    for r in s["rounds"]:
        result = "ok" if r["ok"] else f"{r['failure']}" + (f" ({', '.join(dict.fromkeys(r['codes']))})" if r["codes"] else "")
        lines.append(f"| {r['number']} | {r['stage']} | {r['prompt']} | {r['input_tokens']}/{r['output_tokens']} | "
                     f"{r['seconds']:.1f} + {r['gate_seconds']:.1f} | {result} |")
    if s.get("optimize"):
        o = s["optimize"]
        lines += ["", f"Optimize: start {o['start_ms']:.4g} ms, best {o['best_ms']:.4g} ms ({o['best']})"]
        lines += [f"- round {x['round']}: {x['variant']}: {x['result']}" for x in o["tried"]]
    return "\n".join(lines) + "\n"


def comparison(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """--mode both: the two runs side by side (the paper's ablation: TL first, or the kernel directly)."""
    return {"modes": list(rows)}


def comparison_markdown(data: dict[str, Any]) -> str:
    lines = ["# attnforge --llm: --mode tl against --mode direct", "",
             "| mode | result | rounds | failures by kind | tokens in/out | model s | time (ms) |", "|---|---|---|---|---|---|---|"]
    for m in data["modes"]:
        fails = ", ".join(f"{k} {v}" for k, v in m["failures_by_kind"].items()) or "none"
        speed = f"{m['speed_ms']:.4g}" if m.get("speed_ms") else (m.get("speed_note") or "-")
        lines.append(f"| {m['mode']} | {m['status']} | {m['rounds']} | {fails} | {m['input_tokens']}/{m['output_tokens']} | "
                     f"{m['llm_seconds']:.1f} | {speed} |")
    return "\n".join(lines) + "\n"
