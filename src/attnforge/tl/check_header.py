"""Checks of a TL program's headers, before any statement: the target line, parameters and
launch-time values, dtype aliases, runtime scalars, scratch tensors and the computes features
(TL1xx, plus TL202/203/310 inside score_mod and mask_mod expressions). The arguments of a launch
line's rule are evaluated with the body, by ``checker`` (TL110, TL203, TL311).
"""

from __future__ import annotations

from ..abi import HEAD_DIM_NAMES, RUNTIME_SCALARS, SIZE_ARGS
from ..dtypes import FORMATS, TL_DTYPES
from ..errors import TargetError
from ..targets import Target, get_target
from . import nodes as n
from .evaluate import MASK_MOD_NAMES, SCORE_MOD_NAMES, KindError, expr_kind
from .findings import Finding
from .printer import expr as show_expr

FEATURES = ("causal", "window", "alibi", "softcap", "score_mod", "mask_mod")
# computes window [= both | left | right]: which sides of the sliding window are bounded (scalars they need).
WINDOW_SIDES = {None: ("window_left", "window_right"), "both": ("window_left", "window_right"), "left": ("window_left",), "right": ("window_right",)}
MOD_NAMES = {"score_mod": SCORE_MOD_NAMES, "mask_mod": MASK_MOD_NAMES}


def resolve_target(program: n.Program, target, report) -> Target | None:
    """The target to check for: the caller's, else the header's; every kernel's target line is checked."""
    if isinstance(target, str):
        target = get_target(target)
    declared: list[tuple[n.Kernel, Target]] = []
    for kernel in program.kernels:
        if kernel.target is None:
            continue
        try:
            declared.append((kernel, get_target(kernel.target)))
        except TargetError as err:
            report(Finding("TL107", "error", kernel.line, kernel.col, f"unknown target {kernel.target!r} in the header of {kernel.name}", err.hint or "use a name from 'attnforge targets'"))
    if len({t.cc for _, t in declared}) > 1:
        kernel = next(k for k, t in declared if t.cc != declared[0][1].cc)
        report(Finding("TL103", "warning", kernel.line, kernel.col, f"the kernels of this program declare different targets ({', '.join(k.target for k, _ in declared)})", "one program is compiled for one GPU"))
    if target is None and declared:
        return declared[0][1]
    for kernel, mine in declared:
        if mine.cc != target.cc:
            report(Finding("TL103", "warning", kernel.line, kernel.col, f"the program declares target {kernel.target} but is checked for {target.name} ({target.sm})", "update the header's target line, or check for the target it names"))
            break
    if target is None:
        first = program.kernels[0]
        report(Finding("TL108", "info", first.line, first.col, "no target given: the checks of tensor cores, shared memory and registers were skipped", "add 'target h100' to the header or pass --target"))
    return target


def check_header(kernel: n.Kernel, report, sketch: bool, probe_index: int) -> None:
    """The header of ``kernel`` (once, in probe 0): parameters, dtypes, scalars, features, scratch."""
    if probe_index:
        return
    seen: set[str] = set()
    for p in kernel.params:
        if p.name in seen:
            report(Finding("TL102", "error", p.line, p.col, f"parameter {p.name} is declared twice", "keep one declaration"))
        seen.add(p.name)
        if p.value is None:
            sev = "info" if sketch else "error"
            report(Finding("TL106", sev, p.line, p.col, f"parameter {p.name} is open", (f"choose a value: write param {p.name} = 64 (say), or give it when running: attnforge tl run FILE --param {p.name}=64; "
                                                                                       "'attnforge tl check --sketch' checks a sketch with open parameters")
                                                                                      if not sketch else "a sketch may leave it open; the planner fills it in"))
        elif p.value < 1:
            report(Finding("TL102", "error", p.line, p.col, f"parameter {p.name} = {p.value} must be positive", "tile sizes, warps and stages are >= 1"))
    taken = set(SIZE_ARGS) | set(HEAD_DIM_NAMES) | set(kernel.scalars)
    for v in kernel.launch:
        if v.name in seen or v.name in taken:
            what = "a parameter or an earlier launch value" if v.name in seen else "a size or runtime scalar"
            report(Finding("TL102", "error", v.line, v.col, f"launch value {v.name} is declared twice (it is also {what})",
                           f"keep one declaration: 'launch {v.name} = splits(...)' for a count the host picks at launch, 'param {v.name} = N' for a fixed one"))
        seen.add(v.name)
    for alias, dtype in kernel.dtypes:
        if alias in FORMATS:
            report(Finding("TL101", "error", kernel.line, kernel.col, f"dtype alias {alias!r} is the name of a format", "aliases are names such as qkv, acc, out"))
        if dtype not in TL_DTYPES:
            report(Finding("TL101", "error", kernel.line, kernel.col, f"dtype {alias} = {dtype} is not a known format", "formats: " + ", ".join(TL_DTYPES)))
    for name in kernel.scalars:
        if name not in RUNTIME_SCALARS:
            report(Finding("TL105", "error", kernel.line, kernel.col, f"runtime scalar {name!r} is not one the launcher can bind", "scalars: " + ", ".join(f"{s.name} ({s.meaning})" for s in RUNTIME_SCALARS.values())))
    for f in kernel.computes:
        check_feature(kernel, f, report)
    for sc in kernel.scratch:
        if sc.dtype not in TL_DTYPES and sc.dtype not in dict(kernel.dtypes):
            report(Finding("TL101", "error", sc.line, sc.col, f"scratch {sc.name} has unknown data type {sc.dtype!r}", "formats: " + ", ".join(TL_DTYPES)))


def check_feature(kernel: n.Kernel, f: n.Feature, report) -> None:
    """One ``computes`` feature: a known name, a valid value, and the runtime scalars it needs."""
    if f.name not in FEATURES:
        report(Finding("TL104", "error", f.line, f.col, f"unknown feature {f.name!r} in computes", "features: " + ", ".join(FEATURES)))
        return
    if f.name == "causal":
        if f.value not in (None, "bottom_right", "top_left"):
            report(Finding("TL104", "error", f.line, f.col, f"causal = {_value(f)} is not an alignment", "causal = bottom_right (j <= i + Sk - Sq) or causal = top_left (j <= i)"))
        return
    if f.name in ("score_mod", "mask_mod"):
        if not isinstance(f.value, n.Node):
            report(Finding("TL104", "error", f.line, f.col, f"{f.name} needs its expression", f"{f.name} = (expression)"))
            return
        allowed = MOD_NAMES[f.name]
        if n.indexes(f.value):
            report(Finding("TL202", "error", f.line, f.col, f"{f.name} indexes {n.indexes(f.value)[0].name}[...]; a modifier reads scalars only", "it may read: " + ", ".join(allowed)))
            return
        unknown = sorted(n.expr_names(f.value) - set(allowed) - {"inf"})
        if unknown:
            report(Finding("TL203", "error", f.line, f.col, f"{f.name} reads {', '.join(unknown)}, which it cannot see", "it may read: " + ", ".join(allowed)))
        want = "a truth value, e.g. mask_mod = (kv_idx % 2 == 0)" if f.name == "mask_mod" else "a number, e.g. score_mod = (score * 0.5)"
        try:
            wrong = (expr_kind(f.value) == "bool") != (f.name == "mask_mod")
        except KindError as err:
            report(Finding("TL310", "error", f.line, f.col, f"{f.name} mixes truth values and numbers: {err}", want))
        else:
            if wrong:
                report(Finding("TL310", "error", f.line, f.col, f"{f.name} must be {want.split(',')[0]}", want))
        return
    if f.name == "window":
        if f.value not in WINDOW_SIDES:
            hint = "window (both sides bounded), window = left or window = right (the other side unbounded)"
            if isinstance(f.value, n.Node):  # a size: the window's sizes are the runtime scalars window_left, window_right
                hint += "; the sizes are the runtime scalars window_left / window_right (scalar window_left, window_right), given at launch"
            report(Finding("TL104", "error", f.line, f.col, f"window = {_value(f)} is not a side", hint))
            return
    elif f.value is not None:
        report(Finding("TL104", "error", f.line, f.col, f"{f.name} takes no value here", f"write just '{f.name}'; its numbers are runtime scalars"
                       + (" (scalar softcap, given at launch; a fixed cap is a score_mod: computes score_mod = (50 * tanh(score / 50)))" if f.name == "softcap" else "")))
    need = {"window": WINDOW_SIDES.get(f.value, ()), "softcap": ("softcap",)}.get(f.name, ())
    for s in need:
        if s not in kernel.scalars:
            report(Finding("TL105", "error", f.line, f.col, f"feature {f.name} needs the runtime scalar {s}", f"add 'scalar {s}' to the header"))


def _value(f: n.Feature) -> str:
    """A feature's value as it is written in TL (an expression in parentheses, not a Python repr)."""
    return f"({show_expr(f.value)})" if isinstance(f.value, n.Node) else str(f.value)
