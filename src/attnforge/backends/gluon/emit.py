"""A Hopper-form TL kernel as one Gluon module: the kernel (allocations, barrier set-up, the
warp-specialised roles), the load role, the host ``launch``, and the module around them (the
compute role is ``compute``'s; what both write with is ``writer``'s).

Each TL statement becomes the Gluon code under a ``# TL:`` comment that quotes it. The load role is
translated statement by statement. The compute role's tile loop is placed by the schedule
parameters (``shape`` takes it apart): with ``pingpong`` its warps split into warpgroups (two or more),
each owning its share of the BM rows, that take turns in order issuing GEMMs through hardware named
barriers, one each (``compute.turn_helpers``); with ``overlap`` the next tile's QK^T GEMM is issued (at the TL's own wait, slot and
phase for tile j + 1) before the softmax of tile j, and the PV GEMM of tile j runs under that softmax.

A split-KV program (decode) is two kernels: the partial kernel in the Hopper form, translated as
above, and the combine kernel. Where that is the planner's merge (``plan.builtin.one_split_axis``) the
partial kernel merges the splits itself (``merge``) and the module has one kernel; any other combine
kernel is translated by the Triton backend's emitter into a plain @triton.jit kernel of the module and
launched after the partial. ``launch()`` computes the split count per call and allocates the scratch,
as the Triton backend's launchers do (docs/TL.md section 11.7).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...abi import ARG_SHAPES, INT_SCALARS, SIZE_ARGS, arg_format
from ...dtypes import torch_dtype
from ...tl import nodes as n
from ...tl.printer import stmt as stmt_lines
from ..triton.exprs import ExprContext, host
from ..triton.launcher import KernelInfo
from ..triton.launcher import check_host_name
from ...plan.builtin import one_split_axis
from . import tcgen05
from .compute import compute_fn, fused_factor, softmax_fn, turn_helpers, work_tile_fn
from .merge import merge_fn
from .shape import O_STAGE_NAME, Q_FREE_NAME, _fail
from ...tl.check_roles import occupancy
from .writer import GL_DTYPE, MERGED_OUTPUT_STRIDES, Q_STRIDES, Writer, compute_regs, const, load_regs, max_registers, next_work_tile, rows_slowest, shared_args, tile_coordinates, work_tiles

# ---------------------------------------------------------------------- the load role

def _descriptor_tiles(m: Writer) -> dict[str, tuple[n.Expr, ...]]:
    """Tensor -> the tile its TMA copies move (one descriptor per tensor, so one tile shape)."""
    tiles: dict[str, tuple[n.Expr, ...]] = {}
    for s in n.walk(m.hk.load.body):
        if isinstance(s, n.Copy) and s.signal is not None:
            view = m.hk.views[s.src]
            if tiles.setdefault(view.tensor, s.tile) != s.tile:
                _fail(s, f"two tile shapes for TMA copies of {view.tensor}: one descriptor per tensor takes one", m.file)
    return tiles


def _tma_coord(m: Writer, s: n.Copy, row: str = "") -> str:
    """A TMA copy's coordinates: the view's leading offsets, then the tile's; ``row`` added to the tile's first (a part's rows)."""
    view = m.hk.views[s.src]
    lead = [m.dev(e) for e in view.offset]
    tail = [f"({m.dev(c)}) * {m.dev(t)}" for c, t in zip(s.coord, s.tile)]
    tail[0] += row
    return "[" + ", ".join(lead + tail) + "]"


def _load_block(m: Writer, body: tuple[n.Stmt, ...], indent: int, ring_var: str | None = None) -> None:
    """The load role's statements in order; ``ring_var``: the K/V loop's variable, whose ring slots
    and phases ``Writer.ring_at`` places (a persistent role's move on from work tile to work tile)."""
    at = (lambda e: m.ring_at(e, ring_var, n.Name(ring_var)) if e is not None else None) if ring_var else (lambda e: e)
    for s in body:
        m.tl(s, indent)
        if isinstance(s, n.Copy) and s.signal is not None:
            desc = f"{m.hk.views[s.src].tensor}_desc"
            bar = m.bar(n.BarrierRef(s.signal.name, at(s.signal.index)))
            chained = m.hk.chain and s.signal == m.hk.q_wait.barrier
            if chained:  # Q's slots of this work tile's parity, given back by the work tile two before
                bar = f"{bar}.index(tiles % 2)"
                m.emit(f"mbarrier.wait({Q_FREE_NAME}.index(tiles % 2), (tiles // 2 + 1) % 2)  # the work tile two before is done with these slots of Qs", indent)
            elif m.hk.persistent and s.signal == m.hk.q_wait.barrier:
                m.emit(f"mbarrier.wait({Q_FREE_NAME}, (tiles + 1) % 2)  # the previous work tile is done reading Qs", indent)
            if desc == "q_desc" and m.q_parts > 1:  # (Writer.q_parts)
                slot = "(tiles % 2) * SETS + w" if chained else "w"
                m.emit(f"mbarrier.expect({bar}, SETS * {desc}.block_type.nbytes)", indent)
                m.emit("for w in gl.static_range(SETS):  # a box per warpgroup set: its HM rows into its slot of Qs", indent)
                m.emit(f"tma.async_copy_global_to_shared({desc}, {_tma_coord(m, s, ' + w * HM')}, {bar}, {s.dst}.index({slot}))", indent + 1)
                continue
            m.emit(f"mbarrier.expect({bar}, {desc}.block_type.nbytes)", indent)
            m.emit(f"tma.async_copy_global_to_shared({desc}, {_tma_coord(m, s)}, {bar}, {m.ring_ref(s.dst, at(s.dst_index))})", indent)
        elif isinstance(s, n.Wait):
            m.emit(f"mbarrier.wait({m.bar(n.BarrierRef(s.barrier.name, at(s.barrier.index)))}, {m.dev(at(s.phase))})", indent)
        elif isinstance(s, n.Arrive):
            m.emit(f"mbarrier.arrive({m.bar(s.barrier)}, count=1)", indent)
        elif isinstance(s, n.Loop):
            m.emit(f"for {s.var} in range({m.dev(s.start)}, {m.dev(s.stop)}):", indent)
            _load_block(m, s.body, indent + 1, s.var if m.hk.persistent else None)
        else:
            _fail(s, f"{type(s).__name__} in the load role: it issues TMA copies and waits for free slots only", m.file)


def _persistent_load(m: Writer) -> None:
    """The load role of a persistent kernel: the TL's statements once per work tile; before Q's copy
    it waits for the compute warpgroups to give Qs back, and its ring position moves on by each work
    tile's K/V tiles (``shape`` checks that the one loop walks the compute role's tiles)."""
    loop = next(s for s in m.hk.load.body if isinstance(s, n.Loop))
    m.emit("it = 0  # the ring position of the work tile's first K/V tile: the K/V tiles of this program's earlier work tiles", 1)
    m.emit("tiles = 0  # work tiles done: Q's barriers complete once per work tile", 1)
    m.depth += work_tiles(m, 1)
    _load_block(m, m.hk.load.body, 1)
    next_work_tile(m, m.dev(loop.start), m.dev(loop.stop), 1)
    m.depth = 0


# ---------------------------------------------------------------------- the kernel and the module

def _grid(m: Writer) -> tuple[list[str], str]:
    """Kernel lines that recover the grid coordinates from program_id(0) (``tile_coordinates``; none
    where the roles walk the work tiles themselves, ``persistent``), and the host's grid size: one
    program per work tile, or per SM at most when persistent."""
    hctx = host_ctx(m)
    tiles = " * ".join(f"({host(ax.extent, hctx)})" for ax in m.hk.kernel.grid)
    if m.hk.persistent:
        return [], f"min({tiles}, program_slots(q.device))"
    return (["pid = gl.program_id(0)", *tile_coordinates(m, "pid")] if len(m.hk.kernel.grid) > 1
            else tile_coordinates(m, "gl.program_id(0)")), tiles


def host_ctx(m: Writer, kernel: n.Kernel | None = None, params: dict[str, int] | None = None) -> ExprContext:
    """TL expressions of ``kernel`` (default: the Hopper-form one) as ``launch()`` computes them: the
    sizes it reads off the tensors, that kernel's own parameters, and the launch-time values it has
    computed (a split count)."""
    kernel, params = (m.hk.kernel, m.hk.params) if kernel is None else (kernel, params or {})
    names = {x: x for x in ("B", "Hq", "Hkv", "Sq", "Sk", "D", "Dv", *kernel.launch_names())}
    return ExprContext(names | {k: str(v) for k, v in params.items()}, file=m.file)


def _kernel_fn(m: Writer) -> None:
    hk = m.hk
    rt = m.runtime_args()
    m.emit("@gluon.jit")
    descs = ", ".join(m.descriptors)
    merge = ", MERGE: gl.constexpr" if m.merge else ""
    m.emit(f"def {hk.kernel.name}({descs}, {', '.join(a for a in rt if a not in m.grid_names)}, SCALE_POSITIVE: gl.constexpr{merge}):")
    grid_lines, _ = _grid(m)
    for line in grid_lines:
        m.emit(line, 1)
    for name, s in hk.shared.items():
        m.tl(s, 1)
        if hk.q_load is not None and name == hk.q_load.dst:  # filled by the compute role's stores, read by wgmma
            m.emit(f"{name} = gl.allocate_shared_memory(DTYPE, [BM, D], gl.NVMMASharedLayout.get_default_for([BM, D], DTYPE))", 1)
            continue
        desc = f"{_filled_from(m, name)}_desc"
        ring = f"[{m.dev(s.ring)}] + " if s.ring is not None else ""
        if desc == "q_desc" and m.q_parts > 1:
            ring = "[SETS] + "  # a slot per warpgroup set, each filled by its own TMA box (Writer.q_parts)
            if hk.chain:  # (chain: a set of slots per work tile's parity, the next tile's Q copied under this one)
                ring = "[2 * SETS] + "
        m.emit(f"{name} = gl.allocate_shared_memory({desc}.dtype, {ring}{desc}.block_type.shape, {desc}.layout)", 1)
    if hk.o_staged:
        m.emit(f"# ostage = 1: O's staging tile, a slot of HM rows per warpgroup set, emptied by TMA stores", 1)
        m.emit(f"{O_STAGE_NAME} = gl.allocate_shared_memory(o_desc.dtype, [{hk.sets}] + o_desc.block_type.shape, o_desc.layout)", 1)
    arrivals = {name: _arrivals(m, name) for name in hk.barriers}
    for name, s in hk.barriers.items():
        m.tl(s, 1)
        count = m.dev(s.count) if s.count is not None else "1"
        count = f"({count}) * {arrivals[name]}" if arrivals[name] != 1 else count
        chained_q = hk.chain and name == hk.q_wait.barrier.name  # chain: one per parity of the work tile, as Q's slots
        _barrier(m, name, m.dev(s.shape[0]) if s.shape else "2" if chained_q else None, count)
    if hk.chain:
        m.emit("# chain: Q's slots of a parity are given back once per work tile of it, by each compute warpgroup set, when its last QK^T GEMM is done", 1)
        _barrier(m, Q_FREE_NAME, "2", hk.sets)
    elif hk.persistent:
        m.emit("# persistent: Qs is given back once per work tile, by each compute warpgroup set, when its last QK^T GEMM is done", 1)
        _barrier(m, Q_FREE_NAME, None, hk.sets)
    if hk.blackwell:
        tcgen05.kernel_allocations(m, 1)
    m.emit("fence_async_shared()", 1)
    shared = ", ".join(shared_args(hk))
    args = ", ".join(m.role_args())
    m.emit(f"# TL: {stmt_lines(hk.compute)[0].strip()}", 1)
    m.emit(f"# TL: {stmt_lines(hk.load)[0].strip()}", 1)
    tmem = "".join(f"{a}, " for a in tcgen05.TMEM_ARGS) if hk.blackwell else ""
    parts = [f"(_compute, (0, {shared}, {tmem}{args}, SCALE_POSITIVE{', MERGE' if m.merge else ''}))"]
    warps, regs = [], []
    for wg in range(1, hk.sets):  # ping-pong: each further warpgroup a partition of its own
        parts.append(f"(_compute, ({wg}, {shared}, {args}, SCALE_POSITIVE))")
        warps.append("WG_WARPS")
        regs.append(str(compute_regs(m)))
    parts.append(f"(_load, ({descs}, {shared}, {args}))")
    warps.append(str(const(m, n.Binary("-", hk.load.warp_stop, hk.load.warp_start))))
    regs.append(str(load_regs(hk)))
    m.emit("gl.warp_specialize([", 1)
    for p in parts:
        m.emit(p + ",", 2)
    m.emit(f"], [{', '.join(warps)}], [{', '.join(regs)}])", 1)
    m.emit()


def _barrier(m: Writer, name: str, slots: str | None, count: object) -> None:
    """An mbarrier, or ``slots`` of them (indexed ``name.index(i)``), each initialised to ``count`` arrivals."""
    if slots is None:
        m.emit(f"{name} = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())", 1)
        m.emit(f"mbarrier.init({name}, count={count})", 1)
        return
    m.emit(f"{name} = gl.allocate_shared_memory(gl.int64, [{slots}, 1], mbarrier.MBarrierLayout())", 1)
    m.emit(f"for i in gl.static_range({slots}):", 1)
    m.emit(f"mbarrier.init({name}.index(i), count={count})", 2)


def _filled_from(m: Writer, shared: str) -> str:
    """The tensor whose TMA copies fill a shared buffer (its descriptor gives the buffer's layout)."""
    for s in n.walk(m.hk.load.body):
        if isinstance(s, n.Copy) and s.dst == shared:
            return m.hk.views[s.src].tensor
    _fail(m.hk.shared[shared], f"{shared} is never filled by a TMA copy in the load role", m.file)


def _arrivals(m: Writer, barrier: str) -> int:
    """Physical arrivals per TL arrival: a compute-role Arrive happens once per warpgroup set."""
    compute = any(isinstance(s, n.Arrive) and s.barrier.name == barrier for s in n.walk(m.hk.compute.body))
    return m.hk.sets if compute else 1


def _launch_fn(m: Writer, combine: Combine | None, one_split: int | None = None) -> None:
    """``launch()``: the arguments checked, then the kernel; a split-KV pair's ``launch()`` first
    computes the split count for the call's sizes and device and allocates the scratch, and after
    the partial kernel launches the combine kernel (``slots`` index 1), as the Triton backend's does;
    ``one_split`` (see ``_split_kv_setup``): a launch of one split, the partial kernel alone storing
    into o and lse (``slots`` index 2: a kernel specialised to o's format); at any other count its last
    split merges the splits (``merge``, the kernel's ``MERGE``): no combine kernel is launched."""
    hk = m.hk
    _, programs = _grid(m)
    scalars = list(m.scalars)
    tensors = ["alibi_slopes"] if m.alibi else []
    keywords = "".join(f"{x}, " for x in scalars + tensors)
    m.emit(f"def launch(q, k, v, o, lse, *, {keywords}checked: bool = False, slots: list | None = None) -> None:")
    m.emit('"""Run the kernel on BHSD-indexed tensors (any strides whose rows are 16-byte aligned; BSHD is', 1)
    m.emit("q.transpose(1, 2)). Writes O into ``o`` (B, Hq, Sq, Dv) and the natural-log log-sum-exp into", 1)
    m.emit("``lse`` (B, Hq, Sq, fp32). ``checked``: the caller has checked the arguments already; ``slots``: the", 1)
    m.emit('compiled kernel of earlier calls that specialise alike (``launching.launch_kernel``)."""', 1)
    m.emit("B, Hq, Sq, _ = q.shape", 1)
    m.emit("Hkv, Sk = k.shape[1], k.shape[2]", 1)
    m.emit("if not checked:", 1)
    names = ", ".join(f"{t}={t}" for t in ["q", "k", "v", "o", "lse", *tensors])
    m.emit(f"check_arguments(dict({names}), HEAD_DIM, HEAD_DIM_V, TENSOR_DTYPES)", 2)
    for name in ("window_left", "window_right"):  # >= 0, and clamped to Sq + Sk so the int32 bounds cannot wrap
        if name in scalars:
            m.emit(f'{name} = window_bound("{name}", {name}, Sq, Sk)', 1)
    if combine is not None:
        _split_kv_setup(m, one_split)
    if combine is None:  # (a split-KV kernel's stores go to its own contiguous scratch)
        if hk.chain:  # (a work tile without K/V tiles would leave its Q barrier unwaited: compute._chained_tiles)
            m.emit("if Sk == 0:", 1)
            m.emit("raise LaunchError(\"k and v have no keys (Sk = 0); this kernel chains its work tiles and needs at least one\", where=\"k\", "
                   "hint=\"attention over no keys is empty: skip the call, or generate without chain\")", 2)
        m.emit("if o.stride(3) != 1:  # the stores are vectorised along the head dim", 1)
        m.emit("raise LaunchError(f\"o has strides {tuple(o.stride())}; this kernel writes rows of o contiguously (last stride 1)\", where=\"o\", "
               "hint=\"pass o = torch.empty(...) (contiguous), or a transposed view of one whose last dimension is contiguous\")", 2)
        if hk.o_via_kv:  # (compute._epilogue: this kernel's LSE offsets are 32-bit)
            m.emit("if sum((n - 1) * abs(st) for n, st in zip(lse.shape, lse.stride())) >= 2**31:", 1)
            m.emit("raise LaunchError(f\"lse {tuple(lse.shape)} spans past 2**31 elements; this kernel's LSE offsets are 32-bit\", where=\"lse\", "
                   "hint=\"split the batch into calls of fewer sequences\")", 2)
    for desc in m.descriptors + (["o_desc"] if hk.ostage else []):
        t = desc[: -len("_desc")]
        m.emit(f"{desc} = tma_descriptor({t}, {t!r}, DESC_BLOCKS[{t!r}])", 1)
    rt = [a for a in m.runtime_args() if a not in m.grid_names]
    values = {"sa": "alibi_slopes.stride(0)", **{stride: f"q.stride({i})" for i, stride in enumerate(Q_STRIDES)}}
    for tensor, strides in m.outputs() + (list(MERGED_OUTPUT_STRIDES.items()) if m.merge else []):
        values.update({stride: f"{tensor}.stride({i})" for i, stride in enumerate(strides)})
    args = ", ".join(values.get(a, a) for a in rt)
    m.emit(f"grid = ({programs},)", 1)
    m.emit("if grid[0] > 2**31 - 1:  # the grid's x limit", 1)
    m.emit("raise LaunchError(f\"{grid[0]} programs exceed the grid's limit of 2**31 - 1\", where=\"q\", "
           "hint=\"split the batch into calls of fewer sequences\")", 2)
    factor = fused_factor(m, hk.loops[-1])
    positive = "True" if factor is None else (repr(factor.value > 0) if isinstance(factor, n.Num) else f"{factor.id} > 0")
    merge = ", MERGE=not one" if m.merge else ""
    nreg = ", maxnreg=MAXNREG" if max_registers(m) is not None else ""
    m.emit(f"launch_kernel({hk.kernel.name}, grid, ({', '.join(m.descriptors)}, {args}), dict(SCALE_POSITIVE={positive}{merge}), "
           f"num_warps=WG_WARPS{nreg}, slots=slots{'' if one_split is None else ', index=2 if one else 0'})", 1)
    if combine is not None and not m.merge:
        _combine_launch(m, combine)


def _split_kv_setup(m: Writer, one_split: int | None) -> None:
    """The launch-time values (the split count, by ``attnforge.splits`` for this call's sizes and
    device) and the scratch the pair shares, fresh for each call. ``one_split``: the combine kernel is
    the built-in merge and the scratch's split index is this dimension (``plan.builtin.one_split_axis``),
    so a launch of one split has the partial kernel store into o and lse themselves (views of them with
    that dimension added), and a launch of more has its last split merge them (the row tiles' arrival
    counters, ``runtime.merge_counters``): no combine kernel runs either way."""
    hctx = host_ctx(m)
    m.emit("D, Dv = q.shape[3], v.shape[3]", 1)
    for v in m.hk.kernel.launch:
        check_host_name(v, m.hk.kernel, {"grid", *(sc.name for sc in m.hk.kernel.scratch)}, m.file)
        m.emit(f"# {v.name}: the split count for these sizes on this device, chosen per call (attnforge.splits)", 1)
        m.emit(f"{v.name} = split_count({host(v.programs, hctx)}, {host(v.tiles, hctx)}, program_slots(q.device), {v.per_sm})", 1)
    if m.merge:
        tiles = " * ".join(f"({host(ax.extent, hctx)})" for ax in m.hk.kernel.grid if ax.name != m.split_axis)
        m.emit(f"counters = merge_counters(q.device, {tiles})  # each row tile's arrived splits: 0 between launches (gluon/merge.py)", 1)
    formats = m.hk.kernel.dtype_map()
    indent = 1
    if one_split is not None:
        (nsplit,) = (v.name for v in m.hk.kernel.launch)
        o_part, lse_part = (next(sc.name for sc in m.hk.kernel.scratch if len(sc.shape) == rank) for rank in (5, 4))
        m.emit(f"one = {nsplit} == 1 and o.stride(3) == 1  # one split: its partial result is the merge's (the partial kernel's O stores want a unit last stride)", 1)
        m.emit("if one:  # the split's index is always 0: its stride is never used", 1)
        m.emit(f"{o_part}, {lse_part} = o.unsqueeze({one_split}), lse.unsqueeze({one_split})", 2)
        m.emit("else:", 1)
        indent = 2
    for sc in m.hk.kernel.scratch:
        shape = ", ".join(host(e, hctx) for e in sc.shape) + ("," if len(sc.shape) == 1 else "")
        m.emit(f"{sc.name} = scratch(torch.empty(({shape}), device=q.device, dtype={torch_dtype(formats.get(sc.dtype, sc.dtype))}))", indent)


def _combine_launch(m: Writer, combine: Combine, indent: int = 1) -> None:
    """The combine kernel (Triton, from the Triton backend's emitter): its arguments in the order
    ``triton.module`` declares them -- tensors, their strides, sizes, scalars, launch-time values."""
    info = combine.info
    hctx = host_ctx(m, combine.kernel, info.params)  # its own BM: the grid covers the rows it is told to
    grid = " * ".join(f"({host(ax.extent, hctx)})" for ax in combine.kernel.grid)
    args = [*info.tensors, *(f"*{t}.stride()" for t in info.tensors), *SIZE_ARGS, *info.scalars, *info.launch]
    constexprs = ", ".join(f"{c}={v}" for c, v in info.constexprs.items())
    m.emit(f"launch_kernel({info.name}, ({grid},), ({', '.join(args)}), dict({constexprs}), num_warps={info.num_warps}, "
           f"num_stages={info.num_stages}, slots=slots, index=1)", indent)


# ---------------------------------------------------------------------- assembly

HOPPER_IMPORTS = "from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait"
BLACKWELL_IMPORTS = ("from triton.experimental.gluon.language.nvidia.blackwell import (TensorMemoryLayout, allocate_tensor_memory, "
                     "fence_async_shared, get_tmem_reg_layout, mbarrier, tcgen05_mma, tma)")

@dataclass(frozen=True)
class Combine:
    """A split-KV program's second kernel, which merges the splits: the portable form (it only
    reads scratch and writes O and the LSE), translated by the Triton backend's emitter into a
    plain @triton.jit kernel of the same module."""

    kernel: n.Kernel
    info: KernelInfo
    lines: list[str]


@dataclass(frozen=True)
class GluonModule:
    source: str
    kernel: str
    params: dict[str, int]
    combine: KernelInfo | None = None  # a split-KV pair's combine kernel (compiled by Triton's compile)

    @property
    def kernels(self) -> tuple[str, ...]:
        return (self.kernel,) if self.combine is None else (self.kernel, self.combine.name)


def _combine(program: n.Program, head_dim: int, head_dim_v: int, file: str | None) -> Combine | None:
    """The second kernel of a split-KV program, translated by the Triton backend; None for a one-kernel program."""
    from ...analysis import scratch_ranks
    from ..base import refuse_hopper_form
    from ..triton.module import translate_kernel

    if len(program.kernels) == 1:
        return None
    if len(program.kernels) != 2 or not program.kernels[0].scratch:
        _fail(program.kernels[1], "the gluon backend translates a one-kernel program or a split-KV pair (the partial kernel in the Hopper "
              "form, then the combine kernel that reads its scratch)", file)
    kernel = program.kernels[1]
    refuse_hopper_form(n.Program((kernel,)), "the combine kernel of a split-KV pair (translated to Triton)", file)
    missing = set(kernel.launch_names()) - set(program.kernels[0].launch_names())
    if missing:  # launch() computes the partial kernel's launch-time values; the combine reuses them
        _fail(kernel, f"the combine kernel's launch-time value(s) {', '.join(sorted(missing))} are not the partial kernel's: "
              "a split-KV pair shares one split count", file)
    lines, info, helpers = translate_kernel(kernel, scratch_ranks(program), head_dim, head_dim_v, file)
    if helpers or info.descriptors:
        _fail(kernel, "the combine kernel needs no helper functions and no TMA descriptors (it merges partial results by pointer loads)", file)
    return Combine(kernel, info, lines)


def _desc_block(m: Writer, tensor: str, tile: tuple[n.Expr, ...]) -> list[int]:
    """A TMA descriptor's box (B, H, rows, cols): the TL copy's tile; Q's, a warpgroup set's rows of it (``Writer.q_parts``)."""
    rows, *rest = (const(m, e) for e in tile)
    return [1, 1, rows // (m.q_parts if tensor == "q" else 1), *rest]


def _l2_kv_bytes(kernel: n.Kernel) -> int:
    from ...targets import get_target

    return get_target(kernel.target or "sm_90").l2_bytes // 2


def _helper_source(name: str) -> str:
    from ..triton.exprs import HELPER_SOURCE

    return HELPER_SOURCE[name].replace("@triton.jit", "@gluon.jit").replace("tl.", "gl.")


def translate(program: n.Program, *, head_dim: int, head_dim_v: int, file: str | None = None) -> GluonModule:
    """The Gluon module for a one-kernel Hopper-form program (see ``shape`` for the form taken), or
    for a split-KV pair: the partial kernel in the Hopper form, the combine kernel in the portable form."""
    from ...tl.printer import print_program
    from .shape import read

    if not program.kernels:
        _fail(program, "the program has no kernel", file)
    kernel = program.kernels[0]
    hk = read(kernel, file)
    combine = _combine(program, head_dim, head_dim_v, file)
    if hk.split_kv != (combine is not None):
        _fail(kernel, "a kernel with a split axis s stores partial results that a second (combine) kernel merges; a one-kernel "
              "program's kernel has no split axis", file)
    dtypes = kernel.dtype_map()
    qkv = dtypes.get("qkv")
    if qkv not in GL_DTYPE or dtypes.get("out") != qkv:
        _fail(kernel, f"dtype qkv = {qkv}, out = {dtypes.get('out')}: the gluon backend's wgmma kernels take fp16 or bf16 in and out", file)
    if hk.o_via_q and head_dim != head_dim_v:
        _fail(kernel, f"ostage = 2 stores O (Dv = {head_dim_v}) through Qs (D = {head_dim}): it needs D == Dv", file,
              hint="ostage = 1 (a staging tile of its own), or leave ostage out")
    if hk.o_via_kv and head_dim != head_dim_v:
        _fail(kernel, f"ostage = 3 stores O (Dv = {head_dim_v}) through a K slot (D = {head_dim}) and a V slot: it needs D == Dv", file,
              hint="ostage = 1 (a staging tile of its own), or leave ostage out")
    one_split = one_split_axis(program) if combine is not None else None
    # the built-in merge is fused into the partial kernel's tail; any other second kernel runs as written
    m = Writer(hk, head_dim, head_dim_v, file, merge=one_split is not None)
    tiles = _descriptor_tiles(m)
    if [f"{t}_desc" for t in sorted(tiles)] != sorted(m.descriptors):
        want = "k and v (the compute role copies Q)" if hk.q_load is not None else "q, k and v"
        _fail(hk.load, f"the load role copies {', '.join(sorted(tiles)) or 'nothing'} by TMA; it must copy {want}", file)
    softmax_fn(m, hk.loops[-1], hk.loops[0].loop.stop if len(hk.loops) == 2 else None)
    if hk.pingpong:
        turn_helpers(m)
    if m.merge:
        merge_fn(m)
    if hk.chain:
        work_tile_fn(m)
    (tcgen05.compute_fn if hk.blackwell else compute_fn)(m)
    m.emit("@gluon.jit")
    m.emit(f"def _load({', '.join(m.descriptors)}, {', '.join(shared_args(hk))}, {', '.join(m.role_args())}):")
    m.emit(f"# TL: {stmt_lines(hk.load)[0].strip()}", 1)
    if hk.persistent:
        _persistent_load(m)
    else:
        _load_block(m, hk.load.body, 1)
    m.emit()
    _kernel_fn(m)
    _launch_fn(m, combine, one_split)
    second = combine if combine is not None and not m.merge else None  # the combine kernel the module holds

    nwg = hk.sets
    arch, family, mma = ("sm_100", "Blackwell", "tcgen05 into tensor memory") if hk.blackwell else ("sm_90", "Hopper", "wgmma")
    header = [
        f'"""{kernel.name}: generated by attnforge from TL (stage 2, Gluon for {family}, {arch}: TMA, mbarrier, {mma},',
        "warp specialisation). Do not edit: edit the TL.",
        "",
        f"Specialised to head dims D={head_dim}, Dv={head_dim_v}, the tile parameters below and the tensor formats in",
        "TENSOR_DTYPES; batch, heads, sequence lengths and all strides are runtime values. The TL program is TL_SOURCE.",
        '"""',
        "",
        "import torch",
        "from triton.experimental import gluon",
        "from triton.experimental.gluon import language as gl",
        (BLACKWELL_IMPORTS if hk.blackwell else HOPPER_IMPORTS),
        *(["import triton", "import triton.language as tl"] if second is not None else []),  # the combine kernel's
        "",
        "from attnforge.backends.gluon.runtime import tma_descriptor" + (", merge_counters" if m.merge else ""),
        "from attnforge.errors import LaunchError",
        "from attnforge.backends.triton.launching import launch_kernel" + (", program_slots, scratch" if combine is not None else "")
        + (", program_slots" if hk.persistent else ""),
        "from attnforge.backends.triton.runtime import check_arguments" + (", split_count" if combine is not None else "")
        + (", window_bound" if {"window_left", "window_right"} & set(m.scalars) else ""),
        "",
        f"KERNEL = {kernel.name!r}",
        *([f"SPLIT_KV = True  # {'the splits merged by the last (gluon/merge.py)' if m.merge else 'two kernels'}, scratch per call: "
           "attention()'s dispatch cache does not replay it"] if combine is not None else []),
        f"ARCH = {arch!r}  # the GPU family the kernel is written for (compile checks the target against it)",
        f"HEAD_DIM = {head_dim}",
        f"HEAD_DIM_V = {head_dim_v}",
        "TENSOR_DTYPES = {" + ", ".join(f'"{t}": torch.{torch_dtype(arg_format(t, dtypes))}' for t in ARG_SHAPES
                                      if t != "alibi_slopes" or m.alibi) + "}",
        "DESC_BLOCKS = {" + ", ".join(f"{t!r}: {_desc_block(m, t, tiles[t])}" for t in ("q", "k", "v") if t in tiles)
        + (f", 'o': {[1, 1, hk.params['BM'] // nwg, head_dim_v]}" if hk.ostage else "") + "}  # TMA blocks (B, H, rows, cols)",
        *([f"SCRATCH = {tuple(sc.name for sc in kernel.scratch)!r}  # fp32 buffers launch() allocates per call"] if combine is not None else []),
        f"FLOAT_ARGS = {tuple(x for x in kernel.scalars if x not in INT_SCALARS)!r}",
        *([f"MAXNREG = {max_registers(m)}  # registers a thread: the TL's occupancy = {occupancy(kernel)} programs an SM share its register file"]
          if max_registers(m) is not None else []),
        "TL_SOURCE = '''\\",
        print_program(program).replace("\\", "\\\\").replace("'''", "\\'\\'\\'") + "'''",
        "",
        "# compile-time values: the TL's parameters and head dims, the compute warpgroups' rows and warps",
        *(f"{k} = gl.constexpr({v})" for k, v in hk.params.items()),
        f"D = gl.constexpr({head_dim})",
        f"Dv = gl.constexpr({head_dim_v})",
        f"HM = gl.constexpr({hk.params['BM'] // nwg})",
        f"WG_WARPS = gl.constexpr({m.warps_per_set})",
        f"SETS = gl.constexpr({nwg})  # compute warpgroup sets (ping-pong: they take turns in order)",
        f"DTYPE = gl.constexpr({GL_DTYPE[qkv]})",
        *([f"L2_KV_BYTES = gl.constexpr({_l2_kv_bytes(kernel)})  # half of the target's L2: the K/V a section of work tiles shares (persistent)",
           "ELEMENT_BYTES = gl.constexpr(2)"] if hk.persistent and rows_slowest(m) else []),
        "",
    ]
    helpers = [_helper_source(h) for h in ("floordiv", "floormod", "tanh") if h in m.helpers]
    combined = [*second.lines, "", ""] if second is not None else []
    source = "\n".join(header) + "\n" + "\n".join(helpers) + ("\n" if helpers else "") + "\n".join(combined + m.lines) + "\n"
    return GluonModule(source, kernel.name, dict(hk.params), second.info if second is not None else None)
