"""Which online softmaxes of a kernel a translator may run in base 2.

``exp(x)`` costs a multiply by log2(e) and an ``ex2`` on the GPU. When the scores of an online
softmax come straight from ``Compute Multiply S, scale`` (masks in between are fine: -inf stays
-inf under a positive factor), the translator can fold log2(e) into that multiply, run the
softmax with ``exp2`` and keep its running max in log2 units: one multiply per score fewer, the
same weights (the scale's sign does not matter: the running max is taken of the scaled scores).
The log-sum-exp converts back (``m * ln 2 + log(l)``).

A running max goes to base 2 only when every online softmax that updates it can, and nothing
but online softmaxes and log-sum-exps reads it; nothing but its scale, masks and online softmaxes
may read the scores' tile (after the softmax its values are in log2 units).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tl import nodes as n
from ..tl.resources import stmt_reads

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@dataclass(frozen=True)
class Base2:
    """``multiplies``: ids of the ``Multiply`` statements that take log2(e) too; ``softmaxes``:
    ids of the online softmaxes that run in base 2; ``states``: their running maxima."""

    multiplies: frozenset[int] = frozenset()
    softmaxes: frozenset[int] = frozenset()
    states: frozenset[str] = frozenset()


def _blocks(body: tuple[n.Stmt, ...]):
    yield body
    for s in body:
        if isinstance(s, (n.Loop, n.Role)):
            yield from _blocks(s.body)


def _statements(body: tuple[n.Stmt, ...]):
    for block in _blocks(body):
        yield from block


def _scale_of(block: tuple[n.Stmt, ...], i: int, scores: str) -> n.Elementwise | None:
    """The in-place ``Compute Multiply scores, <scalar>`` before ``block[i]``, past masks of scores."""
    j = i - 1
    while j >= 0 and isinstance(block[j], n.Mask) and block[j].target == scores:
        j -= 1
    if j < 0:
        return None
    s = block[j]
    if not (isinstance(s, n.Elementwise) and s.op == "Multiply" and s.out in (None, scores) and len(s.args) == 2):
        return None
    first, factor = s.args
    return s if isinstance(first, n.Name) and first.id == scores and scores not in n.expr_names(factor) else None


def _read_elsewhere(kernel: n.Kernel, scores: str) -> bool:
    """Whether anything but a scale, a mask or an online softmax reads ``scores`` anywhere in the
    kernel (after the softmax its values would be in log2 units)."""
    def reads(t: n.Stmt) -> bool:
        if isinstance(t, (n.Mask, n.OnlineSoftmax)):
            return False
        if isinstance(t, n.Elementwise) and t.op == "Multiply" and t.out in (None, scores):
            return scores in n.expr_names(t.args[1])
        return scores in stmt_reads(t)
    return any(reads(t) for t in _statements(kernel.body))


def base2_softmax(kernel: n.Kernel, scalars: frozenset[str]) -> Base2:
    """The base-2 plan of ``kernel``; ``scalars``: the names a scale may be made of (the
    kernel's scalars, parameters and sizes: a factor that reads a tile is not a scale)."""
    folds: dict[str, list[tuple[n.OnlineSoftmax, n.Elementwise | None]]] = {}
    for block in _blocks(kernel.body):
        for i, s in enumerate(block):
            if isinstance(s, n.OnlineSoftmax):
                scale = _scale_of(block, i, s.scores)
                if scale is not None and (not n.expr_names(scale.args[1]) <= scalars or _read_elsewhere(kernel, s.scores)):
                    scale = None
                folds.setdefault(s.row_max, []).append((s, scale))
    multiplies, softmaxes, states = set(), set(), set()
    for state, uses in folds.items():
        if any(scale is None for _, scale in uses):
            continue
        readers = [t for t in _statements(kernel.body) if state in stmt_reads(t) and not isinstance(t, (n.OnlineSoftmax, n.LogSumExp))]
        if readers:
            continue
        states.add(state)
        for softmax, scale in uses:
            softmaxes.add(id(softmax))
            multiplies.add(id(scale))
    return Base2(frozenset(multiplies), frozenset(softmaxes), frozenset(states))
