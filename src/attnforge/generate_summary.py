"""The table ``attnforge generate`` prints when a run ends: the backend and plan chosen, each
kernel's compile and performance estimate, the verification, the times, the files written and
the result."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def _times(result) -> str:
    """Total wall time, each step's (summed over the plans tried), and the compiles of plans that did not fit."""
    per_step: dict[str, float] = {}
    for s in result.steps:
        per_step[s.name] = per_step.get(s.name, 0.0) + s.seconds
    text = f"total {result.total_seconds:.1f}s: " + ", ".join(f"{name} {sec:.1f}s" for name, sec in per_step.items())
    if result.rejected_compiles:
        text += f"; rejected compiles {result.rejected_seconds:.1f}s ({result.rejected_compiles} candidate(s) that did not fit {result.target.name})"
    return text


def _files(directory) -> str:
    """What is really in the kernel directory: its files, then build/'s."""
    from .report import contents

    files = contents(Path(directory)) if Path(directory).is_dir() else []
    top = [f for f in files if "/" not in f]
    nested: dict[str, list[str]] = {}
    for f in files:
        if "/" in f:
            head, _, rest = f.partition("/")
            nested.setdefault(head, []).append(rest)
    parts = top + [f"{d}/ ({', '.join(names)})" for d, names in nested.items()]
    return f"{directory}: " + (", ".join(parts) if parts else "(nothing)")


def print_summary(result, console: Console) -> None:
    """Print the summary of a finished ``generate`` run (a ``generate.GenerateResult``)."""
    from rich.table import Table
    from rich.text import Text

    from . import roofline

    # Text, not markup: a modifier such as score_mod[...] or a path with brackets is shown as it is.
    table = Table(title=Text(f"{result.spec.describe()} on {result.target.name}"), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    if result.backend_reason:
        table.add_row("backend", Text(result.backend_reason))
    if result.plan is not None:
        table.add_row("plan", f"{result.plan.kind}: " + ", ".join(f"{k}={v}" for k, v in result.plan.params.items()))
    estimates = roofline.estimates(result.spec, result.target, result.compile_reports)
    for r in result.compile_reports:
        tc = "tensor cores" if r.tensor_cores_used else ("NO tensor cores (FMA only)" if "fma-only" in r.instructions else "no GEMM")
        table.add_row(f"compile {r.kernel}", f"{r.ptx_target}: {r.registers} regs, {r.shared_bytes / 1024:.0f} KiB shared, {r.spill_bytes} B spills, {', '.join(r.instructions)}; {tc}")
        if estimates.get(r.kernel) is not None:
            table.add_row(f"{roofline.WORD} {r.kernel}", Text(estimates[r.kernel].line()))
    v = result.verification
    if v is not None:
        table.add_row("verify", f"{sum(c.passed for c in v.cases)}/{len(v.cases)} cases pass on {v.device}; max err(O) {v.max_err_o:.2e}, max err(LSE) {v.max_err_lse:.2e}")
    table.add_row("time", _times(result))
    table.add_row("files", Text(_files(result.out)))
    table.add_row("result", Text(result.status), style="bold green" if result.verified else ("bold yellow" if result.ok else "bold red"))
    console.print(table)
