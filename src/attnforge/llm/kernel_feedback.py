"""Feedback for a model-written kernel module, in the spirit of feedback.py (which speaks TL):
where the static gate refused it (line, column, reason, the line quoted), how it failed in the
sandbox (timeout, memory, crash, exception with the module's own traceback lines), which
verification cases failed and how far off, and what the compile for the target found."""

from __future__ import annotations

from .errors import LLMError, SandboxError, UnsafeCodeError
from .kernel_jobs import ModuleVerdict

MAX_DETAIL_LINES = 30
QUOTE_CHARS = 200  # of a quoted line, around the column


def _quote(source: str, line: int, col: int) -> list[str]:
    lines = source.split("\n")
    if not 1 <= line <= len(lines):
        return []
    text = lines[line - 1]
    if len(text) > QUOTE_CHARS:  # (a line of 100 KB would make every problem 100 KB of feedback)
        start = max(0, min(col - 1 - QUOTE_CHARS // 2, len(text) - QUOTE_CHARS))
        text, col = ("..." if start else "") + text[start:start + QUOTE_CHARS] + "...", col - start + (3 if start else 0)
    return [f"    {line:4d} | {text}", "         | " + " " * max(0, col - 1) + "^"]


def unsafe_text(err: UnsafeCodeError, source: str, what: str = "module") -> str:
    out = [f"The {what} were refused before they ran" if what == "kernels" else f"The {what} was refused before it ran"]
    out[0] += f" ({len(err.problems)} problem(s)); attnforge runs no {what} that:"
    for line, col, reason in err.problems[:20]:
        out.append(f"- line {line}, column {col}: {reason}")
        out += _quote(source, line, col)
    if what == "module":
        out.append(f"  hint: {err.hint}. The attention itself (scores, softmax, both products) must be computed in "
                   "@triton.jit kernels that launch() starts.")
    else:
        out.append(f"  hint: {err.hint}.")
    return "\n".join(out)


def syntax_text(err: LLMError) -> str:
    return f"The module does not parse as Python: {err.render()}"


def sandbox_text(err: SandboxError) -> str:
    what = {"timeout": "It did not finish in time", "memory": "It ran out of memory",
            "signal": "Its process was killed", "exception": "It raised an exception",
            "no-result": "Its process ended without a result"}.get(err.kind, "It failed")
    out = [f"{what} while attnforge loaded and verified it: {err.message}"]
    detail = [line for line in err.detail.strip().split("\n") if line.strip()]
    if detail:
        out.append("Its last output and traceback:")
        out += ["    " + line for line in detail[-MAX_DETAIL_LINES:]]
    if err.hint:
        out.append(f"  hint: {err.hint}")
    return "\n".join(out)


def verdict_text(verdict: ModuleVerdict) -> str:
    """Every problem of a sandboxed run, then the verification cases, failing ones first."""
    out = []
    for kind, text in verdict.problems:
        out.append(f"- {kind}: {text}")
    rec = verdict.verification
    if rec is not None and rec.cases:
        bad = [c for c in rec.cases if not c.passed]
        good = [c for c in rec.cases if c.passed]
        if bad:
            out.append(f"Verification against the float64 reference on {rec.device} ({len(bad)} of {len(rec.cases)} case(s) fail; "
                       "shape is B x Hq/Hkv x Sq x Sk and the memory layout; rows are (batch b, query head h, query row)):")
            for c in bad:
                if c.error:
                    out.append(f"- {c.shape}: the launch raised {c.error}")
                else:
                    out.append(f"- {c.shape}: err(O) {c.err_o:.3g} (bound {c.tol_o:g}), err(LSE) {c.err_lse:.3g} "
                               f"(bound {c.tol_lse:.1e}); {c.worst}")
        if good:
            out.append("These cases pass: " + "; ".join(c.shape for c in good))
    for r in verdict.compile_reports:
        out.append(f"Compiled for {r.target} ({r.ptx_target}): {r.kernel}: {r.registers} registers, {r.shared_bytes // 1024} KiB shared, "
                   f"{r.spill_bytes} B spills, instructions {', '.join(r.instructions) or 'none'}")
    out += [f"note: {n}" for n in verdict.notes]
    return "\n".join(out) if out else "No problems were found."
