"""Print TL nodes back to canonical text; ``parse(print_program(p)) == p`` for every program."""

from __future__ import annotations

import math

from ..splits import DEFAULT_PER_SM
from . import nodes as n

# Binding strength of each binary operator (higher binds tighter); unary minus binds above all.
_PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6}
_NOT_PREC, _NEG_PREC, _ATOM_PREC = 3, 7, 8
INDENT = "    "


def _prec(e: n.Expr) -> int:
    if isinstance(e, n.Binary):
        return _PREC[e.op]
    if isinstance(e, n.Unary):
        return _NOT_PREC if e.op == "not" else _NEG_PREC
    if isinstance(e, n.Num) and e.value < 0:
        return _NEG_PREC
    return _ATOM_PREC


def _num(value: int | float) -> str:
    if isinstance(value, bool):
        raise TypeError("booleans are not TL numbers")
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ValueError(f"TL has no literal for {value}; write inf as the name 'inf'")
    text = repr(value)
    return text if any(c in text for c in ".e") else text + ".0"


def expr(e: n.Expr) -> str:
    """Canonical text of an expression, with only the parentheses precedence needs."""
    if isinstance(e, n.Num):
        return _num(e.value)
    if isinstance(e, n.Name):
        return e.id
    if isinstance(e, n.Call):
        return f"{e.func}({', '.join(expr(a) for a in e.args)})"
    if isinstance(e, n.Index):
        return f"{e.name}[{', '.join(expr(a) for a in e.args)}]"
    if isinstance(e, n.Unary):
        inner = _wrap(e.operand, _prec(e), right=False)
        return f"not {inner}" if e.op == "not" else f"-{inner}"
    if isinstance(e, n.Binary):
        p = _PREC[e.op]
        if p == 4:  # comparisons do not chain: both sides must bind tighter
            return f"{_wrap(e.left, p + 1, False)} {e.op} {_wrap(e.right, p + 1, False)}"
        return f"{_wrap(e.left, p, False)} {e.op} {_wrap(e.right, p, True)}"
    raise TypeError(f"not an expression: {e!r}")


def _wrap(e: n.Expr, parent: int, right: bool) -> str:
    text = expr(e)
    mine = _prec(e)
    # Left-associative operators: a right operand of equal strength needs parentheses.
    if mine < parent or (right and mine == parent):
        return f"({text})"
    return text


def _list(items) -> str:
    return ", ".join(expr(e) for e in items)


def _result(out: str | None, accumulate: bool = False) -> str:
    if out is None:
        return ""
    return f" and {'accumulate' if accumulate else 'get'} {out}"


def _stage(name: str, index: n.Expr | None) -> str:
    """A tile or barrier, with its ring stage or barrier slot when it has one: ``Ks[j % stages]``."""
    return name if index is None else f"{name}[{expr(index)}]"


def stmt(s: n.Stmt, depth: int = 0) -> list[str]:
    """Lines of one statement (a loop or role gives several), indented ``depth`` levels."""
    pad = INDENT * depth
    if isinstance(s, n.Allocate):
        if s.level == n.BARRIER:
            shape = f" ({_list(s.shape)})" if s.shape else ""
            count = f" count {expr(s.count)}" if s.count is not None else ""
            return [f"{pad}Allocate {s.name} in barrier{shape}{count}"]
        head = f"Allocate {s.name} in {s.level} ({_list(s.shape)})"
        if s.level == "global":
            pack = f" pack {expr(s.pack)}" if s.pack is not None else ""
            return [f"{pad}{head} at {s.tensor}[{_list(s.offset)}]{pack}"]
        init = f" = {expr(s.init)}" if s.init is not None else ""
        ring = f" ring {expr(s.ring)}" if s.ring is not None else ""
        return [f"{pad}{head} : {s.dtype}{init}{ring}"]
    if isinstance(s, n.Copy):
        tile = f" ({_list(s.tile)}) at [{_list(s.coord)}]" if s.tile is not None else ""
        signal = f" async {_stage(s.signal.name, s.signal.index)}" if s.signal is not None else ""
        return [f"{pad}Copy {_stage(s.src, s.src_index)}{tile} from {s.src_level} to {s.dst_level} {_stage(s.dst, s.dst_index)}{signal}"]
    if isinstance(s, n.Gemm):
        a = _stage(s.a, s.a_index) + ("^T" if s.a_trans else "")
        b = _stage(s.b, s.b_index) + ("^T" if s.b_trans else "")
        return [f"{pad}Compute GEMM {a}, {b}{_result(s.out, s.accumulate)}{' async' if s.is_async else ''}"]
    if isinstance(s, n.Wait):
        return [f"{pad}Wait {_stage(s.barrier.name, s.barrier.index)} phase {expr(s.phase)}"]
    if isinstance(s, n.Arrive):
        return [f"{pad}Arrive {_stage(s.barrier.name, s.barrier.index)}"]
    if isinstance(s, n.WaitGemm):
        return [f"{pad}Wait GEMM {s.name}"]
    if isinstance(s, n.Role):
        regs = f" regs {s.regs}" if s.regs is not None else ""
        return _block(f"role {s.name} warps {expr(s.warp_start)} : {expr(s.warp_stop)}{regs}", s.body, depth)
    if isinstance(s, n.Elementwise):
        # Operands are read at the '+' level (so 'and get' is never a boolean 'and'): wrap looser ones.
        args = ", ".join(_wrap(a, _PREC["+"], False) for a in s.args)
        return [f"{pad}Compute {s.op} {args}{_result(s.out)}"]
    if isinstance(s, n.Cast):
        return [f"{pad}Compute Cast {s.src} to {s.dtype}{_result(s.out)}"]
    if isinstance(s, n.ScoreMod):
        return [f"{pad}Compute ScoreMod {s.target} with {expr(s.expr)}"]
    if isinstance(s, n.Mask):
        return [f"{pad}Compute Mask {s.target} keep {expr(s.keep)}"]
    if isinstance(s, n.Softmax):
        return [f"{pad}Compute Softmax {s.target}"]
    if isinstance(s, n.OnlineSoftmax):
        rescale = f" rescale {', '.join(s.rescale)}" if s.rescale else ""
        return [f"{pad}Compute OnlineSoftmax {s.scores} state {s.row_max}, {s.row_sum}{rescale}{_result(s.out)}"]
    if isinstance(s, n.Normalize):
        return [f"{pad}Compute Normalize {s.acc} by {s.row_sum}{_result(s.out)}"]
    if isinstance(s, n.LogSumExp):
        return [f"{pad}Compute LogSumExp {s.row_max}, {s.row_sum}{_result(s.out)}"]
    if isinstance(s, n.Reshape):
        return [f"{pad}Reshape {s.name} from {s.src_layout} to {s.dst_layout}"]
    if isinstance(s, n.Loop):
        stages = f" pipeline {expr(s.stages)}" if s.stages is not None else ""
        return _block(f"for {s.var} = {expr(s.start)} : {expr(s.stop)}{stages}", s.body, depth)
    raise TypeError(f"not a statement: {s!r}")


def _block(head: str, body: tuple[n.Stmt, ...], depth: int) -> list[str]:
    """A loop or a role: its head line, its body one level deeper, and ``end``."""
    lines = [INDENT * depth + head]
    for inner in body:
        lines += stmt(inner, depth + 1)
    return lines + [INDENT * depth + "end"]


def _feature(f: n.Feature) -> str:
    if f.value is None:
        return f.name
    if isinstance(f.value, str):
        return f"{f.name} = {f.value}"
    return f"{f.name} = ({expr(f.value)})"


def kernel(k: n.Kernel) -> list[str]:
    lines = [f"kernel {k.name}"]
    if k.target is not None:
        lines.append(f"target {k.target}")
    if k.computes:
        lines.append("computes " + ", ".join(_feature(f) for f in k.computes))
    if k.dtypes:
        lines.append("dtype " + ", ".join(f"{a} = {t}" for a, t in k.dtypes))
    if k.params:
        lines.append("param " + ", ".join(p.name if p.value is None else f"{p.name} = {p.value}" for p in k.params))
    for v in k.launch:
        per_sm = "" if v.per_sm == DEFAULT_PER_SM else f", {v.per_sm}"
        lines.append(f"launch {v.name} = splits({expr(v.programs)}, {expr(v.tiles)}{per_sm})")
    if k.scalars:
        lines.append("scalar " + ", ".join(k.scalars))
    if k.grid:
        lines.append("grid " + ", ".join(f"{g.name} : {expr(g.extent)}" for g in k.grid))
    for sc in k.scratch:
        lines.append(f"scratch {sc.name} ({_list(sc.shape)}) : {sc.dtype}")
    lines.append("")
    for s in k.body:
        lines += stmt(s)
    return lines


def print_program(p: n.Program) -> str:
    """Canonical text of a program: its doc comment, then each kernel separated by a blank line."""
    out: list[str] = []
    if p.doc:
        out += [f"# {line}".rstrip() for line in p.doc.split("\n")]  # the parser splits the doc at "\n" only
        out.append("")
    for i, k in enumerate(p.kernels):
        if i:
            out.append("")
        out += kernel(k)
    return "\n".join(out) + "\n"
