"""What the Gluon translator's parts share: the module being written (lines, expressions in Gluon,
names of ring stages and barrier slots, the base-2 softmax plan) and the constants of the kernel it writes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from ...abi import INT_SCALARS, SIZE_ARGS
from ...analysis import Base2, base2_softmax
from ...tl import nodes as n
from ...tl.printer import stmt as stmt_lines
from ..triton.exprs import ExprContext, device
from .shape import O_STAGE_NAME, Q_FREE_NAME, HopperKernel, _fail


GL_DTYPE = {"fp16": "gl.float16", "bf16": "gl.bfloat16"}
# the stride arguments of the ABI's outputs (a split-KV kernel's scratch: TENSOR_s0, TENSOR_s1, ...)
OUTPUT_STRIDES = {"o": ("so_b", "so_h", "so_s"), "lse": ("sl_b", "sl_h", "sl_s")}
Q_STRIDES = ("sq_b", "sq_h", "sq_s", "sq_d")  # q's, where the compute role copies Q by pointer loads
# o's and lse's where a split-KV partial kernel merges the splits itself (``merge``; o: any strides)
MERGED_OUTPUT_STRIDES = {"o": (*OUTPUT_STRIDES["o"], "so_d"), "lse": OUTPUT_STRIDES["lse"]}


LOAD_REGS = 24  # a load role without a budget: setmaxnreg's minimum (it only issues TMA copies)


def max_registers(m: "Writer") -> int | None:
    """The registers a thread may hold (the kernel's .maxnreg, launch option ``maxnreg``) where the TL asks
    for several programs an SM (``param occupancy``): the SM's register file over the programs and over the
    threads Triton launches (whole warpgroups: ``check_roles.shared_thread_regs``); None for one program an SM."""
    from ...targets import get_target
    from ...tl.check_roles import occupancy, shared_thread_regs

    programs = occupancy(m.hk.kernel)
    if programs == 1:
        return None
    warps = const(m, m.hk.compute.warp_stop) + const(m, n.Binary("-", m.hk.load.warp_stop, m.hk.load.warp_start))
    return shared_thread_regs(get_target(m.hk.kernel.target or "sm_90"), programs, warps)


def load_regs(hk: HopperKernel) -> int:
    return hk.load.regs or LOAD_REGS


def compute_regs(m: "Writer") -> int:
    """The setmaxnreg of each compute warpgroup beside the load warp's budget: the checker's share of the registers
    the block launches with (``check_roles.role_regs``), which Triton's warp-specialised kernels follow: .maxnreg of
    the warps padded to whole warpgroups (168 over three, 128 over four), the load warp's warpgroup at its budget,
    the rest for the compute warpgroups (two: 240 a thread each, three: 160, four: 112)."""
    from ...targets import get_target
    from ...tl.check_roles import occupancy, role_regs

    hk = m.hk
    load = replace(hk.load, regs=load_regs(hk))
    ranges = [(hk.compute, const(m, hk.compute.warp_start), const(m, hk.compute.warp_stop)),
              (load, const(m, load.warp_start), const(m, load.warp_stop))]
    budgets = role_regs(ranges, get_target(hk.kernel.target or "sm_90"), occupancy(hk.kernel))
    assert budgets is not None  # (the checker's TL510 refuses a program without one)
    return budgets[0]


@dataclass
class Writer:
    hk: HopperKernel
    head_dim: int
    head_dim_v: int
    file: str | None
    lines: list[str] = field(default_factory=list)
    helpers: set[str] = field(default_factory=set)
    depth: int = 0  # added to every line's indent: 1 inside a persistent role's loop over work tiles
    merge: bool = False  # a split-KV partial kernel whose last split merges the splits into o and lse (gluon/merge.py)

    # ------------------------------------------------------------------ names and expressions
    @property
    def warps_per_set(self) -> int:
        """The warps of one compute warpgroup set (WG_WARPS): the compute role's, or one warpgroup's in ping-pong."""
        return self.hk.compute_warps // self.hk.sets

    @property
    def q_parts(self) -> int:
        """The TMA copies of a work tile's Q: one per warpgroup set, each of its HM rows into its slot of Qs (a TMA box's
        sides are powers of two, and BM = 192 is three sets of 64); one where the compute role copies Q itself."""
        return self.hk.sets if self.hk.q_load is None else 1

    @property
    def scalars(self) -> tuple[str, ...]:
        return self.hk.kernel.scalars

    @cached_property
    def alibi(self) -> bool:
        return any(isinstance(e, n.Index) and e.name == "alibi_slopes" for e in _all_indexes(self.hk.kernel))

    @cached_property
    def base2(self) -> Base2:
        """Which softmaxes run in base 2 and which Multiplies take log2(e): the Triton backend's plan too."""
        k = self.hk.kernel
        return base2_softmax(k, frozenset(k.scalars) | frozenset(self.hk.params) | frozenset(SIZE_ARGS) | {"D", "Dv"})

    @cached_property
    def _loop_vars(self) -> frozenset[str]:
        return frozenset(s.var for s in n.walk(self.hk.kernel.body) if isinstance(s, n.Loop))

    @property
    def grid_names(self) -> list[str]:
        return [a.name for a in self.hk.kernel.grid]

    @property
    def launch_name(self) -> str:
        """A split-KV kernel's launch-time split count (NSPLIT): the one name of its launch line."""
        (name,) = self.hk.kernel.launch_names()
        return name

    @property
    def split_axis(self) -> str:
        """A split-KV kernel's grid axis over the splits (its extent: the split count)."""
        return next(ax.name for ax in self.hk.kernel.grid if ax.extent == n.Name(self.launch_name))

    @property
    def descriptors(self) -> list[str]:
        """The TMA descriptor arguments: q, k and v's, or k and v's where the compute role copies Q itself."""
        return [f"{t}_desc" for t in ("q", "k", "v") if t != "q" or self.hk.q_load is None]

    def outputs(self) -> list[tuple[str, tuple[str, ...]]]:
        """The tensors the epilogue stores O and the LSE into, each with its stride arguments (every
        axis but O's last, which is contiguous): the ABI's o and lse, or a split-KV kernel's scratch."""
        out = []
        for copy, contiguous_last in ((self.hk.epilogue[2], 1), (self.hk.epilogue[3], 0)):
            tensor = self.hk.views[copy.dst].tensor
            if tensor in OUTPUT_STRIDES:
                out.append((tensor, OUTPUT_STRIDES[tensor]))
            else:
                rank = next(len(sc.shape) for sc in self.hk.kernel.scratch if sc.name == tensor)
                out.append((tensor, tuple(f"{tensor}_s{i}" for i in range(rank - contiguous_last))))
        return out

    def runtime_args(self) -> list[str]:
        """The values every role takes: grid coordinates, sizes, scalars, launch-time values, Q's
        pointer and strides where the compute role copies it, output pointers and strides."""
        out = [*self.grid_names, "B", "Hq", "Hkv", "Sq", "Sk", *self.scalars, *self.hk.kernel.launch_names()]
        if self.hk.q_load is not None:
            out += ["q", *Q_STRIDES]
        for tensor, strides in self.outputs():
            out += [tensor, *strides]
        if self.hk.ostage:  # O's TMA store (launch builds the descriptor)
            out.append("o_desc")
        if self.alibi:
            out += ["alibi_slopes", "sa"]
        if self.merge:  # where the last split stores the merged result, and the row tiles' arrival counters
            out += ["o", *MERGED_OUTPUT_STRIDES["o"], "lse", *MERGED_OUTPUT_STRIDES["lse"], "counters"]
        return out

    def role_args(self) -> list[str]:
        """What the kernel passes its roles: the runtime values, less the grid coordinates where the
        roles walk the work tiles themselves (``persistent``)."""
        rt = self.runtime_args()
        return [a for a in rt if a not in self.grid_names] if self.hk.persistent else rt

    def ctx(self, extra: dict[str, str] | None = None) -> ExprContext:
        # all >= 0 (tiles count up from lo >= 0; ``it``: a persistent role's ring position at its work tile's first K/V tile)
        sizes = (*self.grid_names, *self.hk.kernel.launch_names(), "B", "Hq", "Hkv", "Sq", "Sk", "D", "Dv", "lo", "hi", "it", *self._loop_vars)
        names = {x: x for x in (*sizes, *self.scalars, *self.hk.params)}
        names.update(extra or {})
        nonneg = {*sizes, *self.hk.params, *(s for s in self.scalars if s in INT_SCALARS)}
        return ExprContext(names, nonneg=nonneg, index=lambda e: self._index(e, extra), helpers=self.helpers, file=self.file,
                           floats={s for s in self.scalars if s not in INT_SCALARS} | {"score"}, lib="gl")

    def _index(self, e: n.Index, extra: dict[str, str] | None = None) -> str:
        """``alibi_slopes[head]``: the head a scalar, or each packed row's (``h_idx``, in ``extra``)."""
        if e.name != "alibi_slopes" or len(e.args) != 1:
            _fail(e, f"{e.name}[...]: the gluon backend reads alibi_slopes[head] only", self.file)
        return f"gl.load(alibi_slopes + ({device(e.args[0], self.ctx(extra))}) * sa)"

    def dev(self, e: n.Expr, extra: dict[str, str] | None = None) -> str:
        return device(e, self.ctx(extra))

    def ring_ref(self, name: str, index: n.Expr | None, extra: dict[str, str] | None = None) -> str:
        return name if index is None else f"{name}.index({self.dev(index, extra)})"

    def bar(self, ref: n.BarrierRef, extra: dict[str, str] | None = None) -> str:
        return self.ring_ref(ref.name, ref.index, extra)

    def emit(self, line: str = "", indent: int = 0) -> None:
        self.lines.append("    " * (indent + self.depth) + line if line else "")

    def tl(self, s: n.Stmt, indent: int) -> None:
        self.emit(f"# TL: {stmt_lines(s)[0].strip()}", indent)

    def ring_at(self, e: n.Expr, var: str, at: n.Expr) -> n.Expr:
        """A ring slot or phase expression of a K/V tile loop (over ``var``) for tile ``at``. A
        persistent role's ring does not start over at each work tile: the TL's position of the tile
        in its work tile's loop moves on by ``it``, the K/V tiles of the program's earlier work tiles
        (``shape`` checks the TL writes slots as (j - start) % R, so that ``j + it`` is the position)."""
        return n.substitute(e, var, n.Binary("+", at, n.Name("it")) if self.hk.persistent else at)


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


def tile_coordinates(m: Writer, index: str) -> list[str]:
    """Kernel lines that recover the grid coordinates from the flat work-tile number ``index``: every
    TL axis flattened onto one (CUDA's y and z stop at 65535), the row tiles m counted down (under a
    causal mask the last row tiles see the most keys: started first, they leave the short ones for
    the end). The row tiles go fastest, so that the tiles of one (b, h) run together and share K/V
    in L2 -- except in a persistent kernel whose tile loop's bounds depend on m (``rows_slowest``)."""
    axes = list(m.hk.kernel.grid)
    rows, others = axes[0], axes[:0:-1]  # (the others: the last TL axis fastest)
    nm = m.dev(rows.extent)
    if len(axes) == 1:
        return [f"{rows.name} = {nm} - 1 - {index}  # heaviest causal row tiles first"]
    lines, rest = [], index
    if m.hk.persistent and rows_slowest(m):
        heads = " * ".join(f"({m.dev(ax.extent)})" for ax in others)
        lines += [f"heads = {heads}",
                  "group = gl.minimum(heads, gl.maximum(1, L2_KV_BYTES // (Sk * (D + Dv) * ELEMENT_BYTES)))  # (b, h) whose K/V fit L2 together",
                  f"section = {index} // (group * ({nm}))",
                  f"within = {index} % (group * ({nm}))",
                  "width = gl.minimum(group, heads - section * group)  # (the last section may have fewer)",
                  f"{rows.name} = ({nm}) - 1 - within // width  # heaviest causal row tiles first",
                  "rest = section * group + within % width"]
        order, rest = others, "rest"
    else:
        order = [rows, *others]
    for i, ax in enumerate(order):
        value = rest if i == len(order) - 1 else f"{rest} % ({m.dev(ax.extent)})"
        lines.append(f"{ax.name} = ({nm}) - 1 - {value}  # heaviest causal row tiles first" if ax is rows else f"{ax.name} = {value}")
        if i < len(order) - 1:
            lines.append(f"rest = {rest} // ({m.dev(ax.extent)})")
            rest = "rest"
    return lines


def rows_slowest(m: Writer) -> bool:
    """Whether a persistent kernel walks its work tiles row tile by row tile: where the tile loop's
    bounds depend on m (a causal mask, a window), the tiles' work differs, and each program, taking
    every num_programs-th tile, gets its share of the heavy ones first if the row tiles go slowest.
    Those go by sections of (b, h) whose K/V fit in half of L2 together (``L2_KV_BYTES``), so that the
    programs running at once still read the same K/V."""
    loop = m.hk.loops
    return "m" in n.expr_names(loop[0].loop.start) | n.expr_names(loop[-1].loop.stop)


def work_tiles(m: Writer, indent: int) -> int:
    """A persistent role's loop over its work tiles (``tile``: the program's id, stride the programs
    launched, one per SM) and each tile's grid coordinates; returns the levels opened, the caller
    emits the tile's body that much deeper. Where the tiles' work differs (``rows_slowest``), the
    programs take each sweep of num_programs tiles in turn from either end: a sweep's tiles run
    from heavier to lighter, and a program that took a heavier one takes a lighter one next."""
    total = " * ".join(f"({m.dev(ax.extent)})" for ax in m.hk.kernel.grid)
    if not rows_slowest(m):
        m.emit(f"for tile in range(gl.program_id(0), {total}, gl.num_programs(0)):  # persistent: one program per SM walks the work tiles", indent)
        opened = 1
    else:
        m.emit("pid = gl.program_id(0)", indent)
        m.emit("programs = gl.num_programs(0)", indent)
        m.emit(f"for sweep in range(0, gl.cdiv({total}, programs)):  # persistent: one program per SM walks the work tiles", indent)
        m.emit("tile = sweep * programs + pid + (sweep % 2) * (programs - 1 - 2 * pid)  # odd sweeps from the other end", indent + 1)
        m.emit(f"if tile < {total}:", indent + 1)
        opened = 2
    for line in tile_coordinates(m, "tile"):
        m.emit(line, indent + opened)
    return opened


def next_work_tile(m: Writer, start: str, stop: str, indent: int) -> None:
    """The end of a persistent role's work tile: its ring position moves on by the K/V tiles the
    tile's loop took (``start`` .. ``stop``, none if empty), and one more tile is done."""
    m.emit(f"if {stop} > {start}:", indent)
    m.emit(f"it += {stop} - ({start})", indent + 1)
    m.emit("tiles += 1", indent)


def const(m: Writer, e: n.Expr) -> int:
    from ...tl.evaluate import evaluate

    return int(evaluate(e, {**m.hk.params, "D": m.head_dim, "Dv": m.head_dim_v}))


def shared_args(hk: HopperKernel) -> list[str]:
    """The shared buffers and barriers every role takes (and what the translator adds: Q's slot given back
    in a persistent kernel, O's staging tile of an ostage kernel)."""
    return [*hk.shared, *hk.barriers, *([Q_FREE_NAME] if hk.persistent else []),
            *([O_STAGE_NAME] if hk.o_staged else [])]
