"""A bench row's outputs against the float64 reference (``reference.attention_reference``),
judged with attnforge's own numerics: ``numerics.o_row_bound`` row by row and ``O_TOLERANCE`` on
the norm, as kernel verification judges (``verify.run_case``).

The full float64 reference of a 16k row is too costly, so the reference is taken on slices of
the row, each exact: batches 0 and B-1, query heads 0 and Hq-1 (with their own K/V heads), and
query rows in chunks (the first, one in the middle at an odd offset, the last; every row when Sq
is small). A causal chunk ending at row e sees keys 0 .. e-1 + Sk - Sq only, so its keys are cut
there and the bottom-right mask of the cut problem is the row's mask.

Providers marked ``verified`` (attnforge) must keep every checked row within its bound and the
norm within O_TOLERANCE; a baseline is held to the norm only (it has its own rounding), which still
catches one computing another function (a top-left mask, say).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .matrix import Row

CHUNK = 32  # query rows per slice


@dataclass(frozen=True)
class Slice:
    b: int
    heads: tuple[int, ...]  # query heads
    kv_heads: tuple[int, ...]  # their K/V heads
    start: int  # query rows start .. stop - 1
    stop: int
    keys: int  # keys 0 .. keys - 1 can be visible to these rows


def slices(row: Row) -> list[Slice]:
    batches = sorted({0, row.batch - 1})
    heads = tuple(sorted({0, row.heads - 1}))
    group = row.heads // row.kv_heads
    kv_heads = tuple(h // group for h in heads)
    sq, sk = row.seqlen_q, row.seqlen_k
    if sq <= 3 * CHUNK:
        ranges = [(0, sq)]
    else:
        middle = sq // 2 - CHUNK // 2 + 1
        ranges = [(0, CHUNK), (middle, middle + CHUNK), (sq - CHUNK, sq)]
    out = []
    for b in batches:
        for start, stop in ranges:
            keys = max(0, min(sk, sk - sq + stop)) if row.causal else sk
            out.append(Slice(b, heads, kv_heads, start, stop, keys))
    return out


def _numpy(t: Any) -> np.ndarray:
    return t.double().cpu().numpy()


class RowReference:
    """The reference on a row's slices, computed once; ``judge`` compares one provider's output."""

    def __init__(self, row: Row, q: Any, k: Any, v: Any):
        from ..numerics import o_row_bound
        from ..reference import attention_reference
        from ..verify import score_error_bound

        self.row = row
        self.slices = slices(row)
        self.refs: list[np.ndarray] = []
        self.bounds: list[np.ndarray] = []
        scale = 1.0 / math.sqrt(row.head_dim)
        for s in self.slices:
            qs = q[s.b, list(s.heads), s.start:s.stop].unsqueeze(0).cpu()
            ks = k[s.b, list(s.kv_heads), :s.keys].unsqueeze(0).cpu()
            vs = v[s.b, list(s.kv_heads), :s.keys].unsqueeze(0).cpu()
            vd = _numpy(vs)
            ref_o, _lse, p, l = attention_reference(_numpy(qs), _numpy(ks), vd, scale=scale, causal=row.causal, weights=True)
            score_err = score_error_bound(qs, ks, scale, row.dtype).numpy()
            self.refs.append(ref_o)
            self.bounds.append(o_row_bound(p, l, vd, ref_o, score_err, row.dtype, row.dtype))

    @property
    def rows_checked(self) -> int:
        return sum(len(s.heads) * (s.stop - s.start) for s in self.slices)

    def judge(self, out: Any, *, row_bounds: bool) -> dict:
        from ..numerics import O_TOLERANCE, worst_row

        row = self.row
        tol = O_TOLERANCE[row.dtype]
        want = (row.batch, row.heads, row.seqlen_q, row.head_dim)
        how = (f"float64 reference on {self.rows_checked} query rows (batches, heads and row chunks of the row)"
               + (", each row within numerics.o_row_bound" if row_bounds else "") + f", ||O - ref|| / ||ref|| <= {tol:g}")
        if tuple(getattr(out, "shape", ())) != want:
            return {"passed": False, "problem": f"output shape {tuple(getattr(out, 'shape', ()))}, expected {want}", "how": how}
        diff2 = ref2 = 0.0
        worst = (-1.0, "")
        for s, ref, bound in zip(self.slices, self.refs, self.bounds):
            got = _numpy(out[s.b, list(s.heads), s.start:s.stop]).reshape(ref.shape)
            nan_rows = np.isnan(got).any(axis=-1)
            err = np.where(nan_rows, np.inf, np.linalg.norm(np.nan_to_num(got - ref), axis=-1))
            diff2 += float(np.sum(np.where(np.isfinite(err), err, 0.0) ** 2)) + (math.inf if nan_rows.any() or not np.isfinite(got).all() else 0.0)
            ref2 += float(np.sum(ref**2))
            (_, h, r), ratio = worst_row(err, bound)
            if ratio > worst[0]:
                worst = (ratio, f"b={s.b} h={s.heads[h]} row={s.start + r}")
        err_o = math.sqrt(diff2 / ref2) if ref2 > 0 else (0.0 if diff2 == 0 else math.inf)
        problems = []
        if row_bounds and not worst[0] <= 1.0:
            problems.append(f"O at {worst[1]} is {worst[0]:.3g} of its bound")
        if not err_o <= tol:
            problems.append(f"||O - ref|| / ||ref|| = {err_o:.3g} > {tol:g}")
        result = {"passed": not problems, "err_o": err_o, "tol_o": tol, "o_ratio": worst[0], "worst_row": worst[1], "how": how}
        if problems:
            result["problem"] = "; ".join(problems)
        return result
