"""Ratios to a baseline per row, and per provider the geometric mean and the worst row.

A row's ratio for a provider is the baseline's time over the provider's (> 1: faster than the
baseline). Only rows where both ran and both passed their check count; a provider's failed rows
are counted apart, never averaged in.
"""

from __future__ import annotations

import math
from typing import Iterable

GROUPS = ("prefill", "decode", "decode-verify")


def geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _usable(result: dict | None) -> bool:
    return bool(result) and result.get("status") == "ok" and isinstance(result.get("ms"), (int, float)) and result["ms"] > 0


def add_ratios(rows: list[dict], baselines: Iterable[str]) -> None:
    """Set ``result["ratios"][baseline]`` on every provider result of every row (None where the
    baseline or the provider has no usable time)."""
    baselines = list(baselines)
    for row in rows:
        results = row.get("results", {})
        for result in results.values():
            ratios = result.setdefault("ratios", {})
            for base in baselines:
                b = results.get(base)
                ok = _usable(b) and isinstance(result.get("ms"), (int, float)) and result["ms"] > 0 and result.get("status") in ("ok", "failed")
                ratios[base] = b["ms"] / result["ms"] if ok else None


def summarize(rows: list[dict], providers: list[str], baseline: str) -> dict:
    """{provider: {group or "all": {"geomean", "rows", "worst": {"row", "ratio"}, "best": {...}}, "failed": [rows], "n/a": n}}"""
    out: dict = {}
    for name in providers:
        entry: dict = {"failed": [], "n/a": 0}
        per_group: dict[str, list[tuple[str, float]]] = {g: [] for g in GROUPS}
        for row in rows:
            result = row.get("results", {}).get(name)
            if not result:
                continue
            if result.get("status") == "failed":
                entry["failed"].append(row["name"])
                continue
            if result.get("status") in ("n/a", "skipped"):
                entry["n/a"] += 1
                continue
            ratio = result.get("ratios", {}).get(baseline)
            if _usable(result) and _usable(row["results"].get(baseline)) and ratio is not None:
                per_group.setdefault(row["group"], []).append((row["name"], ratio))
        every = [pair for group in per_group.values() for pair in group]
        for group, pairs in [*per_group.items(), ("all", every)]:
            if not pairs:
                continue
            worst = min(pairs, key=lambda p: p[1])
            best = max(pairs, key=lambda p: p[1])
            entry[group] = {"geomean": geomean(r for _, r in pairs), "rows": len(pairs),
                            "worst": {"row": worst[0], "ratio": worst[1]}, "best": {"row": best[0], "ratio": best[1]}}
        out[name] = entry
    return out
