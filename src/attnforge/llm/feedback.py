"""The stage-1 loop's feedback: checker findings, syntax errors and numerical failures as a
precise message a model can act on (where, which code, what, what to change; which shape and how
far off)."""

from __future__ import annotations

from typing import Iterable, Sequence

from ..errors import Position, TLSyntaxError
from ..tl.findings import CheckResult, Finding
from ..tl.harness import RunReport, format_tolerance

_ORDER = {"error": 0, "warning": 1, "info": 2}


def _source_line(source: str | None, line: int) -> str | None:
    if source is None:
        return None
    lines = source.split("\n")
    return lines[line - 1] if 1 <= line <= len(lines) else None


def _quote(source: str | None, line: int, col: int) -> list[str]:
    text = _source_line(source, line)
    if text is None:
        return []
    return [f"    {line:4d} | {text}", "         | " + " " * max(0, col - 1) + "^"]


def format_finding(f: Finding, source: str | None = None) -> str:
    """One finding: ``line L, column C: CODE (severity): message`` with the line quoted and the hint."""
    return "\n".join([f"- line {f.line}, column {f.col}: {f.code} ({f.severity}): {f.message}",
                      *_quote(source, f.line, f.col), f"  hint: {f.hint}"])


MAX_FINDINGS = 20  # a long cascade from one mistake says nothing more after the first few


def format_findings(result: CheckResult | Sequence[Finding], source: str | None = None, *,
                    include_warnings: bool = True, limit: int = MAX_FINDINGS) -> str:
    """Errors first, then warnings (info findings are left out: nothing to fix); at most ``limit``."""
    findings = result.findings if isinstance(result, CheckResult) else list(result)
    keep = [f for f in findings if f.severity == "error" or (include_warnings and f.severity == "warning")]
    keep.sort(key=lambda f: (_ORDER.get(f.severity, 3), f.line, f.col, f.code))
    errors = sum(f.severity == "error" for f in keep)
    warnings = len(keep) - errors
    head = f"The TL checker reports {errors} error(s) and {warnings} warning(s):"
    if not keep:
        return "The TL checker reports no errors or warnings."
    shown = [format_finding(f, source) for f in keep[:limit]]
    if len(keep) > limit:
        shown.append(f"- ... and {len(keep) - limit} more")
    if errors > 1:
        shown.append("Later errors often follow from an earlier one (a missing Allocate makes every use an error): fix them in order.")
    return "\n".join([head, *shown])


def format_syntax_error(err: TLSyntaxError, source: str | None = None) -> str:
    """A parse failure: where, what, what was expected."""
    where = err.where if isinstance(err.where, Position) else None
    lines = [f"The TL program does not parse: {err.message}" + (f" at line {where.line}, column {where.col}" if where else "")]
    if where is not None:
        lines += _quote(source, where.line, where.col)
    if err.hint:
        lines.append(f"  hint: {err.hint}")
    return "\n".join(lines)


def format_runs(reports: Iterable[RunReport]) -> str:
    """Numerical results against the float64 reference: each failing shape with how far off it
    is, then the shapes that pass (the difference between the two often locates the bug)."""
    reports = list(reports)
    failed = [r for r in reports if not r.passed]
    passed = [r for r in reports if r.passed]
    if not failed:
        return f"All {len(reports)} shape(s) match the float64 reference."
    lines = [f"The program runs but its results differ from the float64 reference on {len(failed)} of {len(reports)} shape(s):"]
    for r in failed:
        parts = []
        if not r.err_o <= r.tolerance:
            parts.append(f"O is off by {_rel(r.err_o, r.tolerance)}")
        if not r.err_lse <= r.tolerance_lse:
            parts.append(f"the log-sum-exp is off by {_rel(r.err_lse, r.tolerance_lse)}")
        lines.append(f"- {r.shape} ({r.dtype or 'exact float64'}; {r.programs} program instances, {r.loop_trips} key tiles): "
                     + "; ".join(parts))
    if passed:
        lines.append("These shapes pass: " + "; ".join(str(r.shape) for r in passed))
    lines.append("Errors are relative: ||O - ref|| / ||ref|| for O, max |LSE - ref| / (1 + |ref|) for the log-sum-exp.")
    return "\n".join(lines)


def _rel(err: float, tol: float) -> str:
    if err != err:  # NaN: something read uninitialised or divided 0 by 0
        return f"NaN (tolerance {format_tolerance(tol)}): some values are not numbers"
    if err == float("inf"):
        return f"inf (tolerance {format_tolerance(tol)})"
    return f"{err:.2e} against a tolerance of {format_tolerance(tol)} ({err / tol:.3g}x over)" if tol > 0 else f"{err:.2e}"


def tl_feedback(source: str, *, check: CheckResult | None = None, syntax_error: TLSyntaxError | None = None,
                runs: Iterable[RunReport] = ()) -> str:
    """Everything known about one TL answer, in the order a fix should address it."""
    parts = []
    if syntax_error is not None:
        parts.append(format_syntax_error(syntax_error, source))
    if check is not None and (check.findings and any(f.severity in ("error", "warning") for f in check.findings)):
        parts.append(format_findings(check, source))
    runs = list(runs)
    if runs:
        parts.append(format_runs(runs))
    return "\n\n".join(parts) if parts else "No problems were found."
