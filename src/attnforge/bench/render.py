"""A bench result written out: ``bench.json`` (everything), ``bench.md`` (the tables) and
``bench.png`` (each provider's ratio to the baseline per row; matplotlib, imported only here and
only when installed: without it the plot is skipped with a note).

The result is a dict: ``environment``, ``command``, ``argv``, ``timing``, ``conventions``,
``baseline``, ``providers`` ({name: description}), ``rows`` (``runner`` records, ratios added),
``summary`` ({baseline: ``summary.summarize``}).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .summary import GROUPS

JSON_NAME, MD_NAME, PNG_NAME = "bench.json", "bench.md", "bench.png"


def _plain(value: Any) -> Any:
    """JSON without NaN or Infinity (not JSON): such floats become the strings "nan", "inf", "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json(result: dict) -> str:
    return json.dumps(_plain(result), indent=1, allow_nan=False) + "\n"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _metric(row: dict, result: dict) -> str:
    if row["metric"] == "tflops":
        return f"{result['tflops']:.0f}"
    return f"{result['gbps']:.0f} GB/s"


def cell(row: dict, result: dict | None, baseline: str) -> str:
    """One table cell: the provider's figure with its ratio, or n/a / FAILED."""
    if not result:
        return "-"
    status = result.get("status")
    if status in ("n/a", "skipped"):
        return status
    if not isinstance(result.get("ms"), (int, float)):
        return "FAILED" if status == "failed" else "-"
    ratio = result.get("ratios", {}).get(baseline)
    text = _metric(row, result) + (f" ({ratio:.2f}x)" if ratio is not None else "")
    return ("FAILED " + text) if status == "failed" else text


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def summary_table(result: dict, baseline: str) -> list[str]:
    summary = result.get("summary", {}).get(baseline, {})
    head = ["provider", *(f"{g} geomean" for g in GROUPS), "all rows", "worst row", "rows", "n/a", "failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, entry in summary.items():
        every = entry.get("all")
        worst = f"{every['worst']['row']} {every['worst']['ratio']:.2f}x" if every else "-"
        cells = [name, *(_ratio(entry.get(g, {}).get("geomean")) for g in GROUPS), _ratio(every and every["geomean"]), worst,
                 str(every["rows"] if every else 0), str(entry.get("n/a", 0)), str(len(entry.get("failed", [])))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(result: dict) -> str:
    env = result.get("environment", {})
    baseline = result.get("baseline", "sdpa-cudnn")
    providers = list(result.get("providers", {}))
    timing = result.get("timing", {})
    conventions = result.get("conventions", {})
    out = [f"# attnforge bench: {env.get('gpu', 'unknown GPU')}, {env.get('date', '')}", ""]
    out += [f"- **Command:** `{result.get('command', '')}`",
            "- **Versions:** " + ", ".join(f"{k} {env.get(k)}" for k in ("torch", "triton", "cuda", "cudnn", "driver", "attnforge", "commit") if env.get(k) is not None),
            f"- **GPU:** {env.get('gpu', '?')} ({env.get('capability', '?')}, {env.get('sms', '?')} SMs)",
            f"- **Timing:** {timing.get('method', '')}",
            f"- **Verification:** {result.get('verification', '')}"]
    out += [f"- **{k.capitalize()}:** {v}" for k, v in conventions.items()]
    out += ["", f"## Summary: ratio to {baseline}", "", *summary_table(result, baseline)]
    for other in result.get("summary", {}):
        if other != baseline:
            out += ["", f"### Ratio to {other}", "", *summary_table(result, other)]
    head = ["row", "dtype", "D", "causal", "B x Hq/Hkv x Sq x Sk", *providers]
    out += ["", f"## Rows (TFLOP/s or GB/s, ratio to {baseline})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in result.get("rows", []):
        cells = [row["name"], row["dtype"], str(row["head_dim"]), "yes" if row["causal"] else "no", row["shape"] if "shape" in row
                 else f"{row['batch']} x {row['heads']}/{row['kv_heads']} x {row['seqlen_q']} x {row['seqlen_k']}"]
        cells += [cell(row, row.get("results", {}).get(p), baseline) for p in providers]
        out.append("| " + " | ".join(cells) + " |")
    checked = [(row["name"], p, r["check"]) for row in result.get("rows", []) for p, r in row.get("results", {}).items()
               if r.get("check") and p.startswith("attnforge")]
    if checked:
        out += ["", "## Verification of the attnforge rows", "", "| row | provider | result | err(O) | worst row / bound |", "|---|---|---|---|---|"]
        for name, p, c in checked:
            verdict = "pass" if c.get("passed") else "FAIL: " + str(c.get("problem", ""))
            ratio = c.get("o_ratio")
            out.append(f"| {name} | {p} | {verdict} | {c.get('err_o', float('nan')):.2e} | "
                       + (f"{ratio:.2f} ({c.get('worst_row', '')})" if isinstance(ratio, float) and math.isfinite(ratio) else str(ratio)) + " |")
    reasons: dict[tuple[str, str], list[str]] = {}
    for row in result.get("rows", []):
        for p, r in row.get("results", {}).items():
            if r.get("status") in ("n/a", "skipped", "failed"):
                reasons.setdefault((p, r.get("reason", "")), []).append(row["name"])
    if reasons:
        out += ["", "## n/a, skipped and failed", ""]
        for (p, why), names in reasons.items():
            out.append(f"- **{p}** on {len(names)} row(s) ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''}): {why}")
    return "\n".join(out) + "\n"


def plot(result: dict, path: Path) -> str | None:
    """Write the ratio plot to ``path``; returns None, or a note saying why there is no plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no PNG: matplotlib is not installed (pip install 'attnforge[bench]')"
    baseline = result.get("baseline", "sdpa-cudnn")
    rows = result.get("rows", [])
    providers = [p for p in result.get("providers", {}) if p != baseline]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * len(rows) + 3), 6.0))
    markers = "os^Dv<>P*X"
    for i, p in enumerate(providers):
        xs, ys, bad_x, bad_y = [], [], [], []
        for x, row in enumerate(rows):
            r = row.get("results", {}).get(p, {})
            ratio = r.get("ratios", {}).get(baseline)
            if ratio is None:
                continue
            (bad_x if r.get("status") == "failed" else xs).append(x)
            (bad_y if r.get("status") == "failed" else ys).append(ratio)
        line = ax.plot(xs, ys, marker=markers[i % len(markers)], linestyle="none", label=p)[0]
        if bad_x:
            ax.plot(bad_x, bad_y, marker="x", color=line.get_color(), linestyle="none", markersize=10, label=f"{p} (failed check)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([row["name"] for row in rows], rotation=90, fontsize=7)
    ax.set_ylabel(f"speed relative to {baseline} (its time / provider's time)")
    env = result.get("environment", {})
    ax.set_title(f"attnforge bench, {env.get('gpu', '')} {str(env.get('date', ''))[:10]}: ratio to {baseline}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_all(result: dict, out_dir: Path, *, png: bool = True) -> tuple[list[Path], list[str]]:
    """Write JSON, Markdown and (when ``png``) the plot; returns the paths written and notes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written, notes = [], []
    write_atomic(out_dir / JSON_NAME, to_json(result))
    written.append(out_dir / JSON_NAME)
    write_atomic(out_dir / MD_NAME, markdown(result))
    written.append(out_dir / MD_NAME)
    if png:
        note = plot(result, out_dir / PNG_NAME)
        if note:
            notes.append(note)
        else:
            written.append(out_dir / PNG_NAME)
    return written, notes
