"""The compute role of a Hopper-form kernel in Gluon: the scores of a tile (modifiers, mask, online
softmax in base 2), and the tile loop placed by the schedule parameters -- warpgroups taking
turns at the tensor cores in order (``pingpong``), the next tile's QK^T issued before the softmax (``overlap``)
-- then the epilogue (normalise, log-sum-exp, the stores of O and LSE)."""

from __future__ import annotations

from ...tl import nodes as n
from ...tl.printer import expr as show_expr
from ...tl.printer import stmt as stmt_lines
from .shape import O_STAGE_NAME, Q_FREE_NAME, TileLoop, _fail
from ...analysis import LN2, LOG2E
from .writer import Q_STRIDES, Writer, next_work_tile, shared_args, tile_coordinates, work_tiles


def _folded(m: Writer, loop: TileLoop) -> bool:
    """Whether the loop's online softmax runs in base 2 (log2(e) folded into the scale that feeds
    it), by the plan every translator follows (``analysis.base2_softmax``)."""
    return id(loop.softmax) in m.base2.softmaxes


def fused_factor(m: Writer, loop: TileLoop) -> n.Expr | None:
    """The folded scale when it can go into the softmax's exp2 FMA (no pass over the tile): the
    scores' only statement, a runtime scalar or a number, whose sign the launch knows
    (``SCALE_POSITIVE``); None otherwise."""
    if not _folded(m, loop) or len(loop.scores) != 1:
        return None
    factor = loop.scores[0].args[1]
    if isinstance(factor, n.Num) or (isinstance(factor, n.Name) and factor.id in m.scalars):
        return factor
    return None


def _online_softmax(m: Writer, k: str, indent: int) -> None:
    """P = exp2(S * k - m), the running max m kept in log2 units: max(S) * k (``k``: "" when the
    scores carry log2(e) already, else " * x" for a positive x)."""
    m.emit(f"m_new = gl.maximum(m_i, gl.max(S, axis=1){k})", indent)
    m.emit("m_use = gl.where(m_new == -float('inf'), 0.0, m_new)  # a row with no key yet: exp2(-inf) = 0, not nan", indent)
    m.emit(f"P = gl.exp2(S{k} - gl.expand_dims(m_use, 1))", indent)
    m.emit("alpha = gl.exp2(m_i - m_use)", indent)


def softmax_fn(m: Writer, loop: TileLoop, masked_from: str | None) -> None:
    """The scores of tile j, from the QK^T accumulator to P and the online-softmax state."""
    factor = fused_factor(m, loop)
    rt = ", ".join(m.runtime_args())
    m.emit("@gluon.jit")
    m.emit(f"def _scores(S, m_i, l_i, j, rows, split, {rt}, s_layout: gl.constexpr, SCALE_POSITIVE: gl.constexpr, MASKED: gl.constexpr):")
    extra = {"q_idx": "q_idx", "kv_idx": "kv_idx", "score": "S", loop.loop.var: "j"}
    q_view = m.hk.q_view
    if q_view.pack is not None:  # packed rows: row r is position r // G of query head (first head) + r % G
        group = m.dev(q_view.pack)
        q_rows = f"(rows // ({group}))"
        m.emit(f"q_idx = gl.expand_dims({q_rows}, 1)", 1)
        m.emit(f"h_idx = gl.expand_dims({m.dev(q_view.offset[-1])} + rows % ({group}), 1)", 1)
        extra["h_idx"] = "h_idx"
    else:
        q_rows = "rows"
        m.emit("q_idx = gl.expand_dims(rows, 1)", 1)
    m.emit("key_off = gl.expand_dims(gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout)), 0)  # the tile's keys, from j * BN", 1)
    m.emit("kv_idx = j * BN + key_off", 1)
    for s in loop.scores:
        m.tl(s, 1)
        if isinstance(s, n.ScoreMod):
            m.emit(f"S = {m.dev(s.expr, extra)}", 1)
        elif factor is not None:  # fused: a positive scale goes into the softmax's FMA below
            m.emit(f"c = ({m.dev(factor, extra)}) * {LOG2E}", 1)
            m.emit("if not SCALE_POSITIVE:  # max(S * c) is max(S) * c only for c > 0; scaled first, the mask keeps -inf", 1)
            m.emit("S = S * c", 2)
        else:
            by = m.dev(s.args[1], extra)
            m.emit(f"S = S * ({by} * {LOG2E})" if id(s) in m.base2.multiplies else f"S = S * ({by})", 1)
    if loop.mask is not None:
        m.tl(loop.mask, 1)
        keep = _keep(m, loop.mask.keep, extra, q_rows, absolute=_by_key_index(m))
        if masked_from is None:
            m.emit(f"S = gl.where({keep}, S, -float('inf'))", 1)
        else:  # tiles before ``split`` are seen whole by every row: no mask (MASKED: the loop may reach split, ``_tile_loops``)
            m.emit("if MASKED:", 1)
            m.emit("if j >= split:", 2)
            m.emit(f"S = gl.where({keep}, S, -float('inf'))", 3)
    m.tl(loop.softmax, 1)
    # the running max is kept in log2 units in every case (the epilogue's LSE reads it so)
    if factor is not None:  # m = max(S) * c, for c > 0
        m.emit("if SCALE_POSITIVE:", 1)
        _online_softmax(m, " * c", 2)
        m.emit("else:  # scaled above", 1)
        _online_softmax(m, "", 2)
    elif _folded(m, loop):  # the scores carry log2(e) already
        _online_softmax(m, "", 1)
    else:  # natural units: exp(x) = exp2(x * log2(e))
        _online_softmax(m, f" * {LOG2E}", 1)
    m.emit("l_i = l_i * alpha + gl.sum(P, axis=1)", 1)
    m.tl(loop.p_cast, 1)
    m.emit("return P.to(DTYPE), alpha, m_new, l_i  # (cast here: a 16-bit P is half the registers across the loop)", 1)
    m.emit()


def _conjuncts(e: n.Expr) -> list[n.Expr]:
    return _conjuncts(e.left) + _conjuncts(e.right) if isinstance(e, n.Binary) and e.op == "and" else [e]


# kv_idx OP bound: (which bound it is, what to add to the bound to make it inclusive)
_KEY_BOUNDS = {"<": ("upper", " - 1"), "<=": ("upper", ""), ">": ("lower", " + 1"), ">=": ("lower", "")}
_INT_BOUND_NAMES = frozenset({"q_idx", "Sq", "Sk", "window_left", "window_right"})  # integers, one q_idx per row


def _integer_row_bound(e: n.Expr) -> bool:
    """Whether ``e`` is an integer of the row's query position and the sizes only (+, -, * of
    integer literals and those names): one value per row, exact as a bound (a fractional one, or one
    of the head, stays a term of its own)."""
    if isinstance(e, n.Num):
        return isinstance(e.value, int)
    if isinstance(e, n.Name):
        return e.id in _INT_BOUND_NAMES
    if isinstance(e, n.Unary):
        return e.op == "-" and _integer_row_bound(e.operand)
    return isinstance(e, n.Binary) and e.op in ("+", "-", "*") and _integer_row_bound(e.left) and _integer_row_bound(e.right)


def _keep(m: Writer, keep: n.Expr, extra: dict[str, str], q_rows: str, absolute: bool = False) -> str:
    """The Mask's keep condition over the (HM, BN) score tile. Its terms that bound the key index by
    the row (``kv_idx < Sk``, ``kv_idx <= q_idx + Sk - Sq``, a window's) become one per-row upper and
    lower bound, compared with the tile's key offsets: two compares a score, the bounds computed once
    a row, instead of each term's arithmetic on a (HM, BN) index tile (whose registers made the
    persistent causal kernel at D = 128 spill). Other terms (a mask_mod; a bound that is not an
    integer of q_idx and the sizes) stay as written. ``q_rows``:
    the rows' query positions, one per row (q_idx is them as a column).

    ``absolute``: a per-row bound compared with the keys' own indices (kv_idx) rather than less j * BN
    with the tile's offsets. The offsets do not change from tile to tile, so the compiler keeps them in
    registers across the loop (BN / 4 a thread); the indices it folds into the compares. Compiled for
    sm_90a, the causal D = 64 kernel over three warpgroups (160 registers a thread, BM = 192, BN = 128):
    the offsets spilled 40 bytes, the indices none; likewise the causal D = 128 kernel of one program per work tile
    with Q in registers (``qreg``): 8 bytes with the offsets at 4k and 16k keys, none with the indices. The other
    kernels keep the offsets (they were timed so; ``_by_key_index``)."""
    bounds: dict[str, list[str]] = {"upper": [], "lower": []}
    rest = []
    for c in _conjuncts(keep):
        if isinstance(c, n.Binary) and c.op in _KEY_BOUNDS and c.left == n.Name("kv_idx") and _integer_row_bound(c.right):
            side, inclusive = _KEY_BOUNDS[c.op]
            per_row = "q_idx" in n.expr_names(c.right)
            bounds[side].append((f"({m.dev(c.right, {**extra, 'q_idx': q_rows})}){inclusive}", per_row))
        else:
            rest.append(f"({m.dev(c, extra)})")
    if not bounds["upper"] and not bounds["lower"]:
        return m.dev(keep, extra)
    terms = []
    for side, pick in (("upper", "gl.minimum"), ("lower", "gl.maximum")):
        if bounds[side]:
            bound = bounds[side][0][0]
            for b, _ in bounds[side][1:]:
                bound = f"{pick}({bound}, {b})"
            row_bound = any(per_row for _, per_row in bounds[side])
            by_index = absolute and row_bound
            bound = bound if by_index else f"({bound}) - j * BN"
            if row_bound:  # a bound per row: computed on the rows, then a column
                bound = f"gl.expand_dims({bound}, 1)"
            terms.append(f"({'kv_idx' if by_index else 'key_off'} {'<=' if side == 'upper' else '>='} {bound})")
    return " & ".join(terms + rest)


def _by_key_index(m: Writer) -> bool:
    """Whether the Mask's per-row key bounds are compared with the keys' indices rather than the tile's key offsets
    (``_keep``'s ``absolute``): where the offsets' registers across the loop made a kernel spill -- the tile loop written as
    two (``_loops_split``: two TL loops, three or more warpgroups), and Q in registers in a kernel of one program per work
    tile (measured there: the causal D = 128 kernels; any Mask of such a kernel is compared so)."""
    return _loops_split(m) or (m.hk.q_in_registers and not m.hk.persistent)


def _wait_tile(m: Writer, w: n.Wait, var: str, at: n.Expr, indent: int) -> None:
    """The TL's Wait for tile ``at`` (the loop's own tile, the next one, the first or the last)."""
    index = m.ring_at(w.barrier.index, var, at) if w.barrier.index is not None else None
    placed = n.Wait(n.BarrierRef(w.barrier.name, index), m.ring_at(w.phase, var, at))
    m.emit(f"# TL: {stmt_lines(w)[0].strip()}" + ("" if placed == w else f"  (for tile {show_expr(at)}: {stmt_lines(placed)[0].strip()})"), indent)
    m.emit(f"mbarrier.wait({m.bar(placed.barrier)}, {m.dev(placed.phase)})", indent)


def _q_operand(m: Writer) -> str:
    """The QK^T GEMMs' A operand: the warpgroup's rows of Qs (``q_t``, shared memory), or with ``qreg`` those rows read
    into registers once a work tile (``q_r``: ``_q_to_registers``)."""
    return "q_r" if m.hk.q_in_registers else "q_t"


def _issue_qk(m: Writer, t: TileLoop, at: n.Expr, indent: int, q: str | None = None) -> None:
    q = q or _q_operand(m)
    m.tl(t.qk, indent)
    slot = m.dev(m.ring_at(t.qk.b_index, t.loop.var, at))
    m.emit(f"k_t = {t.qk.b}.index({slot}).reshape([BN, D]).permute((1, 0))", indent)
    m.emit(f"S = warpgroup_mma({q}, k_t, gl.zeros([HM, BN], gl.float32, s_layout), use_acc=False, is_async=True)", indent)


def _issue_pv(m: Writer, t: TileLoop, at: n.Expr, indent: int) -> None:
    m.tl(t.p_reshape, indent)
    m.emit("p = gl.convert_layout(P, p_layout)", indent)
    m.tl(t.pv, indent)
    slot = m.dev(m.ring_at(t.pv.b_index, t.loop.var, at))
    m.emit(f"v_t = {t.pv.b}.index({slot}).reshape([BN, Dv])", indent)
    m.emit("acc = warpgroup_mma(p, v_t, acc, is_async=True)", indent)


def _arrive(m: Writer, t: TileLoop, release: n.Arrive, at: n.Expr, indent: int) -> None:
    m.tl(release, indent)
    ref = release.barrier
    m.emit(f"mbarrier.arrive({m.bar(n.BarrierRef(ref.name, m.ring_at(ref.index, t.loop.var, at) if ref.index is not None else None))}, count=1)", indent)


def _release(m: Writer, t: TileLoop, at: n.Expr, indent: int) -> None:
    """Tile ``at``'s slot given back after its PV GEMM (V's; K's too without the TL's ``k_release``)."""
    _arrive(m, t, t.release, at, indent)


def release_k(m: Writer, t: TileLoop, at: n.Expr, indent: int) -> None:
    """Tile ``at``'s K slot given back once its QK^T GEMM is done (where the TL gives K back on its own):
    the load role refills it while the softmax and the PV GEMM of the tile run."""
    if t.k_release is None:
        return
    if m.hk.o_via_kv:  # ostage = 3: set 0 keeps the work tile's last K slot for its rows of O (_store_o_via_kv gives it back)
        m.emit(f"if WG != 0 or {m.dev(at)} < hi - 1:", indent)
        indent += 1
    _arrive(m, t, t.k_release, at, indent)


def _in_turn(m: Writer, t: TileLoop, indent: int, qk: n.Expr | None = None, pv: n.Expr | None = None, q: str | None = None) -> None:
    """The GEMMs issued in one ping-pong turn: tile ``qk``'s QK^T (with Q's tile ``q``, by default ``_q_operand``), then tile
    ``pv``'s PV (either may be absent)."""
    _turn(m, indent, take=True)
    if qk is not None:
        _issue_qk(m, t, qk, indent, q)
    if pv is not None:
        _issue_pv(m, t, pv, indent)
    _turn(m, indent, take=False)


def _turn(m: Writer, indent: int, take: bool) -> None:
    if not m.hk.pingpong:
        return
    if take:
        m.emit("_take_turn(WG)  # this warpgroup's turn to issue GEMMs", indent)
    else:
        m.emit("_pass_turn(WG)  # the next warpgroup's turn", indent)


# The ping-pong turn on hardware named barriers, one per warpgroup: the last SETS of the 16 ids (past the few Triton's
# partitions use; 14 and 15 for two warpgroups). A warpgroup takes its turn with bar.sync on its own; the one before it
# (WG - 1, the last before the first) passes it with bar.arrive, each warp once it has issued its GEMMs, without waiting
# (an mbarrier's one elected arrival needs the warpgroup's bar.sync first: measured on the H200, bench/RESULTS.md
# 2026-12-02 run 9, 0.5-4% slower). The last warpgroup passes once up front: warpgroup 0 goes first.
TURN_BARRIERS_END = 16


# ostage = 3: two more named barriers below the turns' (12 and 13 beside two warpgroups' 14 and 15; the translator takes
# ostage = 3 with two sets only, shape._check_o_via_kv), each passed by one set and waited on by the other before it writes its
# rows of O into a ring slot the passing set's GEMM read: K_READ, set 1's last QK^T GEMM is done (set 0 writes the last
# tile's K slot); V_READ, set 0's last PV GEMM is done (set 1 writes its V slot).
K_READ_BARRIER = TURN_BARRIERS_END - 4
V_READ_BARRIER = TURN_BARRIERS_END - 3


def turn_helpers(m: Writer) -> None:
    """``_take_turn`` and ``_pass_turn`` (pingpong): one bar.sync / bar.arrive a thread of the warpgroup, on named
    barrier TURN_BARRIERS_END - SETS + the warpgroup taking the turn, which completes with its threads and the passer's.
    With ``ostage = 3`` also ``_pair_sync`` and ``_pair_arrive`` (one set waits on named barrier ID, the other passes it)."""
    threads = 2 * 32 * m.warps_per_set
    first = f"{TURN_BARRIERS_END} - SETS"
    helpers = [("_take_turn", "sync", "WG", f"{first} + WG"), ("_pass_turn", "arrive", "WG", f"{first} + (WG + 1) % SETS")]
    if m.hk.o_via_kv:
        assert m.hk.sets == 2, "ostage = 3's barriers sit below two sets' turns"  # (shape._check_o_via_kv refuses other counts)
        helpers += [("_pair_sync", "sync", "ID", "ID"), ("_pair_arrive", "arrive", "ID", "ID")]
    for name, op, arg, bar in helpers:
        m.emit("@gluon.jit")
        m.emit(f"def {name}({arg}: gl.constexpr):")
        m.emit(f"one_a_thread: gl.constexpr = gl.BlockedLayout([1], [32], [WG_WARPS], [0])", 1)
        m.emit(f'gl.inline_asm_elementwise("bar.{op} $1, {threads}; mov.u32 $0, 0;", "=r,r", '
               f"[gl.full([32 * WG_WARPS], {bar}, gl.int32, one_a_thread)], dtype=gl.int32, is_pure=False, pack=1)", 1)
        m.emit()


def _softmax_call(at: str, rt: str, masked: bool = True, suffix: str = "") -> str:
    """The scores of tile ``at``; ``masked``: it may be at or past ``split`` (else the Mask is left out); ``suffix``: of the
    work tile whose row state, rows and coordinates carry it (``rt`` names those), "" this one's."""
    x = suffix
    return f"P{x}, alpha, m_i{x}, l_i{x} = _scores(S, m_i{x}, l_i{x}, {at}, rows{x}, split, {rt}, s_layout, SCALE_POSITIVE, {masked})"


def _first_tile(m: Writer, rt: str, indent: int) -> None:
    """An overlapped kernel's first K/V tile ``lo``: its QK^T GEMM alone in a turn, waited for, K's slot given back, scored."""
    t = m.hk.loops[-1]
    _wait_tile(m, t.k_wait, t.loop.var, n.Name("lo"), indent)
    _in_turn(m, t, indent, qk=n.Name("lo"))
    m.emit(f"S, _, _ = warpgroup_mma_wait(0, deps=(S, {_q_operand(m)}, k_t))", indent)
    release_k(m, t, n.Name("lo"), indent)
    _first_scores(m, rt, indent)


def _first_scores(m: Writer, rt: str, indent: int, suffix: str = "") -> None:
    """The scores of the work tile's first K/V tile ``lo`` (three or more warpgroups: the Mask only at or past ``split``)."""
    if _loops_split(m):  # (as the loops: the Mask's registers only where the tile needs it)
        m.emit("if lo < split:", indent)
        m.emit(_softmax_call("lo", rt, False, suffix), indent + 1)
        m.emit("else:", indent)
        m.emit(_softmax_call("lo", rt, True, suffix), indent + 1)
    else:
        m.emit(_softmax_call("lo", rt, True, suffix), indent)


ROWS_OF = "{} * BM + WG * HM + gl.arange(0, HM, layout=gl.SliceLayout(1, s_layout))"  # a warpgroup set's query rows of row tile {}


def row_state(m: Writer) -> None:
    """The compute role's register tiles: the running max and sum of each row (O_acc is the caller's)."""
    for s in m.hk.state:
        m.tl(s, 1)
    m.emit("m_i = gl.full([HM], -float('inf'), gl.float32, gl.SliceLayout(1, s_layout))", 1)
    m.emit("l_i = gl.zeros([HM], gl.float32, gl.SliceLayout(1, s_layout))", 1)


def tile_bounds(m: Writer) -> None:
    """The wait for Q, and the tile loops' range: ``lo`` to ``hi``, masked from ``split`` on (the
    TL's two loops, unmasked then masked, become one)."""
    hk = m.hk
    if hk.q_load is not None:
        _gather_q(m, hk.q_load)
    else:
        m.tl(hk.q_wait, 1)
        m.emit(f"mbarrier.wait({_q_ready(m, 'tiles')})", 1)
        if hk.q_in_registers:
            _q_to_registers(m)
    for loop in hk.loops:
        m.tl(loop.loop, 1)
    for line in _bounds(m):
        m.emit(line, 1)


def _q_to_registers(m: Writer) -> None:
    """``qreg``: the warpgroup's rows of Qs read into registers as wgmma's A operand, once a work tile: each QK^T GEMM then
    reads only K from shared memory (of a K/V tile's 80 KiB of shared reads a warpgroup at D = 128, Q's 16 KiB), and a
    persistent kernel gives Qs back at once, so that the next work tile's Q loads under this one's whole tile loop
    (rather than under its last PV GEMM and epilogue: ``_give_q_back``). The registers' cost: HM x D 16-bit values a
    warpgroup, 32 a thread at D = 128 (the checker counts them)."""
    m.emit("# qreg = 1: Q's rows into registers for every QK^T GEMM (wgmma's A from registers)", 1)
    m.emit("q_r = q_t.load(gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))", 1)
    if m.hk.persistent:
        m.emit(f"mbarrier.arrive({Q_FREE_NAME}, count=1)  # Qs given back at once: the next work tile's Q loads under this one", 1)


def _bounds(m: Writer) -> list[str]:
    """The tile loops' range, ``lo`` to ``hi``, masked from ``split`` on (the TL's two loops, unmasked then masked, become one)."""
    loops = m.hk.loops
    split = m.dev(loops[0].loop.stop) if len(loops) == 2 else "lo"
    return [f"lo = {m.dev(loops[0].loop.start)}", f"hi = {m.dev(loops[-1].loop.stop)}", f"split = {split}  # tiles from here on are masked"]


def _q_ready(m: Writer, tiles: str) -> str:
    """The arguments of the wait for work tile number ``tiles``' Q: its barrier completes once per work tile in a
    persistent kernel (shape checks), so the phase moves on by the tiles done; chained, once per work tile of its
    parity, one barrier for each."""
    phase = m.dev(m.hk.q_wait.phase)
    if m.hk.chain:
        return f"{m.bar(m.hk.q_wait.barrier)}.index(({tiles}) % 2), (({phase}) + ({tiles}) // 2) % 2"
    if m.hk.persistent:
        return f"{m.bar(m.hk.q_wait.barrier)}, (({phase}) + {tiles}) % 2"
    return f"{m.bar(m.hk.q_wait.barrier)}, {phase}"


def _gather_q(m: Writer, copy: n.Copy) -> None:
    """The compute role's own copy of Q into shared memory (a split-KV kernel's few rows; packed,
    each row from its own head): pointer loads, then a fence so that wgmma, reading shared memory
    through the async proxy, sees the stores."""
    view = m.hk.q_view
    cols = min(32, m.head_dim // 8)  # 8 elements (16 bytes) a thread, a row's columns across a warp's threads
    m.tl(copy, 1)
    m.emit(f"q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [{32 // cols}, {cols}], [WG_WARPS, 1], [1, 0])", 1)
    m.emit("q_rows = m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, q_layout))", 1)
    m.emit("q_cols = gl.arange(0, D, layout=gl.SliceLayout(0, q_layout))", 1)
    m.emit(f"q_base = q + {view_base(m, view, Q_STRIDES)}", 1)
    m.emit(f"q_ptrs = q_base + gl.expand_dims({_row_offsets(m, view, 'q_rows', Q_STRIDES)}, 1) + gl.expand_dims(q_cols * sq_d, 0)", 1)
    m.emit(f"{copy.dst}.store(gl.load(q_ptrs, mask=gl.expand_dims(q_rows < {m.dev(view.shape[0])}, 1), other=0.0))", 1)
    m.emit("fence_async_shared()", 1)


def compute_fn(m: Writer) -> None:
    hk, t = m.hk, m.hk.loops[-1]
    j = t.loop.var
    J = n.Name(j)
    rt = ", ".join(m.runtime_args())
    shared = ", ".join(shared_args(hk))
    m.emit("@gluon.jit")
    merge = ", MERGE: gl.constexpr" if m.merge else ""
    m.emit(f"def _compute(WG: gl.constexpr, {shared}, {', '.join(m.role_args())}, SCALE_POSITIVE: gl.constexpr{merge}):")
    m.emit(f"# TL: {stmt_lines(hk.compute)[0].strip()}" + (f"  (pingpong: {hk.sets} warpgroups of BM // {hk.sets} rows each)" if hk.pingpong else ""), 1)
    m.emit("# Each warpgroup set owns HM rows; WG is its index (0 without pingpong).", 1)
    m.emit("s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WG_WARPS, 1], instr_shape=[16, BN, 16])", 1)
    m.emit("o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WG_WARPS, 1], instr_shape=[16, Dv, 16])", 1)
    m.emit("p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)", 1)
    m.emit("row_o: gl.constexpr = gl.SliceLayout(1, o_layout)", 1)
    q_name = hk.loops[0].qk.a
    if not hk.chain:  # (chained, each work tile's Q is in the slots of its parity)
        m.emit(f"q_t = {q_name}.index(WG).reshape([HM, D])" if m.q_parts > 1 else f"q_t = {q_name}.reshape([BM, D]).slice(WG * HM, HM)", 1)
    if hk.pingpong:
        m.emit("if WG == SETS - 1:  # warpgroup 0 takes the first turn", 1)
        m.emit("_pass_turn(WG)", 2)
    if hk.chain:
        _chained_tiles(m, rt)
        m.emit()
        return
    if hk.persistent:
        m.emit("it = 0  # the ring position of the work tile's first K/V tile: the K/V tiles of this program's earlier work tiles", 1)
        m.emit("tiles = 0  # work tiles done: Q's barriers complete once per work tile", 1)
        m.depth += work_tiles(m, 1)
    m.emit(f"rows = {ROWS_OF.format('m')}", 1)
    row_state(m)
    m.emit("acc = gl.zeros([HM, Dv], gl.float32, o_layout)", 1)
    m.emit("P = gl.zeros([HM, BN], DTYPE, s_layout)", 1)
    tile_bounds(m)
    if hk.overlap:
        m.emit("if lo < hi:  # the first tile's scores, before the loop", 1)
        _first_tile(m, rt, 2)
        _overlapped_loop(m, rt)
        _give_q_back(m)
        m.emit("if lo < hi:  # the last tile's PV GEMM", 1)
        last = n.Binary("-", n.Name("hi"), n.Num(1))
        _wait_tile(m, t.v_wait, j, last, 2)
        _in_turn(m, t, 2, pv=last)
        m.emit("acc, _, _ = warpgroup_mma_wait(0, deps=(acc, p, v_t))  # p: its registers stay live until the GEMM is done", 2)
        if hk.o_via_kv:  # set 1 keeps the last tile's V slot for its rows of O; set 0 says its last PV GEMM has read it
            m.emit("if WG == 0:", 2)
            _release(m, t, last, 3)
            m.emit(f"_pair_arrive({V_READ_BARRIER})  # set 1 may write its rows of O into that V slot", 3)
        else:
            _release(m, t, last, 2)
    else:
        for bounds, masked in _tile_loops(m, "lo", "hi", 0):
            m.emit(f"for {j} in range({bounds}):", 1)
            _wait_tile(m, t.k_wait, j, J, 2)
            _in_turn(m, t, 2, qk=J)
            m.tl(n.WaitGemm(t.qk.out), 2)
            m.emit(f"S, _, _ = warpgroup_mma_wait(0, deps=(S, {_q_operand(m)}, k_t))", 2)
            release_k(m, t, J, 2)
            m.emit(_softmax_call(j, rt, masked), 2)
            m.emit("acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)", 2)
            _wait_tile(m, t.v_wait, j, J, 2)
            _in_turn(m, t, 2, pv=J)
            m.tl(n.WaitGemm(t.pv.out), 2)
            m.emit("acc, _, _ = warpgroup_mma_wait(0, deps=(acc, p, v_t))  # p: its registers stay live until the GEMM is done", 2)
            _release(m, t, J, 2)
        _give_q_back(m)
    _epilogue(m)
    if m.merge:
        m.emit("if MERGE:  # split-KV: the last split of this row tile merges the splits (gluon/merge.py)", 1)
        m.emit(f"_merge_splits({rt})", 2)
    if hk.persistent:
        next_work_tile(m, "lo", "hi", 1)
        m.depth = 0
    if hk.ostage:
        m.emit("tma.store_wait(0)  # the last O store has read shared memory before the program ends", 1)
    m.emit()


def work_tile_fn(m: Writer) -> None:
    """``_work_tile``: a work tile's grid coordinates from its number (chain: the compute role's of the next one too)."""
    m.emit("@gluon.jit")
    m.emit(f"def _work_tile(tile, {', '.join(m.role_args())}):")
    for line in tile_coordinates(m, "tile"):
        m.emit(line, 1)
    m.emit(f"return {', '.join(m.grid_names)}", 1)
    m.emit()


def _chained_tiles(m: Writer, rt: str) -> None:
    """The work tiles of a chained kernel (``chain = 1``: persistent, overlapped, in ping-pong; shape checks): the
    next work tile's first QK^T GEMM is issued in the turn of this one's last PV GEMM; this one's epilogue, then the
    next one's first scores, follow under the other warpgroup's turn, so that no turn between two work tiles holds a
    last PV GEMM alone while the next tile's first QK^T waits for the epilogue. Q has a set of slots per parity
    of the work tile (the load role copies the next one's under this one); each set is given back on q_free of its
    parity once the tile's last QK^T GEMM is done. The program's first work tile is scored before the loop. Q's waits
    sit under ``lo < hi``: a work tile without K/V tiles (Sk = 0, which the module's launch refuses) would leave its Q
    barrier unwaited while its slots are given back."""
    hk, t = m.hk, m.hk.loops[-1]
    j = t.loop.var
    q_name = hk.loops[0].qk.a
    args = ", ".join(m.role_args())
    coords = ", ".join(m.grid_names)
    total = " * ".join(f"({m.dev(ax.extent)})" for ax in hk.kernel.grid)
    m.emit("it = 0  # the ring position of the work tile's first K/V tile: the K/V tiles of this program's earlier work tiles", 1)
    m.emit("tiles = 0  # work tiles done: Q's barriers of a parity complete once per work tile of it", 1)
    m.emit(f"{coords} = _work_tile(gl.program_id(0), {args})  # the program's first work tile: scored here", 1)
    m.emit(f"rows = {ROWS_OF.format('m')}", 1)
    row_state(m)
    m.emit("acc = gl.zeros([HM, Dv], gl.float32, o_layout)", 1)
    m.emit("P = gl.zeros([HM, BN], DTYPE, s_layout)", 1)
    m.emit(f"q_t = {q_name}.index(WG).reshape([HM, D])", 1)
    bounds = _bounds(m)
    for line in bounds:
        m.emit(line, 1)
    m.emit(f"if (lo < hi) & (gl.program_id(0) < {total}):  # the first work tile's first scores (a later tile's come in the last turn of the tile before)", 1)
    m.tl(hk.q_wait, 2)
    m.emit(f"mbarrier.wait({_q_ready(m, 'tiles')})", 2)
    _first_tile(m, rt, 2)
    m.emit(f"for tile in range(gl.program_id(0), {total}, gl.num_programs(0)):  # persistent: one program per SM walks the work tiles", 1)
    m.depth += 1
    m.emit(f"{coords} = _work_tile(tile, {args})", 1)
    m.emit(f"rows = {ROWS_OF.format('m')}", 1)
    m.emit(f"q_t = {q_name}.index((tiles % 2) * SETS + WG).reshape([HM, D])  # this work tile's Q: the slots of its parity", 1)
    for line in bounds:
        m.emit(line, 1)
    _overlapped_loop(m, rt)
    m.emit(f"mbarrier.arrive({Q_FREE_NAME}.index(tiles % 2), count=1)  # Q's slots of this parity given back: every QK^T GEMM of this work tile is done", 1)
    m.emit("m_i2 = gl.full([HM], -float('inf'), gl.float32, gl.SliceLayout(1, s_layout))  # the next work tile's row state", 1)
    m.emit("l_i2 = gl.zeros([HM], gl.float32, gl.SliceLayout(1, s_layout))", 1)
    m.emit("P2 = gl.zeros([HM, BN], DTYPE, s_layout)", 1)
    m.emit("S = gl.zeros([HM, BN], gl.float32, s_layout)", 1)
    last = n.Binary("-", n.Name("hi"), n.Num(1))
    chained = f"(lo < hi) & (tile + gl.num_programs(0) < {total})"
    m.emit(f"if {chained}:  # chained: the next work tile's first QK^T in this one's last turn", 1)
    _wait_tile(m, t.v_wait, j, last, 2)
    m.emit(f"mbarrier.wait({_q_ready(m, 'tiles + 1')})", 2)
    # the next work tile's first K/V tile is the ring position after this one's last (the bounds are the same: shape checks)
    _wait_tile(m, t.k_wait, j, n.Name("hi"), 2)
    m.emit(f"q_n = {q_name}.index(((tiles + 1) % 2) * SETS + WG).reshape([HM, D])", 2)
    _in_turn(m, t, 2, qk=n.Name("hi"), pv=last, q="q_n")
    # Both GEMMs waited for here; this work tile's epilogue, then the next one's scores, run under the other warpgroup's
    # turn. (Compiled for sm_90a at D = 128: with the PV GEMM left in flight under the scores, as in the loop, the kernel
    # spilled 16 bytes; with the epilogue in each branch, 48; as here, 16. At D = 64, none.)
    m.emit("S, acc, _, _, _, _ = warpgroup_mma_wait(0, deps=(S, acc, p, q_n, k_t, v_t))", 2)
    release_k(m, t, n.Name("hi"), 2)
    _release(m, t, last, 2)
    m.emit("else:  # the program's last work tile (or one without K/V tiles): its last PV GEMM alone", 1)
    m.emit("if lo < hi:", 2)
    _wait_tile(m, t.v_wait, j, last, 3)
    _in_turn(m, t, 3, pv=last)
    m.emit("acc, _, _ = warpgroup_mma_wait(0, deps=(acc, p, v_t))  # p: its registers stay live until the GEMM is done", 3)
    _release(m, t, last, 3)
    _epilogue(m)
    m.emit(f"if {chained}:  # the next work tile's first scores", 1)
    nxt = [f"{a}2" for a in m.grid_names]
    m.emit(f"{', '.join(nxt)} = _work_tile(tile + gl.num_programs(0), {args})", 2)
    m.emit(f"rows2 = {ROWS_OF.format('m2')}", 2)
    names = dict(zip(m.grid_names, nxt))
    _first_scores(m, ", ".join(names.get(a, a) for a in m.runtime_args()), 2, suffix="2")
    m.emit("P, m_i, l_i = P2, m_i2, l_i2  # the next work tile's first scores", 1)
    m.emit("acc = gl.zeros([HM, Dv], gl.float32, o_layout)", 1)
    next_work_tile(m, "lo", "hi", 1)
    m.depth = 0
    m.emit("tma.store_wait(0)  # the last O store has read shared memory before the program ends", 1)


def _overlapped_loop(m: Writer, rt: str) -> None:
    """The tiles ``lo`` .. ``hi`` - 2 of an overlapped kernel: in tile j's turn, tile j + 1's QK^T and tile j's PV."""
    t = m.hk.loops[-1]
    j = t.loop.var
    J, J1 = n.Name(j), n.Binary("+", n.Name(j), n.Num(1))
    for bounds, masked in _tile_loops(m, "lo", "hi - 1", 1):
        m.emit(f"for {j} in range({bounds}):  # the PV GEMM of tile j runs under the softmax of tile j + 1", 1)
        _wait_tile(m, t.k_wait, j, J1, 2)
        _wait_tile(m, t.v_wait, j, J, 2)
        _in_turn(m, t, 2, qk=J1, pv=J)
        m.emit(f"S, _, _ = warpgroup_mma_wait(1, deps=(S, {_q_operand(m)}, k_t))  # tile j + 1's QK^T is done (tile j's PV may not be)", 2)
        release_k(m, t, J1, 2)
        m.emit(_softmax_call(f"{j} + 1", rt, masked), 2)
        m.emit("acc, _, _ = warpgroup_mma_wait(0, deps=(acc, p, v_t))  # p: its registers stay live until the GEMM is done", 2)
        _release(m, t, J, 2)
        m.emit("acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)", 2)


def _tile_loops(m: Writer, lo: str, hi: str, ahead: int) -> list[tuple[str, bool]]:
    """The ``range`` bounds of the loop over tiles ``lo`` .. ``hi`` - 1 whose scores are of tile j + ``ahead``, each
    with whether those scores may need the Mask. Where the TL has an unmasked loop before its masked one and three or
    more warpgroups take turns (160 registers a thread), two loops: tiles before ``split`` without the Mask, then the
    rest with it, so that the tiles every row sees whole run a body without the Mask's registers (and the overlap's
    first tile, before the loops, takes the Mask only at or past ``split``). Compiled for sm_90a (BM = 192, BN = 128,
    D = 64, overlap, no mask but the tail's): one loop spilled 40 bytes, two 8, and with the first tile's scores apart
    none. With two warpgroups (240 registers) one loop spills none, and two spilled 24 bytes at D = 128: one loop there."""
    if not _loops_split(m):
        return [(f"{lo}, {hi}", True)]
    edge = f"gl.minimum(gl.maximum({lo}, split{f' - {ahead}' if ahead else ''}), {hi})"
    return [(f"{lo}, {edge}", False), (f"{edge}, {hi}", True)]


def _loops_split(m: Writer) -> bool:
    """Whether the tile loop is written as two (``_tile_loops``): an unmasked TL loop before the masked one, three or more warpgroups."""
    return len(m.hk.loops) == 2 and m.hk.sets >= 3


def _give_q_back(m: Writer) -> None:
    """A persistent kernel's compute warpgroups are done with Qs once the work tile's last QK^T GEMM
    is: the load role may copy the next work tile's Q while the last PV GEMM and the epilogue run
    (with ``ostage = 2``, once O's store from Qs has read it: ``_tma_store_o``; with ``qreg``, once Q is in registers:
    ``_q_to_registers``). With ``ostage = 3`` only where the work tile has K/V tiles (without, O leaves through Qs:
    ``_store_o_via_kv``), and set 1 then also passes ``K_READ_BARRIER``: its last QK^T GEMM has read the last K slot."""
    if m.hk.o_via_kv:  # (a work tile without K/V tiles stores O through Qs and gives it back after: _store_o_via_kv)
        m.emit("if lo < hi:", 1)
        m.emit(f"mbarrier.arrive({Q_FREE_NAME}, count=1)  # Qs given back: every QK^T GEMM of this work tile is done", 2)
        m.emit("if WG == 1:", 2)
        m.emit(f"_pair_arrive({K_READ_BARRIER})  # set 0 may write its rows of O into the last tile's K slot", 3)
    elif m.hk.persistent and not m.hk.o_via_q and not m.hk.q_in_registers:
        m.emit(f"mbarrier.arrive({Q_FREE_NAME}, count=1)  # Qs given back: every QK^T GEMM of this work tile is done", 1)


def _epilogue(m: Writer) -> None:
    lse_of = f"(m_i + gl.log2(l_i)) * {LN2!r}"  # the running max is in log2 units (softmax_fn)
    for s in m.hk.epilogue:
        m.tl(s, 1)
        if isinstance(s, n.Normalize):
            m.emit("l_o = gl.convert_layout(l_i, row_o)", 1)
            m.emit(f"out = (acc * gl.expand_dims(gl.where(l_o == 0.0, 0.0, 1.0 / l_o), 1)){_stored_as(m)}  # a row that saw no key: 0", 1)
        elif isinstance(s, n.LogSumExp):
            m.emit(f"lse_r = gl.where(l_i == 0.0, -float('inf'), {lse_of})", 1)
        elif s is m.hk.epilogue[2] and m.hk.ostage:
            _tma_store_o(m, s)
        elif s is m.hk.epilogue[2]:  # the store of O (shape.read checked the order)
            view, (tensor, strides) = m.hk.views[s.dst], m.outputs()[0]
            m.emit("o_rows = m * BM + WG * HM + gl.arange(0, HM, layout=row_o)", 1)
            m.emit("o_cols = gl.arange(0, Dv, layout=gl.SliceLayout(0, o_layout))", 1)
            # 64-bit (b, h) offset on the scalar base; within one (b, h) slice offsets fit in 32 bits (runtime.check_arguments)
            m.emit(f"o_base = {tensor} + {view_base(m, view, strides)}", 1)
            m.emit(f"o_ptrs = o_base + gl.expand_dims({_row_offsets(m, view, 'o_rows', strides)}, 1) + gl.expand_dims(o_cols, 0)"
                   f"  # {tensor}'s last stride is 1 (launch)", 1)
            m.emit(f"gl.store(o_ptrs, out, mask=gl.expand_dims(o_rows, 1) < {m.dev(view.shape[0])})", 1)
        elif s is m.hk.epilogue[3] and m.hk.o_via_kv:
            # 32-bit offsets (launch checks the whole of lse is within their reach): with the int64 (b, h) base the persistent
            # D = 256 kernel spills 16 bytes (the sign of a stride kept from the kernel's entry: bench/RESULTS.md run 22)
            view, (tensor, strides) = m.hk.views[s.dst], m.outputs()[1]
            m.emit(f"gl.store({tensor} + {view_base(m, view, strides, wide=False)} + {_row_offsets(m, view, 'rows', strides)}, lse_r, "
                   f"mask=rows < {m.dev(view.shape[0])})", 1)
        elif s is m.hk.epilogue[3]:
            view, (tensor, strides) = m.hk.views[s.dst], m.outputs()[1]
            m.emit(f"gl.store({tensor} + {view_base(m, view, strides)} + {_row_offsets(m, view, 'rows', strides)}, lse_r, "
                   f"mask=rows < {m.dev(view.shape[0])})", 1)
        else:
            _fail(s, f"{type(s).__name__} after the tile loops: the gluon backend takes Normalize, LogSumExp and the stores of O and LSE", m.file)


def _tma_store_o(m: Writer, s: n.Copy) -> None:
    """``ostage``: each warpgroup set writes its HM rows of O into shared memory and one TMA store
    takes them to global memory (rows past Sq are not written) while the warpgroup goes on. From its
    slot of the staging tile (1), written again only once the store before has read it; or from its
    own rows of Qs (2), which its last QK^T GEMM has read: a persistent kernel gives Qs back to the
    load warp only once the store has read them."""
    view = m.hk.views[s.dst]
    coord = ", ".join([m.dev(e) for e in view.offset] + [f"({m.dev(s.coord[0])}) * {m.dev(s.tile[0])} + WG * HM",
                                                          f"({m.dev(s.coord[1])}) * {m.dev(s.tile[1])}"])
    if m.hk.o_via_kv:
        _store_o_via_kv(m, coord)
        return
    if m.hk.o_via_q:
        _store_o_from_qs(m, coord, 1)
        return
    if m.hk.persistent:
        m.emit(f"tma.store_wait(0)  # the previous work tile's O store has read {O_STAGE_NAME}", 1)
    m.emit(f"{O_STAGE_NAME}.index(WG).reshape([HM, Dv]).store(out)", 1)
    m.emit("fence_async_shared()  # the shared stores are seen by the TMA unit", 1)
    m.emit(f"tma.async_copy_shared_to_global(o_desc, [{coord}], {O_STAGE_NAME}.index(WG))", 1)


def _store_o_via_kv(m: Writer, coord: str) -> None:
    """``ostage = 3``: each set's rows of O through a ring slot of the work tile's last K/V tile -- set 0 its K slot, once
    set 1's last QK^T GEMM is done (``K_READ_BARRIER``), set 1 its V slot, once set 0's last PV GEMM is (``V_READ_BARRIER``)
    -- by one TMA store, after which the set gives that slot back to the load warp (the other set gave it back after its
    GEMM). Qs went back after the last QK^T GEMM (``_give_q_back``). A work tile without K/V tiles has no slot: its O (zeros)
    leaves through Qs, which goes back after that store."""
    t = m.hk.loops[-1]
    last = n.Binary("-", n.Name("hi"), n.Num(1))
    k_slot, v_slot = (m.dev(m.ring_at(e, t.loop.var, last)) for e in (t.qk.b_index, t.pv.b_index))
    k_free, v_free = (m.bar(n.BarrierRef(r.barrier.name, m.ring_at(r.barrier.index, t.loop.var, last))) for r in (t.k_release, t.release))
    m.emit("if lo < hi:  # O through this set's slot of the last K/V tile", 1)
    m.emit("if WG == 0:", 2)
    m.emit(f"_pair_sync({K_READ_BARRIER})  # set 1's last QK^T GEMM has read the K slot", 3)
    m.emit(f"o_t = {t.qk.b}.index({k_slot})", 3)
    m.emit("else:", 2)
    m.emit(f"_pair_sync({V_READ_BARRIER})  # set 0's last PV GEMM has read the V slot", 3)
    m.emit(f"o_t = {t.pv.b}.index({v_slot})", 3)
    m.emit("o_t.reshape([HM, Dv]).store(out)", 2)
    m.emit("fence_async_shared()  # the shared stores are seen by the TMA unit", 2)
    m.emit(f"tma.async_copy_shared_to_global(o_desc, [{coord}], o_t)", 2)
    m.emit("tma.store_wait(0)  # the store has read the slot", 2)
    m.emit("if WG == 0:  # the slot back to the load warp (the other set gave it back after its GEMM)", 2)
    m.emit(f"mbarrier.arrive({k_free}, count=1)", 3)
    m.emit("else:", 2)
    m.emit(f"mbarrier.arrive({v_free}, count=1)", 3)
    m.emit("else:  # no K/V tile: O (zeros) through this set's rows of Qs, given back after the store", 1)
    _store_o_from_qs(m, coord, 2)


def _store_o_from_qs(m: Writer, coord: str, indent: int) -> None:
    """O through the set's own rows of Qs by one TMA store (``ostage = 2``; ``ostage = 3``'s work tile without K/V tiles); a
    persistent kernel gives Qs back to the load warp once the store has read them."""
    m.emit("q_t.store(out)  # O into this warpgroup's rows of Qs: its last QK^T GEMM is done", indent)
    m.emit("fence_async_shared()  # the shared stores are seen by the TMA unit", indent)
    rows = f"{_q_buffer(m)}.index(WG)" if m.q_parts > 1 else f"{_q_buffer(m)}.slice(WG * HM, HM, dim=2)"
    m.emit(f"tma.async_copy_shared_to_global(o_desc, [{coord}], {rows})", indent)
    if m.hk.persistent:
        m.emit("tma.store_wait(0)  # the store has read Qs", indent)
        m.emit(f"mbarrier.arrive({Q_FREE_NAME}, count=1)  # Qs given back: its QK^T GEMMs and O's store are done with it", indent)


def _q_buffer(m: Writer) -> str:
    """The shared tile the load role's TMA copy of Q fills."""
    return next(s.dst for s in n.walk(m.hk.load.body) if isinstance(s, n.Copy) and s.signal == m.hk.q_wait.barrier)


def _stored_as(m: Writer) -> str:
    """O goes out in the output format; a split-KV kernel's partial O in its scratch's (acc: fp32), or in o's
    where a launch of one split stores into o itself (emit's ``_split_kv_setup``)."""
    tensor = m.outputs()[0][0]
    return ".to(DTYPE)" if tensor == "o" else f".to({tensor}.dtype.element_ty)"


def view_base(m: Writer, alloc: n.Allocate, strides: tuple[str, ...], wide: bool = True) -> str:
    """The offset of a view of a tensor: its TL offsets (batch, head, and a split's index) times the
    tensor's leading strides, in 64 bits (a (b, h) offset past 2**31 elements must not wrap;
    scalars: no cost per element); ``wide = False``: in 32 bits, where launch has checked they reach."""
    if len(alloc.offset) >= len(strides):
        _fail(alloc, f"{alloc.name} views {alloc.tensor} with {len(alloc.offset)} leading indices; the gluon backend takes fewer than its rank", m.file)
    return " + ".join(f"({m.dev(e)}){'.to(gl.int64)' if wide else ''} * {stride}" for e, stride in zip(alloc.offset, strides))


def _row_offsets(m: Writer, alloc: n.Allocate, rows: str, strides: tuple[str, ...]) -> str:
    """The offsets of a view's rows ``rows`` past its base: row r at r * (the row stride); packed by
    G, row r is position r // G of the (r % G)-th head past the view's (its last offset steps heads)."""
    row_stride = strides[len(alloc.offset)]
    if alloc.pack is None:
        return f"{rows} * {row_stride}"
    group, head_stride = m.dev(alloc.pack), strides[len(alloc.offset) - 1]
    return f"({rows} % ({group})) * {head_stride} + ({rows} // ({group})) * {row_stride}"
