"""A Hopper-form TL kernel as one Gluon module: the kernel (allocations, barrier set-up, the
warp-specialised roles), the roles' bodies, and the host ``launch``.

Each TL statement becomes the Gluon code under a ``# TL:`` comment that quotes it. The load role is
translated statement by statement. The compute role's tile loop is placed by the schedule
parameters (``shape`` takes it apart): with ``pingpong`` its warps split into two warpgroups, each
owning half of the BM rows, that take turns issuing GEMMs through a pair of "turn" barriers the
translator adds; with ``overlap`` the next tile's QK^T GEMM is issued (at the TL's own wait, slot and
phase for tile j + 1) before the softmax of tile j, and the PV GEMM of tile j runs under that softmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...abi import ARG_SHAPES, INT_SCALARS, arg_format
from ...dtypes import torch_dtype
from ...tl import nodes as n
from ...tl.printer import expr as show_expr
from ...tl.printer import stmt as stmt_lines
from ..triton.exprs import ExprContext, device
from .shape import HopperKernel, TileLoop, _fail

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
GL_DTYPE = {"fp16": "gl.float16", "bf16": "gl.bfloat16"}
# setmaxnreg budgets: Triton gives the kernel .maxnreg 168 over 3 warpgroups (384 threads, 64512 registers),
# i.e. 504 registers per thread across one thread of each warpgroup; the load warp's warpgroup keeps its
# TL budget, the two compute warpgroups share the rest in multiples of 8.
REGISTERS_ACROSS_WARPGROUPS = 504


def compute_regs(load_regs: int) -> int:
    return (REGISTERS_ACROSS_WARPGROUPS - load_regs) // 2 // 8 * 8


def subst(e: n.Expr, name: str, by: n.Expr) -> n.Expr:
    """``e`` with every free ``name`` replaced by ``by`` (tile j -> tile j + 1 in the overlapped loop)."""
    if isinstance(e, n.Name):
        return by if e.id == name else e
    if isinstance(e, n.Unary):
        return n.Unary(e.op, subst(e.operand, name, by))
    if isinstance(e, n.Binary):
        return n.Binary(e.op, subst(e.left, name, by), subst(e.right, name, by))
    if isinstance(e, n.Call):
        return n.Call(e.func, tuple(subst(a, name, by) for a in e.args))
    if isinstance(e, n.Index):
        return n.Index(e.name, tuple(subst(a, name, by) for a in e.args))
    return e


@dataclass
class _Module:
    hk: HopperKernel
    head_dim: int
    head_dim_v: int
    file: str | None
    lines: list[str] = field(default_factory=list)
    helpers: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------ names and expressions
    @property
    def scalars(self) -> tuple[str, ...]:
        return self.hk.kernel.scalars

    @property
    def alibi(self) -> bool:
        return any(isinstance(e, n.Index) and e.name == "alibi_slopes" for e in _all_indexes(self.hk.kernel))

    def runtime_args(self) -> list[str]:
        """The values every role takes: grid coordinates, sizes, scalars, output pointers and strides."""
        out = ["m", "b", "h", "B", "Hq", "Hkv", "Sq", "Sk", *self.scalars, "o", "so_b", "so_h", "so_s", "lse", "sl_b", "sl_h", "sl_s"]
        if self.alibi:
            out += ["alibi_slopes", "sa"]
        return out

    def ctx(self, extra: dict[str, str] | None = None) -> ExprContext:
        loop_vars = {s.var for s in n.walk(self.hk.kernel.body) if isinstance(s, n.Loop)}
        sizes = ("m", "b", "h", "B", "Hq", "Hkv", "Sq", "Sk", "D", "Dv", "lo", "hi", *loop_vars)  # all >= 0 (tiles count up from lo >= 0)
        names = {x: x for x in (*sizes, *self.scalars, *self.hk.params)}
        names.update(extra or {})
        nonneg = {*sizes, *self.hk.params, *(s for s in self.scalars if s in INT_SCALARS)}
        return ExprContext(names, nonneg=nonneg, index=self._index, helpers=self.helpers, file=self.file,
                           floats={s for s in self.scalars if s not in INT_SCALARS} | {"score"}, lib="gl")

    def _index(self, e: n.Index) -> str:
        if e.name != "alibi_slopes" or len(e.args) != 1:
            _fail(e, f"{e.name}[...]: the gluon backend reads alibi_slopes[head] only", self.file)
        return f"gl.load(alibi_slopes + ({device(e.args[0], self.ctx())}) * sa)"

    def dev(self, e: n.Expr, extra: dict[str, str] | None = None) -> str:
        return device(e, self.ctx(extra))

    def ring_ref(self, name: str, index: n.Expr | None, extra: dict[str, str] | None = None) -> str:
        return name if index is None else f"{name}.index({self.dev(index, extra)})"

    def bar(self, ref: n.BarrierRef, extra: dict[str, str] | None = None) -> str:
        return self.ring_ref(ref.name, ref.index, extra)

    def emit(self, line: str = "", indent: int = 0) -> None:
        self.lines.append("    " * indent + line if line else "")

    def tl(self, s: n.Stmt, indent: int) -> None:
        self.emit(f"# TL: {stmt_lines(s)[0].strip()}", indent)


def _all_indexes(kernel: n.Kernel) -> list[n.Index]:
    out: list[n.Index] = []
    for s in n.walk(kernel.body):
        for e in _stmt_exprs(s):
            out += n.indexes(e)
    return out


def _stmt_exprs(s: n.Stmt) -> list[n.Expr]:
    if isinstance(s, n.ScoreMod):
        return [s.expr]
    if isinstance(s, n.Mask):
        return [s.keep]
    if isinstance(s, n.Elementwise):
        return list(s.args)
    return []


# ---------------------------------------------------------------------- the load role

def _descriptor_tiles(m: _Module) -> dict[str, tuple[n.Expr, ...]]:
    """Tensor -> the tile its TMA copies move (one descriptor per tensor, so one tile shape)."""
    tiles: dict[str, tuple[n.Expr, ...]] = {}
    for s in n.walk(m.hk.load.body):
        if isinstance(s, n.Copy) and s.signal is not None:
            view = m.hk.views[s.src]
            if tiles.setdefault(view.tensor, s.tile) != s.tile:
                _fail(s, f"two tile shapes for TMA copies of {view.tensor}: one descriptor per tensor takes one", m.file)
    return tiles


def _tma_coord(m: _Module, s: n.Copy) -> str:
    view = m.hk.views[s.src]
    lead = [m.dev(e) for e in view.offset]
    tail = [f"({m.dev(c)}) * {m.dev(t)}" for c, t in zip(s.coord, s.tile)]
    return "[" + ", ".join(lead + tail) + "]"


def _load_block(m: _Module, body: tuple[n.Stmt, ...], indent: int) -> None:
    for s in body:
        m.tl(s, indent)
        if isinstance(s, n.Copy) and s.signal is not None:
            desc = f"{m.hk.views[s.src].tensor}_desc"
            bar = m.bar(s.signal)
            m.emit(f"mbarrier.expect({bar}, {desc}.block_type.nbytes)", indent)
            m.emit(f"tma.async_copy_global_to_shared({desc}, {_tma_coord(m, s)}, {bar}, {m.ring_ref(s.dst, s.dst_index)})", indent)
        elif isinstance(s, n.Wait):
            m.emit(f"mbarrier.wait({m.bar(s.barrier)}, {m.dev(s.phase)})", indent)
        elif isinstance(s, n.Arrive):
            m.emit(f"mbarrier.arrive({m.bar(s.barrier)}, count=1)", indent)
        elif isinstance(s, n.Loop):
            m.emit(f"for {s.var} in range({m.dev(s.start)}, {m.dev(s.stop)}):", indent)
            _load_block(m, s.body, indent + 1)
        else:
            _fail(s, f"{type(s).__name__} in the load role: it issues TMA copies and waits for free slots only", m.file)


# ---------------------------------------------------------------------- the compute role

def _folded(loop: TileLoop) -> bool:
    """log2(e) folds into the scale (the softmax then runs on exp2 of the scores) when one Multiply
    takes the scores straight to the softmax: a score modifier must see them in natural units, and
    with no Multiply or several the scores stay in natural units too (each factor applied as written)."""
    return len(loop.scores) == 1 and isinstance(loop.scores[0], n.Elementwise)


def fused_factor(m: _Module, loop: TileLoop) -> n.Expr | None:
    """The folded scale when it can go into the softmax's exp2 FMA: a runtime scalar or a number,
    whose sign the launch knows (``SCALE_POSITIVE``); None otherwise."""
    if not _folded(loop):
        return None
    factor = loop.scores[0].args[1]
    if isinstance(factor, n.Num) or (isinstance(factor, n.Name) and factor.id in m.scalars):
        return factor
    return None


def _softmax_fn(m: _Module, loop: TileLoop, masked_from: str | None) -> None:
    """The scores of tile j, from the QK^T accumulator to P and the online-softmax state."""
    folded = _folded(loop)
    factor = fused_factor(m, loop)
    c = "1.0" if folded else repr(LOG2E)
    rt = ", ".join(m.runtime_args())
    m.emit("@gluon.jit")
    m.emit(f"def _scores(S, m_i, l_i, j, rows, split, {rt}, s_layout: gl.constexpr, SCALE_POSITIVE: gl.constexpr):")
    m.emit("q_idx = gl.expand_dims(rows, 1)", 1)
    m.emit("kv_idx = gl.expand_dims(j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout)), 0)", 1)
    extra = {"q_idx": "q_idx", "kv_idx": "kv_idx", "score": "S", loop.loop.var: "j"}
    fused = None  # folded: the scale times log2(e), applied inside the softmax's FMA where its sign allows
    for s in loop.scores:
        m.tl(s, 1)
        if isinstance(s, n.Elementwise) and factor is not None:
            fused = f"({m.dev(factor, extra)}) * {LOG2E}"
            m.emit(f"c = {fused}", 1)
            m.emit("if not SCALE_POSITIVE:  # max(S * c) is max(S) * c only for c > 0: scale the tile first", 1)
            m.emit("S = S * c", 2)
        elif isinstance(s, n.Elementwise):
            by = m.dev(s.args[1], extra)
            m.emit(f"S = S * ({by} * {LOG2E})" if folded else f"S = S * ({by})", 1)
        else:
            m.emit(f"S = {m.dev(s.expr, extra)}", 1)
    if loop.mask is not None:
        m.tl(loop.mask, 1)
        keep = m.dev(loop.mask.keep, extra)
        if masked_from is None:
            m.emit(f"S = gl.where({keep}, S, -float('inf'))", 1)
        else:  # tiles before ``split`` are seen whole by every row: no mask
            m.emit("if j >= split:", 1)
            m.emit(f"S = gl.where({keep}, S, -float('inf'))", 2)
    m.tl(loop.softmax, 1)
    if fused is not None:  # the running max is kept in log2 units: m = max(S) * c
        m.emit("if SCALE_POSITIVE:", 1)
        m.emit("m_new = gl.maximum(m_i, gl.max(S, axis=1) * c)", 2)
        m.emit("m_use = gl.where(m_new == -float('inf'), 0.0, m_new)  # a row with no key yet: exp2(-inf) = 0, not nan", 2)
        m.emit("P = gl.exp2(S * c - gl.expand_dims(m_use, 1))", 2)
        m.emit("else:", 1)
        m.emit("m_new = gl.maximum(m_i, gl.max(S, axis=1))", 2)
        m.emit("m_use = gl.where(m_new == -float('inf'), 0.0, m_new)", 2)
        m.emit("P = gl.exp2(S - gl.expand_dims(m_use, 1))", 2)
        m.emit("alpha = gl.exp2(m_i - m_use)", 1)
    else:
        m.emit("m_new = gl.maximum(m_i, gl.max(S, axis=1))", 1)
        m.emit("m_use = gl.where(m_new == -float('inf'), 0.0, m_new)  # a row with no key yet: exp2(-inf) = 0, not nan", 1)
        m.emit(f"P = gl.exp2(S * {c} - gl.expand_dims(m_use * {c}, 1))", 1)
        m.emit(f"alpha = gl.exp2((m_i - m_use) * {c})", 1)
    m.emit("l_i = l_i * alpha + gl.sum(P, axis=1)", 1)
    m.tl(loop.p_cast, 1)
    m.emit("return P.to(DTYPE), alpha, m_new, l_i  # (cast here: a 16-bit P is half the registers across the loop)", 1)
    m.emit()


def _wait_tile(m: _Module, w: n.Wait, var: str, at: n.Expr, indent: int) -> None:
    """The TL's Wait for tile ``at`` (the loop's own tile, the next one, the first or the last)."""
    index = subst(w.barrier.index, var, at) if w.barrier.index is not None else None
    placed = n.Wait(n.BarrierRef(w.barrier.name, index), subst(w.phase, var, at))
    m.emit(f"# TL: {stmt_lines(w)[0].strip()}" + ("" if placed == w else f"  (for tile {show_expr(at)}: {stmt_lines(placed)[0].strip()})"), indent)
    m.emit(f"mbarrier.wait({m.bar(placed.barrier)}, {m.dev(placed.phase)})", indent)


def _issue_qk(m: _Module, t: TileLoop, at: n.Expr, indent: int) -> None:
    m.tl(t.qk, indent)
    slot = m.dev(subst(t.qk.b_index, t.loop.var, at))
    m.emit(f"k_t = {t.qk.b}.index({slot}).reshape([BN, D]).permute((1, 0))", indent)
    m.emit("S = warpgroup_mma(q_t, k_t, gl.zeros([HM, BN], gl.float32, s_layout), use_acc=False, is_async=True)", indent)


def _issue_pv(m: _Module, t: TileLoop, at: n.Expr, indent: int) -> None:
    m.tl(t.p_reshape, indent)
    m.emit("p = gl.convert_layout(P, p_layout)", indent)
    m.tl(t.pv, indent)
    slot = m.dev(subst(t.pv.b_index, t.loop.var, at))
    m.emit(f"v_t = {t.pv.b}.index({slot}).reshape([BN, Dv])", indent)
    m.emit("acc = warpgroup_mma(p, v_t, acc, is_async=True)", indent)


def _release(m: _Module, t: TileLoop, at: n.Expr, indent: int) -> None:
    m.tl(t.release, indent)
    ref = t.release.barrier
    m.emit(f"mbarrier.arrive({m.bar(n.BarrierRef(ref.name, subst(ref.index, t.loop.var, at) if ref.index is not None else None))}, count=1)", indent)


def _turn(m: _Module, indent: int, take: bool) -> None:
    if not m.hk.pingpong:
        return
    if take:
        m.emit("mbarrier.wait(turn.index(WG), turns & 1)  # this warpgroup's turn to issue GEMMs", indent)
        m.emit("turns += 1", indent)
    else:
        m.emit("mbarrier.arrive(turn.index(1 - WG), count=1)  # the other warpgroup's turn", indent)


def _softmax_call(at: str, rt: str) -> str:
    return f"P, alpha, m_i, l_i = _scores(S, m_i, l_i, {at}, rows, split, {rt}, s_layout, SCALE_POSITIVE)"


def _compute_fn(m: _Module) -> None:
    hk, t = m.hk, m.hk.loops[-1]
    j = t.loop.var
    J, J1 = n.Name(j), n.Binary("+", n.Name(j), n.Num(1))
    rt = ", ".join(m.runtime_args())
    shared = ", ".join(_shared_args(hk))
    m.emit("@gluon.jit")
    m.emit(f"def _compute(WG: gl.constexpr, {shared}, {rt}, SCALE_POSITIVE: gl.constexpr):")
    m.emit(f"# TL: {stmt_lines(hk.compute)[0].strip()}" + ("  (pingpong: two warpgroups of BM // 2 rows each)" if hk.pingpong else ""), 1)
    m.emit("# Each warpgroup set owns HM rows; WG is its index (0 without pingpong).", 1)
    m.emit("s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WG_WARPS, 1], instr_shape=[16, BN, 16])", 1)
    m.emit("o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WG_WARPS, 1], instr_shape=[16, Dv, 16])", 1)
    m.emit("p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)", 1)
    m.emit("row_o: gl.constexpr = gl.SliceLayout(1, o_layout)", 1)
    q_name = hk.loops[0].qk.a
    m.emit(f"q_t = {q_name}.reshape([BM, D]).slice(WG * HM, HM)", 1)
    m.emit("rows = m * BM + WG * HM + gl.arange(0, HM, layout=gl.SliceLayout(1, s_layout))", 1)
    for s in hk.state:
        m.tl(s, 1)
    m.emit("m_i = gl.full([HM], -float('inf'), gl.float32, gl.SliceLayout(1, s_layout))", 1)
    m.emit("l_i = gl.zeros([HM], gl.float32, gl.SliceLayout(1, s_layout))", 1)
    m.emit("acc = gl.zeros([HM, Dv], gl.float32, o_layout)", 1)
    m.emit("P = gl.zeros([HM, BN], DTYPE, s_layout)", 1)
    m.emit("turns = 0", 1)
    m.tl(hk.q_wait, 1)
    m.emit(f"mbarrier.wait({m.bar(hk.q_wait.barrier)}, {m.dev(hk.q_wait.phase)})", 1)
    lo, hi = hk.loops[0].loop.start, t.loop.stop
    for loop in hk.loops:
        m.tl(loop.loop, 1)
    m.emit(f"lo = {m.dev(lo)}", 1)
    m.emit(f"hi = {m.dev(hi)}", 1)
    split = hk.loops[0].loop.stop if len(hk.loops) == 2 else None
    m.emit(f"split = {m.dev(split) if split is not None else 'lo'}  # tiles from here on are masked", 1)
    if hk.overlap:
        m.emit("if lo < hi:  # the first tile's scores, before the loop", 1)
        _wait_tile(m, t.k_wait, j, n.Name("lo"), 2)
        _turn(m, 2, take=True)
        _issue_qk(m, t, n.Name("lo"), 2)
        _turn(m, 2, take=False)
        m.emit("S, _, _ = warpgroup_mma_wait(0, deps=(S, q_t, k_t))", 2)
        m.emit(_softmax_call("lo", rt), 2)
        m.emit(f"for {j} in range(lo, hi - 1):  # the PV GEMM of tile j runs under the softmax of tile j + 1", 1)
        _wait_tile(m, t.k_wait, j, J1, 2)
        _wait_tile(m, t.v_wait, j, J, 2)
        _turn(m, 2, take=True)
        _issue_qk(m, t, J1, 2)
        _issue_pv(m, t, J, 2)
        _turn(m, 2, take=False)
        m.emit("S, _, _ = warpgroup_mma_wait(1, deps=(S, q_t, k_t))", 2)
        m.emit(_softmax_call(f"{j} + 1", rt), 2)
        m.emit("acc, _, _ = warpgroup_mma_wait(0, deps=(acc, p, v_t))  # p: its registers stay live until the GEMM is done", 2)
        _release(m, t, J, 2)
        m.emit("acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)", 2)
        m.emit("if lo < hi:  # the last tile's PV GEMM", 1)
        last = n.Binary("-", n.Name("hi"), n.Num(1))
        _wait_tile(m, t.v_wait, j, last, 2)
        _turn(m, 2, take=True)
        _issue_pv(m, t, last, 2)
        _turn(m, 2, take=False)
        m.emit("acc, _, _ = warpgroup_mma_wait(0, deps=(acc, p, v_t))  # p: its registers stay live until the GEMM is done", 2)
        _release(m, t, last, 2)
    else:
        m.emit(f"for {j} in range(lo, hi):", 1)
        _wait_tile(m, t.k_wait, j, J, 2)
        _turn(m, 2, take=True)
        _issue_qk(m, t, J, 2)
        _turn(m, 2, take=False)
        m.tl(n.WaitGemm(t.qk.out), 2)
        m.emit("S, _, _ = warpgroup_mma_wait(0, deps=(S, q_t, k_t))", 2)
        m.emit(_softmax_call(j, rt), 2)
        m.emit("acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)", 2)
        _wait_tile(m, t.v_wait, j, J, 2)
        _turn(m, 2, take=True)
        _issue_pv(m, t, J, 2)
        _turn(m, 2, take=False)
        m.tl(n.WaitGemm(t.pv.out), 2)
        m.emit("acc, _, _ = warpgroup_mma_wait(0, deps=(acc, p, v_t))  # p: its registers stay live until the GEMM is done", 2)
        _release(m, t, J, 2)
    _epilogue(m)
    m.emit()


def _epilogue(m: _Module) -> None:
    # the running max is in log2 units when the scale was folded (see _folded), natural units otherwise
    lse_of = "(m_i + gl.log2(l_i)) * " + repr(LN2) if _folded(m.hk.loops[-1]) else f"m_i + gl.log2(l_i) * {LN2!r}"
    for s in m.hk.epilogue:
        m.tl(s, 1)
        if isinstance(s, n.Normalize):
            m.emit("l_o = gl.convert_layout(l_i, row_o)", 1)
            m.emit("out = (acc * gl.expand_dims(gl.where(l_o == 0.0, 0.0, 1.0 / l_o), 1)).to(DTYPE)  # a row that saw no key: 0", 1)
        elif isinstance(s, n.LogSumExp):
            m.emit(f"lse_r = gl.where(l_i == 0.0, -float('inf'), {lse_of})", 1)
        elif isinstance(s, n.Copy) and s.dst == "O":
            m.emit("o_rows = m * BM + WG * HM + gl.arange(0, HM, layout=row_o)", 1)
            m.emit("o_cols = gl.arange(0, Dv, layout=gl.SliceLayout(0, o_layout))", 1)
            # 64-bit (b, h) offset on the scalar base; within one (b, h) slice offsets fit in 32 bits (runtime.check_arguments)
            m.emit(f"o_base = o + {_view_base(m, s.dst, 'so')}", 1)
            m.emit("o_ptrs = o_base + gl.expand_dims(o_rows * so_s, 1) + gl.expand_dims(o_cols, 0)  # o's last stride is 1 (launch)", 1)
            m.emit("gl.store(o_ptrs, out, mask=gl.expand_dims(o_rows, 1) < Sq)", 1)
        elif isinstance(s, n.Copy) and s.dst == "LSE":
            m.emit(f"gl.store(lse + {_view_base(m, s.dst, 'sl')} + rows * sl_s, lse_r, mask=rows < Sq)", 1)
        else:
            _fail(s, f"{type(s).__name__} after the tile loops: the gluon backend takes Normalize, LogSumExp and the stores of O and LSE", m.file)


def _view_base(m: _Module, view: str, strides: str) -> str:
    """The offset of a (b, h) view of an output: its TL offsets times the tensor's strides."""
    alloc = m.hk.views[view]
    if len(alloc.offset) != 2:
        _fail(alloc, f"{view} views {alloc.tensor} with {len(alloc.offset)} leading indices; the gluon backend takes [batch, head]", m.file)
    # 64-bit: a (b, h) offset past 2**31 elements must not wrap (scalars: no cost per element)
    return " + ".join(f"({m.dev(e)}).to(gl.int64) * {strides}_{axis}" for e, axis in zip(alloc.offset, ("b", "h")))


# ---------------------------------------------------------------------- the kernel and the module

def _grid(m: _Module) -> tuple[list[str], list[str]]:
    """Kernel lines that recover the grid coordinates, and the host's grid extents: the first
    axis is program_id(0), the others are folded into program_id(1) (CUDA's y/z are too short)."""
    axes = m.hk.kernel.grid
    ctx = m.ctx()
    from ..triton.exprs import host

    host_names = {x: x for x in ("B", "Hq", "Hkv", "Sq", "Sk", "D", "Dv")} | {k: str(v) for k, v in m.hk.params.items()}
    hctx = ExprContext(host_names, file=m.file)
    kernel = [f"{axes[0].name} = gl.program_id(0)"]
    if len(axes) > 1:
        kernel.append("rest = gl.program_id(1)")
        for i, ax in enumerate(reversed(axes[1:])):
            last = i == len(axes) - 2
            kernel.append(f"{ax.name} = rest" if last else f"{ax.name} = rest % ({device(ax.extent, ctx)})")
            if not last:
                kernel.append(f"rest = rest // ({device(ax.extent, ctx)})")
    extents = [host(axes[0].extent, hctx)]
    if len(axes) > 1:
        extents.append(" * ".join(f"({host(ax.extent, hctx)})" for ax in axes[1:]))
    return kernel, extents


def _kernel_fn(m: _Module) -> None:
    hk = m.hk
    rt = m.runtime_args()
    m.emit("@gluon.jit")
    m.emit(f"def {hk.kernel.name}(q_desc, k_desc, v_desc, {', '.join(a for a in rt if a not in ('m', 'b', 'h'))}, SCALE_POSITIVE: gl.constexpr):")
    grid_lines, _ = _grid(m)
    for line in grid_lines:
        m.emit(line, 1)
    for name, s in hk.shared.items():
        m.tl(s, 1)
        desc = f"{_filled_from(m, name)}_desc"
        ring = f"[{m.dev(s.ring)}] + " if s.ring is not None else ""
        m.emit(f"{name} = gl.allocate_shared_memory({desc}.dtype, {ring}{desc}.block_type.shape, {desc}.layout)", 1)
    arrivals = {name: _arrivals(m, name) for name in hk.barriers}
    for name, s in hk.barriers.items():
        m.tl(s, 1)
        count = m.dev(s.count) if s.count is not None else "1"
        count = f"({count}) * {arrivals[name]}" if arrivals[name] != 1 else count
        if s.shape:
            slots = m.dev(s.shape[0])
            m.emit(f"{name} = gl.allocate_shared_memory(gl.int64, [{slots}, 1], mbarrier.MBarrierLayout())", 1)
            m.emit(f"for i in gl.static_range({slots}):", 1)
            m.emit(f"mbarrier.init({name}.index(i), count={count})", 2)
        else:
            m.emit(f"{name} = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())", 1)
            m.emit(f"mbarrier.init({name}, count={count})", 1)
    if hk.pingpong:
        m.emit("# the ping-pong turn (pingpong = 1): warpgroup 0 issues its GEMMs first", 1)
        m.emit("turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())", 1)
        m.emit("mbarrier.init(turn.index(0), count=1)", 1)
        m.emit("mbarrier.init(turn.index(1), count=1)", 1)
        m.emit("mbarrier.arrive(turn.index(0), count=1)", 1)
    m.emit("fence_async_shared()", 1)
    shared = ", ".join(_shared_args(hk))
    args = ", ".join(rt)
    m.emit(f"# TL: {stmt_lines(hk.compute)[0].strip()}", 1)
    m.emit(f"# TL: {stmt_lines(hk.load)[0].strip()}", 1)
    parts = [f"(_compute, (0, {shared}, {args}, SCALE_POSITIVE))"]
    warps, regs = [], []
    if hk.pingpong:
        parts.append(f"(_compute, (1, {shared}, {args}, SCALE_POSITIVE))")
        warps.append("WG_WARPS")
        regs.append(str(compute_regs(hk.load.regs or 24)))
    parts.append(f"(_load, (q_desc, k_desc, v_desc, {shared}, {args}))")
    warps.append(str(_const(m, n.Binary("-", hk.load.warp_stop, hk.load.warp_start))))
    regs.append(str(hk.load.regs or 24))
    m.emit("gl.warp_specialize([", 1)
    for p in parts:
        m.emit(p + ",", 2)
    m.emit(f"], [{', '.join(warps)}], [{', '.join(regs)}])", 1)
    m.emit()


def _shared_args(hk: HopperKernel) -> list[str]:
    """The shared buffers and barriers every role takes (and the turn barriers in ping-pong)."""
    return [*hk.shared, *hk.barriers, *(["turn"] if hk.pingpong else [])]


def _filled_from(m: _Module, shared: str) -> str:
    """The tensor whose TMA copies fill a shared buffer (its descriptor gives the buffer's layout)."""
    for s in n.walk(m.hk.load.body):
        if isinstance(s, n.Copy) and s.dst == shared:
            return m.hk.views[s.src].tensor
    _fail(m.hk.shared[shared], f"{shared} is never filled by a TMA copy in the load role", m.file)


def _arrivals(m: _Module, barrier: str) -> int:
    """Physical arrivals per TL arrival: a compute-role Arrive happens once per warpgroup."""
    compute = any(isinstance(s, n.Arrive) and s.barrier.name == barrier for s in n.walk(m.hk.compute.body))
    return 2 if compute and m.hk.pingpong else 1


def _launch_fn(m: _Module, tiles: dict[str, tuple[n.Expr, ...]]) -> None:
    hk = m.hk
    _, extents = _grid(m)
    scalars = list(m.scalars)
    tensors = ["alibi_slopes"] if m.alibi else []
    keywords = "".join(f"{x}, " for x in scalars + tensors)
    m.emit(f"def launch(q, k, v, o, lse, *, {keywords}checked: bool = False) -> None:")
    m.emit('"""Run the kernel on BHSD-indexed tensors (any strides whose rows are 16-byte aligned; BSHD is', 1)
    m.emit("q.transpose(1, 2)). Writes O into ``o`` (B, Hq, Sq, Dv) and the natural-log log-sum-exp into", 1)
    m.emit('``lse`` (B, Hq, Sq, fp32). ``checked``: the caller has checked the arguments already."""', 1)
    m.emit("B, Hq, Sq, _ = q.shape", 1)
    m.emit("Hkv, Sk = k.shape[1], k.shape[2]", 1)
    m.emit("if not checked:", 1)
    names = ", ".join(f"{t}={t}" for t in ["q", "k", "v", "o", "lse", *tensors])
    m.emit(f"check_arguments(dict({names}), HEAD_DIM, HEAD_DIM_V, TENSOR_DTYPES)", 2)
    for t in ("q", "k", "v"):
        m.emit(f"{t}_desc = tma_descriptor({t}, {t!r}, DESC_BLOCKS[{t!r}])", 1)
    rt = [a for a in m.runtime_args() if a not in ("m", "b", "h")]
    values = {"so_b": "o.stride(0)", "so_h": "o.stride(1)", "so_s": "o.stride(2)",
              "sl_b": "lse.stride(0)", "sl_h": "lse.stride(1)", "sl_s": "lse.stride(2)", "sa": "alibi_slopes.stride(0)"}
    args = ", ".join(values.get(a, a) for a in rt)
    m.emit("if o.stride(3) != 1:  # the stores are vectorised along the head dim", 1)
    m.emit("raise LaunchError(f\"o has strides {tuple(o.stride())}; this kernel writes rows of o contiguously (last stride 1)\", where=\"o\", "
           "hint=\"pass o = torch.empty(...) (contiguous), or a transposed view of one whose last dimension is contiguous\")", 2)
    m.emit(f"grid = ({', '.join(extents)},)", 1)
    m.emit("if len(grid) > 1 and grid[1] > 65535:  # (b, h) ride on the grid's y axis, next to m on x for K/V reuse in L2", 1)
    m.emit("raise LaunchError(f\"B * Hq = {grid[1]} programs exceed the grid's y limit of 65535\", where=\"q\", "
           "hint=\"split the batch into calls of fewer sequences, or use --backend triton\")", 2)
    factor = fused_factor(m, hk.loops[-1])
    positive = "True" if factor is None else (repr(factor.value > 0) if isinstance(factor, n.Num) else f"{factor.id} > 0")
    m.emit(f"{hk.kernel.name}[grid](q_desc, k_desc, v_desc, {args}, SCALE_POSITIVE={positive}, num_warps=WG_WARPS)", 1)


def _const(m: _Module, e: n.Expr) -> int:
    from ...tl.evaluate import evaluate

    return int(evaluate(e, {**m.hk.params, "D": m.head_dim, "Dv": m.head_dim_v}))


# ---------------------------------------------------------------------- assembly

@dataclass(frozen=True)
class GluonModule:
    source: str
    kernel: str
    params: dict[str, int]


def _helper_source(name: str) -> str:
    from ..triton.exprs import HELPER_SOURCE

    return HELPER_SOURCE[name].replace("@triton.jit", "@gluon.jit").replace("tl.", "gl.")


def translate(program: n.Program, *, head_dim: int, head_dim_v: int, file: str | None = None) -> GluonModule:
    """The Gluon module for a one-kernel Hopper-form program (see ``shape`` for the form taken)."""
    from ...tl.printer import print_program
    from .shape import read

    if len(program.kernels) != 1:
        _fail(program.kernels[1] if len(program.kernels) > 1 else program, "the gluon backend translates one-kernel (prefill) programs; "
              "decode's split-KV pair goes to --backend triton", file)
    kernel = program.kernels[0]
    hk = read(kernel, file)
    dtypes = kernel.dtype_map()
    qkv = dtypes.get("qkv")
    if qkv not in GL_DTYPE or dtypes.get("out") != qkv:
        _fail(kernel, f"dtype qkv = {qkv}, out = {dtypes.get('out')}: the gluon backend's wgmma kernels take fp16 or bf16 in and out", file)
    m = _Module(hk, head_dim, head_dim_v, file)
    tiles = _descriptor_tiles(m)
    if set(tiles) != {"q", "k", "v"}:
        _fail(hk.load, f"the load role copies {', '.join(sorted(tiles)) or 'nothing'} by TMA; it must copy q, k and v", file)
    body = _Module(hk, head_dim, head_dim_v, file, helpers=m.helpers)
    _softmax_fn(body, hk.loops[-1], hk.loops[0].loop.stop if len(hk.loops) == 2 else None)
    _compute_fn(body)
    body.emit("@gluon.jit")
    body.emit(f"def _load(q_desc, k_desc, v_desc, {', '.join(_shared_args(hk))}, {', '.join(body.runtime_args())}):")
    body.emit(f"# TL: {stmt_lines(hk.load)[0].strip()}", 1)
    _load_block(body, hk.load.body, 1)
    body.emit()
    _kernel_fn(body)
    _launch_fn(body, tiles)

    nwg = 2 if hk.pingpong else 1
    warps = _const(m, n.Binary("-", hk.compute.warp_stop, hk.compute.warp_start))
    header = [
        f'"""{kernel.name}: generated by attnforge from TL (stage 2, Gluon for Hopper: TMA, mbarrier, wgmma,',
        "warp specialisation). Do not edit: edit the TL.",
        "",
        f"Specialised to head dims D={head_dim}, Dv={head_dim_v}, the tile parameters below and the tensor formats in",
        "TENSOR_DTYPES; batch, heads, sequence lengths and all strides are runtime values. The TL program is TL_SOURCE.",
        '"""',
        "",
        "import torch",
        "from triton.experimental import gluon",
        "from triton.experimental.gluon import language as gl",
        "from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait",
        "",
        "from attnforge.backends.gluon.runtime import tma_descriptor",
        "from attnforge.errors import LaunchError",
        "from attnforge.backends.triton.runtime import check_arguments",
        "",
        f"KERNEL = {kernel.name!r}",
        f"HEAD_DIM = {head_dim}",
        f"HEAD_DIM_V = {head_dim_v}",
        "TENSOR_DTYPES = {" + ", ".join(f'"{t}": torch.{torch_dtype(arg_format(t, dtypes))}' for t in ARG_SHAPES
                                      if t != "alibi_slopes" or m.alibi) + "}",
        "DESC_BLOCKS = {" + ", ".join(f"{t!r}: {[1, 1] + [_const(m, e) for e in tiles[t]]}" for t in ("q", "k", "v")) + "}  # TMA blocks (B, H, rows, cols)",
        f"FLOAT_ARGS = {tuple(x for x in kernel.scalars if x not in INT_SCALARS)!r}",
        "TL_SOURCE = '''\\",
        print_program(program).replace("\\", "\\\\").replace("'''", "\\'\\'\\'") + "'''",
        "",
        "# compile-time values: the TL's parameters and head dims, the compute warpgroups' rows and warps",
        *(f"{k} = gl.constexpr({v})" for k, v in hk.params.items()),
        f"D = gl.constexpr({head_dim})",
        f"Dv = gl.constexpr({head_dim_v})",
        f"HM = gl.constexpr({hk.params['BM'] // nwg})",
        f"WG_WARPS = gl.constexpr({warps // nwg})",
        f"DTYPE = gl.constexpr({GL_DTYPE[qkv]})",
        "",
    ]
    helpers = [_helper_source(h) for h in ("floordiv", "floormod", "tanh") if h in m.helpers]
    source = "\n".join(header) + "\n" + "\n".join(helpers) + ("\n" if helpers else "") + "\n".join(body.lines) + "\n"
    return GluonModule(source, kernel.name, dict(hk.params))
