"""Evaluate TL expressions over Python scalars and numpy arrays (never Python ``eval``).

Integers stay Python ints where every operand is one (loop bounds, offsets); as soon as an
array enters, numpy broadcasting takes over (masks and score modifiers over whole tiles).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..errors import Position, TLRuntimeError
from . import nodes as n

Value = Any  # int | float | bool | np.ndarray


def _is_scalar(x: Value) -> bool:
    return isinstance(x, (int, float, bool, np.integer, np.floating, np.bool_))


def _scalar_or_array(fn_scalar, fn_array, *args):
    return fn_scalar(*args) if all(_is_scalar(a) for a in args) else fn_array(*args)


def _floordiv(a, b):
    if all(isinstance(x, (int, np.integer)) for x in (a, b)) and b == 0:
        raise ZeroDivisionError("integer division by zero")
    return a // b


def _cdiv(a, b):
    return -(-a // b)


def _where(c, a, b):
    return (a if c else b) if _is_scalar(c) else np.where(c, a, b)


def _safe_math(fn_scalar, fn_array):
    def apply(x):
        if _is_scalar(x):
            try:
                return fn_scalar(float(x))
            except (ValueError, OverflowError):
                return float(fn_array(np.float64(x)))
        return fn_array(x)
    return apply


_FUNCS = {
    "min": lambda a, b: _scalar_or_array(min, np.minimum, a, b),
    "max": lambda a, b: _scalar_or_array(max, np.maximum, a, b),
    "abs": lambda a: abs(a) if _is_scalar(a) else np.abs(a),
    "exp": _safe_math(math.exp, np.exp),
    "exp2": _safe_math(lambda x: 2.0 ** x, np.exp2),
    "log": _safe_math(math.log, np.log),
    "log2": _safe_math(math.log2, np.log2),
    "sqrt": _safe_math(math.sqrt, np.sqrt),
    "tanh": _safe_math(math.tanh, np.tanh),
    "sigmoid": lambda x: 1.0 / (1.0 + _FUNCS["exp"](-x)),
    "where": _where,
    "cdiv": _cdiv,
    "floor": lambda x: math.floor(x) if _is_scalar(x) else np.floor(x),
    "ceil": lambda x: math.ceil(x) if _is_scalar(x) else np.ceil(x),
}

_BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: np.divide(a, b) if not (_is_scalar(a) and _is_scalar(b)) else (a / b if b != 0 else float(np.divide(np.float64(a), np.float64(b)))),
    "//": _floordiv,
    "%": lambda a, b: a % b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "and": lambda a, b: _scalar_or_array(lambda x, y: bool(x) and bool(y), np.logical_and, a, b),
    "or": lambda a, b: _scalar_or_array(lambda x, y: bool(x) or bool(y), np.logical_or, a, b),
}


def evaluate(e: n.Expr, env: Mapping[str, Value], tensors: Mapping[str, np.ndarray] | None = None, file: str | None = None) -> Value:
    """Value of ``e`` with names from ``env`` and ``name[...]`` read from ``tensors``."""
    try:
        with np.errstate(all="ignore"):  # inf and nan are values here; callers judge them
            return _eval(e, env, tensors or {})
    except TLRuntimeError:
        raise
    except (ZeroDivisionError, OverflowError, ValueError, TypeError, IndexError) as err:
        raise TLRuntimeError(f"cannot evaluate: {err}", where=Position(e.line, e.col, file), hint="check the operands of this expression") from None


def _eval(e: n.Expr, env, tensors) -> Value:
    if isinstance(e, n.Num):
        return e.value
    if isinstance(e, n.Name):
        if e.id in env:
            return env[e.id]
        if e.id == "inf":
            return math.inf
        raise TLRuntimeError(f"name {e.id!r} is not defined here", where=Position(e.line, e.col), hint="defined: " + ", ".join(sorted(map(str, env))))
    if isinstance(e, n.Unary):
        v = _eval(e.operand, env, tensors)
        if e.op == "-":
            return -v
        return (not v) if _is_scalar(v) else np.logical_not(v)
    if isinstance(e, n.Binary):
        return _BINARY[e.op](_eval(e.left, env, tensors), _eval(e.right, env, tensors))
    if isinstance(e, n.Call):
        return _FUNCS[e.func](*(_eval(a, env, tensors) for a in e.args))
    if isinstance(e, n.Index):
        if e.name not in tensors:
            raise TLRuntimeError(f"tensor {e.name!r} is not an argument of this kernel", where=Position(e.line, e.col), hint="tensors: " + ", ".join(sorted(tensors)))
        idx = tuple(_eval(a, env, tensors) for a in e.args)
        rank = getattr(tensors[e.name], "ndim", len(idx))
        if len(idx) != rank:
            raise TLRuntimeError(f"{e.name} has {rank} dimensions; {e.name}[...] gives {len(idx)} index(es)", where=Position(e.line, e.col), hint="an expression reads one element: give one index per dimension")
        shape = getattr(tensors[e.name], "shape", None)
        if shape is not None:
            for i, dim in zip(idx, shape):
                if np.any(np.asarray(i) < 0) or np.any(np.asarray(i) >= dim):
                    raise TLRuntimeError(f"{e.name}[...] index {i} is outside 0..{dim - 1}", where=Position(e.line, e.col), hint="indices count from 0 and never wrap")
        return tensors[e.name][idx]
    raise TypeError(f"not an expression: {e!r}")


# Names the spec's modifiers (and a program's ``computes score_mod/mask_mod``) may read.
SCORE_MOD_NAMES: tuple[str, ...] = ("score", "b", "h", "q_idx", "kv_idx", "Sq", "Sk", "Hq", "Hkv")
MASK_MOD_NAMES: tuple[str, ...] = ("b", "h", "q_idx", "kv_idx", "Sq", "Sk", "Hq", "Hkv")

_COMPARE = frozenset({"<", "<=", ">", ">=", "==", "!="})


class KindError(Exception):
    """An expression mixes truth values and numbers; ``node`` is where, ``str()`` says how."""

    def __init__(self, node: n.Expr, why: str):
        super().__init__(why)
        self.node = node


def expr_kind(e: n.Expr) -> str:
    """``"bool"`` or ``"num"``: the kind of an expression's value. Raises KindError where an
    operator gets the wrong kind (``not`` of a number, ``and`` of numbers, ``-`` of a comparison)."""
    if isinstance(e, (n.Num, n.Name, n.Index)):
        return "num"
    if isinstance(e, n.Unary):
        inner = expr_kind(e.operand)
        want = "bool" if e.op == "not" else "num"
        if inner != want:
            raise KindError(e, "'not' needs a truth value, e.g. not (q_idx < kv_idx)" if e.op == "not" else "'-' needs a number, not a truth value")
        return want
    if isinstance(e, n.Binary):
        left, right = expr_kind(e.left), expr_kind(e.right)
        if e.op in ("and", "or"):
            if left != "bool" or right != "bool":
                raise KindError(e, f"'{e.op}' joins truth values (comparisons), e.g. q_idx >= kv_idx {e.op} h < 4")
            return "bool"
        if left != "num" or right != "num":
            raise KindError(e, f"'{e.op}' needs numbers on both sides, not truth values")
        return "bool" if e.op in _COMPARE else "num"
    if isinstance(e, n.Call):
        kinds = [expr_kind(a) for a in e.args]
        if e.func == "where":
            if kinds[0] != "bool":
                raise KindError(e, "where(cond, a, b) needs a truth value first")
            if kinds[1] != kinds[2]:
                raise KindError(e, "where(cond, a, b) chooses between two numbers or two truth values")
            return kinds[1]
        if any(k != "num" for k in kinds):
            raise KindError(e, f"{e.func}() takes numbers, not truth values")
        return "num"
    raise TypeError(f"not an expression: {e!r}")


def expr_fn(expr: n.Expr, sizes: Mapping[str, int], with_score: bool):
    """A score_mod (``with_score``) or mask_mod expression as a numpy function for the reference."""
    def fn(*args):
        names = ("score", "b", "h", "q_idx", "kv_idx") if with_score else ("b", "h", "q_idx", "kv_idx")
        env = dict(sizes)
        env.update(zip(names, args))
        with np.errstate(all="ignore"):
            return evaluate(expr, env)
    return fn
