"""TL expressions as CUDA C++: in a kernel (``device``) or as Python in the launcher (``host``).

TL's integer ``//``, ``%`` and ``cdiv`` round toward minus infinity; C++'s toward zero. Where
both operands are provably non-negative the plain operators are emitted, elsewhere the prelude's
``af_floordiv``/``af_floormod``. TL's ``/`` is true division, so both sides become float. Every
sub-expression is parenthesised: C++ precedence never matters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NoReturn

from ...analysis.bounds import FLOAT_FUNCS, is_float, nonnegative
from ...errors import Position, TranslateError
from ...tl import nodes as n

_FLOAT_FUNCS = {"exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf", "tanh": "af_tanh",
                "sigmoid": "af_sigmoid", "floor": "floorf", "ceil": "ceilf"}
_BOOL_OPS = {"and": "&&", "or": "||", "//": "/"}  # "//" here: both sides provably >= 0


@dataclass
class ExprContext:
    names: dict[str, str]  # TL name -> C++ expression
    nonneg: set[str] = field(default_factory=set)
    index: Callable[[n.Index], str] | None = None
    file: str | None = None
    floats: set[str] = field(default_factory=set)


def _fail(e: n.Node, message: str, ctx: ExprContext, hint: str | None = None) -> NoReturn:
    raise TranslateError(message, where=Position(e.line, e.col, ctx.file), hint=hint)


def _num(value: int | float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value) if -2**31 <= value < 2**31 else f"{value}LL"
    if value != value:
        return "CUDART_NAN_F"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(float(value))
    return f"{text}f" if ("." in text or "e" in text) else f"{text}.0f"


def device(e: n.Expr, ctx: ExprContext) -> str:
    if isinstance(e, n.Num):
        return _num(e.value)
    if isinstance(e, n.Name):
        if e.id in ctx.names:
            return ctx.names[e.id]
        if e.id == "inf":
            return "INFINITY"
        _fail(e, f"name {e.id!r} has no value in the generated kernel", ctx, "defined: " + ", ".join(sorted(ctx.names)))
    if isinstance(e, n.Unary):
        inner = device(e.operand, ctx)
        return f"(-{inner})" if e.op == "-" else f"(!{inner})"
    if isinstance(e, n.Binary):
        left, right = device(e.left, ctx), device(e.right, ctx)
        floaty = is_float(e.left, ctx.floats) or is_float(e.right, ctx.floats)
        if e.op == "/":
            return f"((float){left} / (float){right})"
        if e.op in ("//", "%") and floaty:
            quotient = f"floorf((float){left} / (float){right})"
            return quotient if e.op == "//" else f"({left} - {quotient} * {right})"
        if e.op in ("//", "%") and not (nonnegative(e.left, ctx.nonneg) and nonnegative(e.right, ctx.nonneg)):
            return f"af_floor{'div' if e.op == '//' else 'mod'}({left}, {right})"
        return f"({left} {_BOOL_OPS.get(e.op, e.op)} {right})"
    if isinstance(e, n.Call):
        parts = [device(a, ctx) for a in e.args]
        if e.func in FLOAT_FUNCS:
            return f"{_FLOAT_FUNCS[e.func]}({', '.join(f'(float){p}' for p in parts)})"
        if e.func in ("min", "max", "abs"):
            return f"af_{e.func}({', '.join(parts)})"
        if e.func == "cdiv":
            if all(nonnegative(a, ctx.nonneg) for a in e.args):
                return f"(({parts[0]} + {parts[1]} - 1) / {parts[1]})"
            return f"(-af_floordiv(-({parts[0]}), {parts[1]}))"
        if e.func == "where":
            return f"({parts[0]} ? {parts[1]} : {parts[2]})"
        _fail(e, f"function {e.func}() has no CUDA translation", ctx, "functions: min, max, abs, cdiv, where, " + ", ".join(sorted(_FLOAT_FUNCS)))
    if isinstance(e, n.Index):
        if ctx.index is None:
            _fail(e, f"{e.name}[...] cannot be read here", ctx)
        return ctx.index(e)
    raise TypeError(f"not an expression: {e!r}")


def host(e: n.Expr, ctx: ExprContext) -> str:
    """Python for a grid extent (integers only), evaluated by the launcher with the sizes bound."""
    if isinstance(e, n.Num) and isinstance(e.value, int):
        return repr(e.value)
    if isinstance(e, n.Name):
        if e.id in ctx.names:
            return ctx.names[e.id]
        _fail(e, f"name {e.id!r} is not known when the kernel is launched", ctx, "grid extents may use sizes (B, Hq, Hkv, Sq, Sk) and parameters")
    if isinstance(e, n.Unary) and e.op == "-":
        return f"(-{host(e.operand, ctx)})"
    if isinstance(e, n.Binary) and e.op in ("+", "-", "*", "//", "%"):
        return f"({host(e.left, ctx)} {e.op} {host(e.right, ctx)})"
    if isinstance(e, n.Call) and e.func in ("min", "max", "abs"):
        return f"{e.func}({', '.join(host(a, ctx) for a in e.args)})"
    if isinstance(e, n.Call) and e.func == "cdiv":
        a, b = (host(x, ctx) for x in e.args)
        return f"(-((-{a}) // {b}))"
    _fail(e, "only integer arithmetic (+ - * // %, min, max, abs, cdiv) is allowed in a grid extent", ctx)
