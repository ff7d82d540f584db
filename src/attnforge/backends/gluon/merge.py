"""The split-KV merge in the partial kernel's tail: where a decode program's second kernel is the
built-in planner's merge (``plan.builtin.one_split_axis``), the last split of each row tile to store
its partial result merges all of them, so the pair runs as one launch.

Each program stores its partial O and LSE into the scratch as the TL says, then (its warpgroup's
stores ordered before by a barrier) adds 1 to its row tile's counter in ``counters`` with acq_rel
order at GPU scope. The program that sees NSPLIT - 1 arrivals before its own is the last: every
other split's stores are visible to it (their release, its acquire), so it reads the splits back
(through L2: ``.cg``), merges them as the planner's combine kernel does -- the online softmax over
the splits' LSEs, O the weighted sum over the sum of weights, a row no split saw a key for 0 with
LSE -inf -- stores O and the LSE into o and lse, and sets the counter back to 0 for the next launch
on the stream (``runtime.merge_counters``). The merge reads 4 bytes a split for each of a tile's
rows and Dv * 4 bytes for its O: a few KiB at decode's few packed rows, where the second kernel
cost a launch and a round trip through scratch."""

from __future__ import annotations

from dataclasses import replace

from ...analysis import LN2, LOG2E
from ...tl import nodes as n
from .compute import _row_offsets, view_base
from .writer import MERGED_OUTPUT_STRIDES, Writer

MERGE_ROWS = 16  # rows merged at once: a split's O chunk is MERGE_ROWS * Dv / 128 fp32 registers a thread
SPLITS_AT_ONCE = 4  # splits whose loads are in flight together


# one split's part folded into the running max m_r (log2 units), sum l_r and output acc: the combine kernel's OnlineSoftmax
_ONLINE_UPDATE = ("m_new = gl.maximum(m_r, lse_{i})",
                  "m_use = gl.where(m_new == -float('inf'), 0.0, m_new)  # no split with a key yet: exp2(-inf) = 0, not nan",
                  "alpha = gl.exp2(m_r - m_use)",
                  "w = gl.exp2(lse_{i} - m_use)",
                  "l_r = l_r * alpha + w",
                  "acc = acc * gl.expand_dims(alpha, 1) + o_{i} * gl.expand_dims(w, 1)",
                  "m_r = m_new")


def _final_views(m: Writer) -> tuple[n.Allocate, n.Allocate]:
    """The views of o and lse the merge stores into: the partial kernel's scratch views with the split's
    index taken out (``one_split_axis`` checked that the combine kernel's views are exactly these)."""
    out = []
    for copy, tensor in ((m.hk.epilogue[2], "o"), (m.hk.epilogue[3], "lse")):
        view = m.hk.views[copy.dst]
        split = next(i for i, e in enumerate(view.offset) if e == n.Name(m.split_axis))
        out.append(replace(view, tensor=tensor, offset=view.offset[:split] + view.offset[split + 1:]))
    return out[0], out[1]


def tile_index(m: Writer) -> str:
    """The row tile's counter: the grid coordinates other than the split's, flattened (last fastest)."""
    index = None
    for ax in m.hk.kernel.grid:
        if ax.name != m.split_axis:
            index = ax.name if index is None else f"({index}) * ({m.dev(ax.extent)}) + {ax.name}"
    return index or "0"


def merge_fn(m: Writer) -> None:
    """``_merge_splits``: the compute warpgroup's last act in a split-KV partial kernel (``MERGE``)."""
    o_view, lse_view = _final_views(m)
    (o_part, o_strides), (lse_part, lse_strides) = m.outputs()
    o_views, lse_views = (m.hk.views[c.dst] for c in m.hk.epilogue[2:4])
    split = m.split_axis
    dv = m.head_dim_v
    cols = min(32, dv // 4)  # threads along a row: 4 consecutive fp32 each (16-byte loads)
    rows_total = m.dev(o_view.shape[0])
    rt = ", ".join(m.runtime_args())
    m.emit("@gluon.jit")
    m.emit(f"def _merge_splits({rt}):")
    m.emit('"""The last split of this row tile to finish merges them all into o and lse (gluon/merge.py)."""', 1)
    m.emit("gl.thread_barrier()  # every warp of the warpgroup has stored its rows of this split", 1)
    m.emit(f"tile = {tile_index(m)}", 1)
    m.emit('arrived = gl.atomic_add(counters + tile, 1, sem="acq_rel", scope="gpu")  # the splits before this one', 1)
    m.emit(f"if arrived == {m.launch_name} - 1:  # the last: every split's stores are visible", 1)
    m.emit("gl.store(counters + tile, 0)  # back to 0 for the next launch on this stream", 2)
    m.emit(f"layout: gl.constexpr = gl.BlockedLayout([1, 4], [{32 // cols}, {cols}], [WG_WARPS, 1], [1, 0])", 2)
    m.emit("cols = gl.expand_dims(gl.arange(0, Dv, layout=gl.SliceLayout(0, layout)), 0)", 2)
    m.emit(f"for r0 in range(0, gl.minimum(BM, {rows_total} - m * BM), {MERGE_ROWS}):  # the tile's rows that exist", 2)
    m.emit(f"rows = m * BM + r0 + gl.arange(0, {MERGE_ROWS}, layout=gl.SliceLayout(1, layout))", 3)
    m.emit(f"ok = rows < {rows_total}", 3)
    m.emit(f"m_r = gl.full([{MERGE_ROWS}], -float('inf'), gl.float32, gl.SliceLayout(1, layout))  # the running max, log2 units", 3)
    m.emit(f"l_r = gl.zeros([{MERGE_ROWS}], gl.float32, gl.SliceLayout(1, layout))", 3)
    m.emit(f"acc = gl.zeros([{MERGE_ROWS}, Dv], gl.float32, layout)", 3)
    # SPLITS_AT_ONCE splits' loads issued together, then their updates: one L2 round trip for them, not one each
    m.emit(f"for first in range(0, {m.launch_name}, {SPLITS_AT_ONCE}):", 3)
    for i in range(SPLITS_AT_ONCE):
        m.emit(f"{split} = first + {i}", 4)
        m.emit(f"ok_{i} = ok & ({split} < {m.launch_name})", 4)
        m.emit(f"lse_{i} = gl.load({lse_part} + {view_base(m, lse_views, lse_strides)} + {_row_offsets(m, lse_views, 'rows', lse_strides)}, "
               f"mask=ok_{i}, other=-float('inf'), cache_modifier='.cg') * {LOG2E}", 4)
        m.emit(f"o_{i} = gl.load({o_part} + {view_base(m, o_views, o_strides)} + gl.expand_dims({_row_offsets(m, o_views, 'rows', o_strides)}, 1) + cols, "
               f"mask=gl.expand_dims(ok_{i}, 1), other=0.0, cache_modifier='.cg')", 4)
    for i in range(SPLITS_AT_ONCE):  # a split past NSPLIT: LSE -inf, weight 0, the state unchanged
        for line in _ONLINE_UPDATE:
            m.emit(line.format(i=i), 4)
    o_s, l_s = MERGED_OUTPUT_STRIDES["o"], MERGED_OUTPUT_STRIDES["lse"]
    m.emit("out = acc * gl.expand_dims(gl.where(l_r == 0.0, 0.0, 1.0 / l_r), 1)  # a row no split saw a key for: 0", 3)
    m.emit(f"gl.store(o + {view_base(m, o_view, o_s)} + gl.expand_dims({_row_offsets(m, o_view, 'rows', o_s)}, 1) + cols * {o_s[-1]}, "
           "out.to(o.dtype.element_ty), mask=gl.expand_dims(ok, 1))", 3)
    m.emit(f"gl.store(lse + {view_base(m, lse_view, l_s)} + {_row_offsets(m, lse_view, 'rows', l_s)}, "
           f"gl.where(l_r == 0.0, -float('inf'), (m_r + gl.log2(l_r)) * {LN2!r}), mask=ok)", 3)
    m.emit()
