"""Proofs on TL expression trees: types (float or integer), signs, index products, tiles in bounds.

Each is conservative: ``False`` means "not proven", and the caller then emits the general code
(a floor-division helper, a bounds mask, int64 indices). Expressions are compared as trees
(``tl.nodes`` ignore source positions in equality), never as printed text.
"""

from __future__ import annotations

from typing import Mapping

from ..tl import nodes as n

# Functions that need a float argument and return a float.
FLOAT_FUNCS = frozenset({"exp", "exp2", "log", "log2", "sqrt", "tanh", "sigmoid", "floor", "ceil"})

# Functions whose result is non-negative when every argument is.
_MONOTONE_NONNEG = frozenset({"min", "max", "cdiv", "abs", "exp", "exp2", "sqrt", "sigmoid", "floor", "ceil"})

# Names that index the score tile (h_idx: the head of a packed row); their products may pass 2^31.
INDEX_NAMES = frozenset({"q_idx", "kv_idx", "h_idx", "b", "h"})


def is_float(e: n.Expr, floats: set[str] | frozenset[str]) -> bool:
    """Whether ``e`` is a float in the kernel (otherwise an integer or a truth value): ``score``,
    float scalars and literals, ``/``, transcendental functions and element reads are floats."""
    if isinstance(e, n.Num):
        return isinstance(e.value, float)
    if isinstance(e, n.Name):
        return e.id in floats or e.id == "inf"
    if isinstance(e, n.Index):
        return True  # tensors hold floats
    if isinstance(e, n.Unary):
        return e.op == "-" and is_float(e.operand, floats)
    if isinstance(e, n.Binary):
        if e.op == "/":
            return True
        return e.op in ("+", "-", "*", "//", "%") and (is_float(e.left, floats) or is_float(e.right, floats))
    if isinstance(e, n.Call):
        if e.func in FLOAT_FUNCS:
            return True
        args = e.args[1:] if e.func == "where" else e.args
        return any(is_float(a, floats) for a in args)
    return False


def multiplies_indices(e: n.Expr, floats: set[str] | frozenset[str]) -> bool:
    """Whether ``e`` multiplies an index by an integer: such products can pass 2^31 when int32
    (the reference computes in int64), so a kernel widens the indices first."""
    if isinstance(e, n.Binary):
        if e.op == "*" and not is_float(e.left, floats) and not is_float(e.right, floats) \
                and (n.expr_names(e.left) | n.expr_names(e.right)) & INDEX_NAMES:
            return True
        return multiplies_indices(e.left, floats) or multiplies_indices(e.right, floats)
    if isinstance(e, n.Unary):
        return multiplies_indices(e.operand, floats)
    if isinstance(e, (n.Call, n.Index)):
        return any(multiplies_indices(a, floats) for a in e.args)
    return False


def nonnegative(e: n.Expr, known: set[str] | frozenset[str]) -> bool:
    """Whether ``e`` is >= 0 whatever the runtime values, given names ``known`` to be >= 0."""
    if isinstance(e, n.Num):
        return e.value >= 0
    if isinstance(e, n.Name):
        return e.id in known
    if isinstance(e, n.Binary) and e.op in ("+", "*", "//", "%", "/"):
        return nonnegative(e.left, known) and nonnegative(e.right, known)
    if isinstance(e, n.Call):
        if e.func == "max":
            return any(nonnegative(a, known) for a in e.args)
        if e.func == "abs":
            return True
        return e.func in _MONOTONE_NONNEG and all(nonnegative(a, known) for a in e.args)
    return False


def tile_inside(coord: n.Expr, size: n.Expr, extent: n.Expr, loop_stops: Mapping[str, n.Expr], known: set[str] | frozenset[str]) -> bool:
    """Whether tile ``coord`` of ``size`` rows provably ends within ``extent``: the coordinate is
    a non-negative loop variable whose (exclusive) bound is ``extent // size``, or a ``min`` with
    that among its arguments (the planner writes such bounds for the tiles it knows are whole),
    so a load of it needs no bounds mask."""
    if not isinstance(coord, n.Name) or coord.id not in loop_stops or coord.id not in known:
        return False  # an unknown coordinate, or a loop that may start below zero
    whole = n.Binary("//", extent, size)

    def within(stop: n.Expr) -> bool:
        if stop == whole:
            return True
        return isinstance(stop, n.Call) and stop.func == "min" and any(within(a) for a in stop.args)
    return within(loop_stops[coord.id])
