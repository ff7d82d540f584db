"""Judge a TL program against the spec it must implement: first its claims, then its numbers.

A program's ``computes`` line says what it computes; it is not trusted. ``claim_findings``
compares the claims (features, data types, runtime scalars) with the spec, and
``interpret_against_spec`` runs the program exactly in float64 on small shapes and compares it
with the reference of the *spec* (``oracle.spec_reference``), never with the program's own claims.
Every path to a kernel passes through here: the planner's programs, a user's (``generate --tl``)
and, later, an LLM's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .abi import RUNTIME_SCALARS
from .errors import AttnforgeError
from .oracle import spec_reference
from .spec import AttentionSpec
from .tl import harness
from .tl import nodes as n
from .tl.findings import Finding
from .tl.parser import parse_expr
from .tl.printer import expr as show

# Window sizes the interpret step runs with: small enough to bite on its small shapes. The
# kernel reads window sizes at run time, so checking at these values checks every value.
INTERPRET_WINDOW = {"window_left": 37, "window_right": 11}
# Features a Mask statement computes, and those a ScoreMod statement computes.
MASK_FEATURES = frozenset({"causal", "window", "mask_mod"})
MODIFIER_FEATURES = frozenset({"alibi", "softcap", "score_mod"})


class JudgeError(AttnforgeError):
    """A program that does not implement its spec: ``findings`` for the claims that disagree,
    ``reports`` for the shapes it was run on."""

    def __init__(self, message: str, *, findings: list[Finding] = (), reports: list[harness.RunReport] = (), hint: str | None = None):
        self.findings = list(findings)
        self.reports = list(reports)
        super().__init__(message, where="interpret", hint=hint)


@dataclass(frozen=True)
class _Claim:
    value: object  # the alignment or window side (str), the modifier (Expr), or None for a flag
    shown: str


def expected_claims(spec: AttentionSpec) -> dict[str, _Claim]:
    """What a program for ``spec`` must claim in its ``computes`` line."""
    claims: dict[str, _Claim] = {}
    if spec.causal:
        claims["causal"] = _Claim(spec.causal_align, f"causal = {spec.causal_align}")
    if spec.windowed:
        side = "both" if spec.window_left is not None and spec.window_right is not None else ("left" if spec.window_left is not None else "right")
        claims["window"] = _Claim(side, f"window = {side}")
    if spec.alibi_slopes is not None:
        claims["alibi"] = _Claim(None, "alibi")
    if spec.softcap is not None:
        claims["softcap"] = _Claim(None, "softcap")
    for name in ("score_mod", "mask_mod"):
        text = getattr(spec, name)
        if text is not None:
            claims[name] = _Claim(parse_expr(text), f"{name} = ({text})")
    return claims


def _program_claims(program: n.Program) -> tuple[dict[str, object], n.Node]:
    """The union of the kernels' claims (a merge kernel claims nothing), normalised: causal's
    default alignment is bottom_right, a bare window is both-sided."""
    merged: dict[str, object] = {}
    where: n.Node = program.kernels[0]
    for kernel in program.kernels:
        for f in kernel.computes:
            value = f.value
            if f.name == "causal":
                value = value or "bottom_right"
            elif f.name == "window":
                value = value or "both"
            merged[f.name] = value
            where = kernel
    return merged, where


def claim_findings(program: n.Program, spec: AttentionSpec) -> list[Finding]:
    """Where the program's claims disagree with the spec: a feature the spec asks for and the
    program does not compute (TL601), one it computes that the spec does not ask for (TL602),
    one computed differently (TL603), data types (TL604), runtime scalars it does not take (TL605),
    and a claim no statement implements (TL606: a masking feature without a Mask, a score
    modifier without a ScoreMod)."""
    want = expected_claims(spec)
    have, where = _program_claims(program)
    out: list[Finding] = []

    def add(code: str, message: str, hint: str, node: n.Node = where) -> None:
        out.append(Finding(code, "error", node.line, node.col, message, hint))
    for name, claim in want.items():
        if name not in have:
            add("TL601", f"the spec asks for {claim.shown}, and no kernel claims to compute it: its mask or modifier is missing",
                f"add the {name} statement(s) and '{claim.shown}' to the computes line")
        elif claim.value is not None and have[name] != claim.value:
            got = show(have[name]) if isinstance(have[name], n.Node) else have[name]
            add("TL603", f"the spec asks for {claim.shown}; the program computes {name} = {got}", f"make the program compute {claim.shown}")
    for name in sorted(set(have) - set(want)):
        add("TL602", f"the program computes {name}, which the spec does not ask for", f"remove {name} from the program, or add it to the spec")
    for kernel in program.kernels:
        claimed = {f.name for f in kernel.computes}
        statements = {type(st).__name__ for st in n.walk(kernel.body)}
        for names, statement in ((MASK_FEATURES, "Mask"), (MODIFIER_FEATURES, "ScoreMod")):
            needs = sorted(claimed & names)
            if needs and statement not in statements:
                add("TL606", f"{kernel.name} claims {', '.join(needs)} but has no Compute {statement} statement: nothing computes {'it' if len(needs) == 1 else 'them'}",
                    f"add 'Compute {statement} S ...' after the scores, as the library programs do", kernel)
        dtypes = kernel.dtype_map()
        for alias in ("qkv", "out"):
            if alias in dtypes and dtypes[alias] != spec.dtype:
                add("TL604", f"{kernel.name} declares {alias} = {dtypes[alias]}, the spec's tensors are {spec.dtype}", f"dtype {alias} = {spec.dtype}", kernel)
    declared = {s for k in program.kernels for s in k.scalars}
    for name in spec.runtime_scalars():
        if name not in declared and name in RUNTIME_SCALARS:
            add("TL605", f"the spec sets the runtime scalar {name} ({RUNTIME_SCALARS[name].meaning}), which no kernel takes",
                f"declare it: scalar {', '.join(sorted(declared | {name}))}")
    return out


def _ring_slots(program: n.Program | None, params: Mapping[str, int]) -> int:
    """The most slots any ring of ``program`` has (0 without rings)."""
    from .tl.evaluate import evaluate

    rings = [s.ring for k in (program.kernels if program else ()) for s in n.walk(k.body) if isinstance(s, n.Allocate) and s.ring is not None]
    sizes = []
    for e in rings:
        try:
            sizes.append(int(evaluate(e, dict(params))))
        except Exception:  # a ring size the checker refused: nothing to size the shapes by
            continue
    return max(sizes, default=0)


def interpret_shapes(spec: AttentionSpec, params: Mapping[str, int], program: n.Program | None = None) -> list[harness.Shape]:
    """Small shapes that exercise every loop of the program: tails in both tiles, Sq != Sk. Two K/V
    heads, so a wrong head map (query head h reading the wrong K/V head) shows. Decode steps, and a
    spec whose queries fit one row block, run over ten K/V tiles with few programs, and decode also
    with more: a split count chosen at launch (the interpreter's rule, ``splits.split_count`` on
    ``splits.INTERPRETER_SM_COUNT`` SMs) is then 4 (splits of 3 tiles, the last of 1), 2 and 1,
    and a fixed split count meets more and fewer tiles than it has splits. With ``program``, a ring
    of R slots gets R + 1 K/V tiles and more, so each slot is refilled while roles still run."""
    g = spec.group_size
    bm, bn = params.get("BM", 64), params.get("BN", 64)
    d, dv = spec.head_dim, spec.head_dim_v
    many_tiles = harness.Shape(1, 2 * g, 2, spec.seqlen_q, 9 * bn + 3, d, dv)
    if spec.is_decode:
        return [many_tiles, harness.Shape(2, 2 * g, 2, 1, 3 * bn + 7, d, dv), harness.Shape(4, 2 * g, 2, 1, bn + 5, d, dv)]
    # a ring of R slots (the Hopper form) is refilled only past R tiles: the first shape goes that far
    kv_tiles = max(2, _ring_slots(program, params) + 1)
    shapes = [harness.Shape(1, 2 * g, 2, bm + 13, kv_tiles * bn + 7, d, dv), harness.Shape(1, 2 * g, 2, 2 * bm + 3, bn + 5, d, dv)]
    return shapes + ([many_tiles] if spec.seqlen_q <= bm else [])


def interpret_scalars(spec: AttentionSpec) -> dict[str, float]:
    """The spec's runtime scalars, with window sizes cut to ``INTERPRET_WINDOW`` (0 stays 0)."""
    values = dict(spec.runtime_scalars())
    for name, small in INTERPRET_WINDOW.items():
        if name in values:
            values[name] = min(int(values[name]), small)
    return values


def interpret_against_spec(program: n.Program, spec: AttentionSpec, shapes: list[harness.Shape], *, file: str | None = None) -> list[harness.RunReport]:
    """Claims first, then every shape exactly in float64 against the spec's reference; raises
    JudgeError naming the disagreeing claim, or the failing shape and its worst rows."""
    findings = claim_findings(program, spec)
    if findings:
        first = findings[0]
        raise JudgeError(f"the program does not compute what the spec asks: {file + ':' if file else ''}{first.line}:{first.col}: {first.code}: {first.message}"
                         + (f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""), findings=findings, hint=first.hint)
    values = interpret_scalars(spec)
    declared = {name for k in program.kernels for name in k.scalars}

    def reference(shape: harness.Shape, q: np.ndarray, k: np.ndarray, v: np.ndarray, _scalars: Mapping[str, float], slopes: np.ndarray):
        return spec_reference(spec, shape.sizes(), q, k, v, slopes, scalars=values)

    reports = []
    for shape in shapes:
        rep = harness.run_and_compare(program, shape, dtype=None, scalars={k: v for k, v in values.items() if k in declared},
                                      file=file, reference=reference)
        reports.append(rep)
        if not rep.passed:
            raise JudgeError(f"the program is wrong at {shape}: err(O) {rep.err_o:.3g} (bound {rep.tolerance:g}), err(LSE) {rep.err_lse:.3g}; {rep.worst}",
                             reports=reports, hint="the reference is the spec's; compare the program's masks, loop bounds and modifiers with it")
    return reports
