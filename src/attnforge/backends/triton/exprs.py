"""TL expressions as Python source: inside a Triton kernel (``device``) or in its launcher (``host``).

TL's integer ``//``, ``%`` and ``cdiv`` round toward minus infinity (Python); Triton's round toward
zero (C). Where both operands are provably non-negative the two agree and the plain operator is
emitted; elsewhere the kernel calls ``floordiv``/``floormod`` helpers that the module defines. On
floats (a static type rule: ``score``, float scalars and literals, ``/``, transcendental
functions, element reads) they become ``floor(a / b)`` forms, and integer arguments of float-only
functions are widened, as Python would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NoReturn

from ...analysis.bounds import FLOAT_FUNCS, is_float, nonnegative
from ...errors import Position, TranslateError
from ...tl import nodes as n

_BINARY_PY = {"and": "&", "or": "|"}

# TL function -> Triton builtin (device side). tanh has no Triton builtin the interpreter runs,
# so the module defines it (from exp, exact to fp32 rounding at the magnitudes scores reach).
_DEVICE_FUNCS = {
    "min": "tl.minimum", "max": "tl.maximum", "abs": "tl.abs", "exp": "tl.exp", "exp2": "tl.exp2",
    "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt", "tanh": "tanh", "sigmoid": "tl.sigmoid",
    "where": "tl.where", "cdiv": "tl.cdiv", "floor": "tl.floor", "ceil": "tl.ceil",
}
_HOST_FUNCS = {"min": "min", "max": "max", "abs": "abs"}


@dataclass
class ExprContext:
    """How names resolve to Python source, and which helpers the expression needed."""

    names: dict[str, str]  # TL name -> Python expression
    nonneg: set[str] = field(default_factory=set)  # TL names known to be >= 0
    index: Callable[[n.Index], str] | None = None  # element reads (device only)
    helpers: set[str] = field(default_factory=set)  # module helpers used: floordiv, floormod, tanh
    file: str | None = None
    floats: set[str] = field(default_factory=set)  # TL names holding floats (score, float scalars)
    lib: str = "tl"  # the language module's name in the generated source (Gluon's is "gl")


def _fail(e: n.Node, message: str, ctx: ExprContext, hint: str | None = None) -> NoReturn:
    raise TranslateError(message, where=Position(e.line, e.col, ctx.file), hint=hint)


def device(e: n.Expr, ctx: ExprContext) -> str:
    """Triton source for ``e``: fully parenthesised, so operator precedence never differs."""
    if isinstance(e, n.Num):
        return repr(e.value)
    if isinstance(e, n.Name):
        if e.id in ctx.names:
            return ctx.names[e.id]
        if e.id == "inf":
            return 'float("inf")'
        _fail(e, f"name {e.id!r} has no value in the generated kernel", ctx, "defined: " + ", ".join(sorted(ctx.names)))
    if isinstance(e, n.Unary):
        inner = device(e.operand, ctx)
        # 'not' as a comparison: '~' on a Python bool constant would give -2, not False.
        return f"(-{inner})" if e.op == "-" else f"({inner} == 0)"
    if isinstance(e, n.Binary):
        left, right = device(e.left, ctx), device(e.right, ctx)
        if e.op in ("//", "%") and (is_float(e.left, ctx.floats) or is_float(e.right, ctx.floats)):
            # Triton's // and % take integers only; Python's float forms round toward -inf
            quotient = f"{ctx.lib}.floor({left} / {right})"
            return quotient if e.op == "//" else f"({left} - {quotient} * {right})"
        if e.op in ("//", "%") and not (nonnegative(e.left, ctx.nonneg) and nonnegative(e.right, ctx.nonneg)):
            helper = "floordiv" if e.op == "//" else "floormod"
            ctx.helpers.add("floordiv")
            ctx.helpers.add(helper)
            return f"{helper}({left}, {right})"
        return f"({left} {_BINARY_PY.get(e.op, e.op)} {right})"
    if isinstance(e, n.Call):
        parts = [device(a, ctx) for a in e.args]
        if e.func in FLOAT_FUNCS:  # widen integer arguments (indices) as Python would
            parts = [p if is_float(a, ctx.floats) else f"({p} * 1.0)" for p, a in zip(parts, e.args)]
        if e.func == "cdiv" and not all(nonnegative(a, ctx.nonneg) for a in e.args):
            # tl.cdiv truncates; TL's cdiv(a, b) is -floor(-a / b)
            ctx.helpers.add("floordiv")
            return f"(-floordiv(-({parts[0]}), {parts[1]}))"
        if e.func == "tanh":
            ctx.helpers.add("tanh")
        return f"{_DEVICE_FUNCS[e.func].replace('tl.', ctx.lib + '.')}({', '.join(parts)})"
    if isinstance(e, n.Index):
        if ctx.index is None:
            _fail(e, f"{e.name}[...] cannot be read here", ctx)
        return ctx.index(e)
    raise TypeError(f"not an expression: {e!r}")


def host(e: n.Expr, ctx: ExprContext) -> str:
    """Python source for ``e`` in the launcher (grid extents, scratch shapes): integers only."""
    if isinstance(e, n.Num):
        return repr(e.value)
    if isinstance(e, n.Name):
        if e.id in ctx.names:
            return ctx.names[e.id]
        _fail(e, f"name {e.id!r} is not known when the kernel is launched", ctx, "grid extents and scratch shapes may use sizes (B, Hq, Hkv, Sq, Sk, D, Dv) and parameters")
    if isinstance(e, n.Unary) and e.op == "-":
        return f"(-{host(e.operand, ctx)})"
    if isinstance(e, n.Binary) and e.op in ("+", "-", "*", "//", "%"):
        return f"({host(e.left, ctx)} {e.op} {host(e.right, ctx)})"
    if isinstance(e, n.Call) and e.func == "cdiv" and len(e.args) == 2:
        # TL's cdiv(a, b) = -floor(-a / b), in plain Python: triton.cdiv is a JIT function that costs microseconds per call
        return f"(-(-{host(e.args[0], ctx)} // {host(e.args[1], ctx)}))"
    if isinstance(e, n.Call) and e.func in _HOST_FUNCS:
        return f"{_HOST_FUNCS[e.func]}({', '.join(host(a, ctx) for a in e.args)})"
    _fail(e, "only integer arithmetic (+ - * // %, min, max, abs, cdiv) is allowed in a grid extent or scratch shape", ctx)


# Helper functions a generated module defines when its expressions use them.
HELPER_SOURCE = {
    "floordiv": '''@triton.jit
def floordiv(a, b):
    """a // b rounded toward minus infinity, as TL (and Python) define it."""
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
''',
    "floormod": '''@triton.jit
def floormod(a, b):
    """a % b with the sign of b, as TL (and Python) define it."""
    return a - floordiv(a, b) * b
''',
    "tanh": '''@triton.jit
def tanh(x):
    """tanh from exp: saturates to +-1 where exp overflows instead of giving nan."""
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)
''',
}
