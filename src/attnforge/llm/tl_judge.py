"""One TL answer from a model, judged: parsed, checked for the target (as a sketch, or as a full
program), and, for a full program, judged against the spec (its claims TL601-606, then its
numbers exactly in float64 on small shapes). The verdict carries the feedback a model gets back
(feedback.py's formats: line, code, message, hint; the failing shape, its worst rows and how far
off) and the kind of failure for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import AttnforgeError, TLSyntaxError
from ..judge import JudgeError, claim_findings, interpret_against_spec, interpret_shapes
from ..spec import AttentionSpec
from ..targets import Target
from ..tl import nodes as n
from ..tl.checker import check
from ..tl.findings import CheckResult
from ..tl.harness import RunReport
from ..tl.parser import parse
from .feedback import format_findings, format_runs, format_syntax_error, tl_feedback

FILE = "kernel.tl"


@dataclass
class TLVerdict:
    """``ok``: the program may go on (a clean sketch, or a full program that computes the spec).
    ``kind``: what failed ("syntax", "check", "claims", "numbers", "tl-runtime"), None when ok.
    ``codes``: the finding codes reported (TL1xx-TL6xx). ``feedback``: the text for the model."""

    ok: bool
    kind: str | None
    feedback: str
    codes: list[str] = field(default_factory=list)
    program: n.Program | None = None
    open_params: list[str] = field(default_factory=list)
    params: dict[str, int] = field(default_factory=dict)
    runs: list[RunReport] = field(default_factory=list)


def _params(program: n.Program) -> dict[str, int]:
    return {p.name: p.value for k in program.kernels for p in k.params if p.value is not None}


def _codes(result: CheckResult) -> list[str]:
    return [f.code for f in result.findings if f.severity in ("error", "warning")]


def judge_sketch(source: str, spec: AttentionSpec, target: Target) -> TLVerdict:
    """A sketch: it must parse and check with its tuning parameters open (TL106 is info then);
    its claims must already match the spec (a missing mask is cheaper to fix now)."""
    try:
        program = parse(source, file=FILE)
    except TLSyntaxError as err:
        return TLVerdict(False, "syntax", format_syntax_error(err, source), ["syntax"])
    result = check(program, target, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, sketch=True, file=FILE)
    if not result.ok:
        return TLVerdict(False, "check", tl_feedback(source, check=result), _codes(result), program, result.open_params)
    claims = claim_findings(program, spec)
    if claims:
        return TLVerdict(False, "claims", _claims_text(claims, source), [f.code for f in claims], program, result.open_params)
    return TLVerdict(True, None, "The sketch parses and checks.", _codes(result), program, result.open_params, _params(program))


def judge_program(source: str, spec: AttentionSpec, target: Target) -> TLVerdict:
    """A full program: parse, check (no open parameter), claims against the spec, then numbers."""
    try:
        program = parse(source, file=FILE)
    except TLSyntaxError as err:
        return TLVerdict(False, "syntax", format_syntax_error(err, source), ["syntax"])
    result = check(program, target, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file=FILE)
    if not result.ok:
        return TLVerdict(False, "check", tl_feedback(source, check=result), _codes(result), program, result.open_params)
    params = _params(program)
    try:
        runs = interpret_against_spec(program, spec, interpret_shapes(spec, params, program), file=FILE)
    except JudgeError as err:
        if err.findings:
            return TLVerdict(False, "claims", _claims_text(err.findings, source), [f.code for f in err.findings], program, [], params)
        return TLVerdict(False, "numbers", _numbers_text(err.reports), ["numbers"], program, [], params, list(err.reports))
    except AttnforgeError as err:  # the interpreter met something it cannot execute (an index out of range, ...)
        return TLVerdict(False, "tl-runtime", f"The TL interpreter could not run the program: {err.render()}", ["tl-runtime"],
                         program, [], params)
    warnings = [f for f in result.findings if f.severity == "warning"]
    text = "The program checks and matches the spec's float64 reference." + (
        "\n" + format_findings(warnings, source) if warnings else "")
    return TLVerdict(True, None, text, _codes(result), program, [], params, runs)


def _claims_text(findings: list, source: str) -> str:
    return ("The program does not compute what the request asks for (its `computes` line and statements, "
            "checked against the spec):\n" + format_findings(findings, source).split("\n", 1)[1])


def _numbers_text(reports: list[RunReport]) -> str:
    """How far off the program is, shape by shape, with the rows farthest from the reference."""
    lines = [format_runs(reports)]
    worst = [r for r in reports if not r.passed and r.worst]
    if worst:
        lines.append("Where it is worst (batch b, query head h, query row):")
        lines += [f"- {r.shape}: {r.worst}" for r in worst]
    lines.append("Rows count from 0; Sq is the number of query rows, Sk the number of keys. Compare the loop bounds, "
                 "masks and modifiers with the semantics above: a tile skipped or read twice, or a key kept that "
                 "the mask should drop, shows as rows off at the block edges.")
    return "\n".join(lines)
