"""The symbolic walk of one TL kernel's grid and body: names, shapes, data types, memory levels,
layouts and dataflow, statement by statement (TL2xx, TL3xx, TL4xx). ``KernelCheck`` mixes in the
GEMM and tensor-core rules (``check_gemm``) and the packed-GQA view rules (``check_packed``).

``KernelCheck`` runs once per probe (see ``checker``): probe 0 places the grid at the first
program instance and every loop at its first iteration, probe 1 at the last. Findings and the
register definitions the resource estimate needs go to the ``report`` it is given.
"""

from __future__ import annotations

import math

from ..abi import ARG_SHAPES, INPUTS, arg_format
from ..dtypes import TL_DTYPES
from ..errors import TLRuntimeError
from ..targets import Target
from . import nodes as n
from .check_gemm import GemmChecks
from .check_hopper import HopperChecks
from .check_info import Info, dims_text
from .check_packed import Packed, PackedViews
from .check_roles import check_layout, check_phases
from .evaluate import KindError, evaluate, expr_kind
from .findings import Finding
from .printer import expr as show


class KernelCheck(GemmChecks, PackedViews, HopperChecks):
    """Checks the grid and the body of one kernel under one probe, statement by statement."""

    def __init__(self, kernel: n.Kernel, target: Target | None, env: dict, report, tensors: dict[str, tuple], probe_index: int):
        self.k = kernel
        self.target = target
        self.env = env
        self.report = report
        self.tensors = tensors  # argument and scratch tensor -> evaluated shape
        self.probe = probe_index
        self.names: dict[str, Info] = {}
        # Names a statement would have defined had the checker not refused it: later uses of them
        # are not reported again (one wrong statement is one finding, not a cascade of TL200s).
        self.refused: set[str] = set()
        self.errors = 0
        self.silenced = 0  # uses of refused names passed over
        self.dtypes = kernel.dtype_map()
        self.written: set[str] = set()
        self.read: set[str] = set()
        self.read_at: dict[str, n.Node] = {}
        self.scalar_set = set(kernel.scalars)
        self.launch = frozenset(kernel.launch_names())
        self.scratch_dtypes = {sc.name: self.dtypes.get(sc.dtype, sc.dtype) for sc in kernel.scratch}
        self.axes: dict[str, tuple[n.GridAxis, object]] = {}  # grid axis -> (its node, its evaluated extent)
        self.loops: list[tuple[n.Loop, object, object]] = []  # enclosing loops with their evaluated start and stop
        self.overruns: set[int] = set()  # ids of the loops, axes and coordinates reported as TL312
        self.hopper_init()

    # -- helpers
    def add(self, code: str, node: n.Node, message: str, hint: str, severity: str = "error") -> None:
        self.errors += severity == "error"
        self.report(Finding(code, severity, node.line, node.col, message, hint))

    def resolve_dtype(self, name: str, node: n.Node) -> str:
        d = self.dtypes.get(name, name)
        if d not in TL_DTYPES:
            declared = ", ".join(self.dtypes) if self.dtypes else "none is declared"
            hint = "use " + ", ".join(TL_DTYPES) + f" or an alias from the dtype header ({declared})"
            if name in ("qkv", "acc", "out") and name not in self.dtypes:
                hint = (f"declare it: dtype {name} = {'fp32' if name == 'acc' else 'bf16'} (or another format). {name} defaults to fp32 only where it is "
                        "implied (tensor formats, GEMM and LogSumExp results); an alias written in a statement must be declared")
            self.add("TL301", node, f"unknown data type {name!r}", hint)
            return "fp32"
        return d

    def names_ok(self, e: n.Expr, env: dict, extra: tuple[str, ...] = ()) -> bool:
        indexes = n.indexes(e)
        for node in indexes:
            if node.name not in self.tensors:
                self.add("TL202", node, f"{node.name}[...] reads a tensor that is not an argument", "tensors: " + ", ".join(sorted(self.tensors)))
                return False
            rank = len(self.tensors[node.name])
            if len(node.args) != rank:
                self.add("TL302", node, f"{node.name} has {rank} dimensions but {show(node)} gives {len(node.args)} index(es)", "an expression reads one element: give one index per dimension")
                return False
        indexed = {node.name for node in indexes}
        missing = sorted(n.expr_names(e) - indexed - set(env) - set(extra) - {"inf"})
        for name in missing:
            self.add("TL203", e, f"name {name!r} is not defined here", "defined: " + ", ".join(sorted(set(env) | set(extra))))
        return not missing

    def value(self, e: n.Expr, env: dict, what: str, integer: bool = True):
        if not self.names_ok(e, env):
            return None
        try:
            v = evaluate(e, env, {t: _Probe() for t in self.tensors})
        except TLRuntimeError as err:  # evaluate() raises every failure of the expression as this
            self.add("TL311", e, f"cannot evaluate {what} {show(e)!r}: {err.message}", "use integer arithmetic: + - * // % min max cdiv")
            return None
        if integer and (isinstance(v, bool) or not isinstance(v, int)):
            self.add("TL311", e, f"{what} {show(e)!r} is not an integer", "use // or cdiv() instead of /, and integer sizes")
            return None
        return v

    def shape(self, dims: tuple[n.Expr, ...], env: dict, what: str) -> tuple | None:
        values = tuple(self.value(d, env, what) for d in dims)
        if any(v is None for v in values):
            return None
        for d, v in zip(dims, values):
            if v < 1:
                self.add("TL302", d, f"{what} {show(d)!r} is {v}, not positive", "dimensions must be at least 1")
                return None
        return values

    def compile_time(self, dims: tuple[n.Expr, ...], what: str) -> None:
        """TL314: ``dims`` must be known when the kernel is compiled (a tile's or buffer's shape, a
        pipeline depth), so they may not read a launch-time value, which the host picks per launch."""
        for d in dims:
            late = sorted(n.expr_names(d) & self.launch)
            if late:
                self.add("TL314", d, f"{what} {show(d)!r} reads {', '.join(late)}, which is known only at launch; it must be known when the kernel is compiled",
                         "use a parameter or a number here; a launch-time value may size grid axes, scratch tensors and global views, bound loops and index tiles")

    def get(self, name: str, node: n.Node) -> Info | None:
        info = self.names.get(name)
        if info is None and name in self.refused:
            self.silenced += 1
        elif info is None:
            self.add("TL200", node, f"{name!r} is used before it is defined", f"Allocate {name}, or produce it with a Copy or a Compute ... and get {name} earlier")
        return info

    def require_register(self, info: Info, name: str, node: n.Node, what: str) -> bool:
        if info.level != "register":
            self.add("TL405", node, f"{what} works on register tiles; {name} is in {info.level} memory", f"Copy {name} from {info.level} to register first")
            return False
        return True

    # -- walk
    def run(self) -> None:
        env = dict(self.env)
        if not self.k.grid:
            self.add("TL100", self.k, f"kernel {self.k.name} has no grid", "add e.g. grid b : B, h : Hq, m : cdiv(Sq, BM)")
        # Probe 0 looks at the first program instance, probe 1 at the last: offsets must fit both.
        for axis in self.k.grid:
            extent = self.value(axis.extent, env, f"grid extent of {axis.name}")
            self.axes[axis.name] = (axis, extent)
            env[axis.name] = 0 if extent is None or self.probe == 0 else max(0, extent - 1)
        check_layout(self)
        self.block(self.k.body, env, None)
        if not n.roles(self.k):  # barriers without roles: the body is one role
            check_phases(self, self.k.name, self.k.body, env)
        for tensor in sorted((self.read & self.written) - set(INPUTS)):  # writes to inputs are TL408
            node = self.read_at[tensor]
            self.add("TL412", node, f"kernel {self.k.name} reads {tensor}, which it also writes; program instances run in no fixed order, so one may read another's unfinished result",
                     f"write {tensor} in one kernel and read it in a later kernel of the program (kernels run one after another), "
                     "as a split-KV decode stores partial results in its first kernel and merges them in its second (docs/TL.md, section 10.3)")

    def block(self, body: tuple[n.Stmt, ...], env: dict, loop: n.Loop | None) -> None:
        for s in body:
            before = (self.errors, self.silenced)
            self.pending_read(s)
            getattr(self, "c_" + type(s).__name__)(s, env, loop)
            self.issued(s)
            made = _defines(s)
            if (self.errors, self.silenced) != before and made is not None and made not in self.names:
                self.refused.add(made)

    def c_Loop(self, s: n.Loop, env: dict, loop) -> None:
        start = self.value(s.start, env, "loop start")
        stop = self.value(s.stop, env, "loop stop")
        if s.var in env:
            self.add("TL204", s, f"loop variable {s.var!r} shadows an outer name", "pick another name")
        if s.stages is not None:
            self.compile_time((s.stages,), "the pipeline depth")
            stages = self.value(s.stages, env, "pipeline stages")
            if stages is not None and stages < 1:
                self.add("TL311", s.stages, f"pipeline stages {stages} must be at least 1", "use 1 (no pipelining) to 4")
        last = stop - 1 if isinstance(stop, int) and isinstance(start, int) and stop > start else start
        self.loops.append((s, start, stop))
        self.waited.append(set())  # Waits in the body guard reads in the body only
        try:
            self.block(s.body, {**env, s.var: (start if self.probe == 0 else last) if isinstance(start, int) else 0}, s)
            self.loop_end(s)
        finally:
            self.loops.pop()
            self.waited.pop()

    def c_Allocate(self, s: n.Allocate, env: dict, loop) -> None:
        if s.name in self.names and self.names[s.name].node is not s:
            prev = self.names[s.name].node
            self.add("TL201", s, f"{s.name} is allocated again (first at line {prev.line})", "give each buffer its own name")
        if s.level == n.BARRIER:
            self.alloc_barrier(s, env)
            return
        if s.level != "global":
            self.compile_time(s.shape, f"the {s.level} tile {s.name}'s dimension")
        shape = self.shape(s.shape, env, f"dimension of {s.name}")
        if s.level == "global":
            if s.tensor not in self.tensors:
                self.add("TL202", s, f"{s.tensor!r} is not a tensor argument of this kernel", "tensors: " + ", ".join(sorted(self.tensors)))
                return
            full = self.tensors[s.tensor]
            for axis, (e, dim) in enumerate(zip(s.offset, full)):
                i = self.value(e, env, "offset")
                if isinstance(i, int) and not 0 <= i < dim:
                    instance = "first" if self.probe == 0 else "last"
                    self.add("TL301", e, f"offset {show(e)} = {i} is outside dimension {axis} of {s.tensor} (size {dim}) in the {instance} program instance",
                             "check the head mapping: query head h reads key/value head h // (Hq // Hkv)")
            packed = self.check_packed_view(s, env, full, shape) if s.pack is not None else False
            if len(s.offset) + len(s.shape) != len(full):
                self.add("TL301", s, f"{s.tensor} has {len(full)} dimensions; the view takes {len(s.offset)} offsets and {len(s.shape)} dimensions", f"write at {s.tensor}[...] with {len(full) - len(s.shape)} indices")
            elif s.pack is None and shape is not None and tuple(full[len(s.offset):]) != shape:
                want = ARG_SHAPES.get(s.tensor)
                hint = f"the trailing dimensions of {s.tensor} are ({', '.join(want[len(s.offset):])})" if want else f"the trailing dimensions of {s.tensor} are {full[len(s.offset):]}"
                self.add("TL301", s, f"{s.name} views {s.tensor} with shape ({', '.join(show(d) for d in s.shape)}), which does not match the tensor", hint)
            fmt = arg_format(s.tensor, self.dtypes) if s.tensor in ARG_SHAPES else self.scratch_dtypes.get(s.tensor, "fp32")
            self.names[s.name] = Info("global", shape or (), s.shape, fmt, s, tensor=s.tensor, rows=packed or False)
            return
        dtype = self.resolve_dtype(s.dtype, s)
        if s.init is not None:
            self.value(s.init, env, "initial value", integer=False)
        ring = self.ring_size(s, env)
        if s.ring is not None and ring is None:
            return  # a ring without a valid stage count is refused (reported); its uses are passed over
        self.names[s.name] = Info(s.level, shape or (), s.shape, dtype, s, init=s.init, ring=ring)
        if s.name in self.fills:  # filled by TMA copies from global, perhaps in a role checked later: row and column indices
            self.names[s.name].rows, self.names[s.name].cols = True, len(s.shape) > 1
        self.report.defs(self.k, s, s.name, self.names[s.name], loop)

    def c_Copy(self, s: n.Copy, env: dict, loop) -> None:
        src = self.get(s.src, s)
        if src is None or not self.copy_refs_ok(s, env):
            return
        if src.level != s.src_level:
            self.add("TL401", s, f"{s.src} lives in {src.level} memory, but the Copy reads it from {s.src_level}", f"write 'from {src.level}'")
            return
        if s.src_level == s.dst_level:
            self.add("TL402", s, f"a Copy from {s.src_level} to {s.dst_level} moves nothing between levels", "Copy moves tiles global -> shared -> register and back; use Compute for register math")
            return
        dst = self.names.get(s.dst)
        if dst is None and s.dst_level != "register":
            self.add("TL401", s, f"{s.dst} is not allocated in {s.dst_level} memory", f"add 'Allocate {s.dst} in {s.dst_level} (...)' before this Copy")
            return
        if dst is not None and dst.level != s.dst_level:
            self.add("TL401", s, f"{s.dst} lives in {dst.level} memory, but the Copy writes it to {s.dst_level}", f"copy into a {s.dst_level} buffer, or write 'to {dst.level}'")
            return
        glob = src if s.src_level == "global" else dst if s.dst_level == "global" else None
        if glob is not None:
            if s.tile is None or s.coord is None:
                self.add("TL403", s, "a Copy to or from global memory needs the tile shape and its coordinate", f"write Copy {s.src} (BM, D) at [m, 0] from {s.src_level} to {s.dst_level} {s.dst}")
                return
            self.compile_time(s.tile, "the copied tile's dimension")
            tile = self.shape(s.tile, env, "tile dimension")
            coord = tuple(self.value(c, env, "coordinate") for c in s.coord)
            if len(s.tile) != len(glob.dims) or len(s.coord) != len(glob.dims):
                self.add("TL302", s, f"the global view has {len(glob.dims)} dimensions; tile and coordinate need one entry each", "e.g. (BM, D) at [m, 0] for a 2-d view")
                return
            self.check_tile_inside(s, glob, tile, coord, env)
        elif s.tile is not None:
            self.add("TL403", s, "a Copy between shared and register memory moves the whole tile; it takes no tile shape or coordinate", "drop the '(...) at [...]'")
            return
        if src.dtype != (dst.dtype if dst is not None else src.dtype) and "register" not in (s.src_level, s.dst_level):
            fix = f"allocate {s.dst} as {src.dtype}, and Cast in registers" if s.src_level == "global" else f"Cast to {dst.dtype} in registers before staging the tile in {s.src}"
            self.add("TL308", s, f"a {s.src_level} -> {s.dst_level} Copy moves bytes (cp.async, TMA) and cannot convert {src.dtype} to {dst.dtype}", fix)
        if s.src_level == "global":
            self.read.add(glob.tensor)
            self.read_at.setdefault(glob.tensor, s)
        if s.dst_level == "global":
            if glob.tensor in INPUTS:
                self.add("TL408", s, f"the kernel writes its input tensor {glob.tensor}", "store results into o, lse or a scratch tensor")
            if tile is not None and src.shape and src.shape != tile:
                self.add("TL302", s, f"{s.src} has shape {dims_text(src.dims)} but the stored tile is {dims_text(s.tile)}", "the tile shape must be the shape of the register tile")
            self.check_packed_store(s, src, glob)
            self.written.add(glob.tensor)
            return
        if s.src_level == "global":
            new_shape, new_dims, rows, cols = tile, s.tile, glob.rows or True, len(s.tile) > 1
        else:
            new_shape, new_dims, rows, cols = src.shape, src.dims, src.rows, src.cols
        if dst is not None and new_shape is not None and dst.shape and dst.shape != new_shape:
            self.add("TL302", s, f"{s.dst} has shape {dims_text(dst.dims)} but the copied tile is {dims_text(new_dims)}", f"Allocate {s.dst} with shape {dims_text(new_dims)}, or copy a tile of its shape")
        dtype = dst.dtype if dst is not None else src.dtype
        node = dst.node if dst is not None else s
        self.names[s.dst] = Info(s.dst_level, new_shape or (), new_dims, dtype, node, rows=rows, cols=cols,
                                  from_shared=s.src_level == "shared" and s.dst_level == "register", online=src.online,
                                  init=dst.init if dst is not None else None, ring=dst.ring if dst is not None else None)
        self.report.defs(self.k, s, s.dst, self.names[s.dst], loop)

    def check_tile_inside(self, s: n.Copy, glob: Info, tile: tuple | None, coord: tuple, env: dict) -> None:
        """TL312: a global Copy whose tile lies wholly outside its view in this probe's program
        instance and loop iteration. Every enclosing loop must run there (an empty loop's body never
        executes). The finding goes to the innermost loop, else the grid axis, whose variable the
        offending coordinate reads (once per loop or axis), else to the coordinate."""
        if tile is None or not glob.shape or len(glob.shape) != len(tile) or any(not isinstance(c, int) for c in coord):
            return
        if any(not (isinstance(a, int) and isinstance(b, int) and b > a) for _, a, b in self.loops):
            return
        if any(not isinstance(extent, int) or extent < 1 for _, extent in self.axes.values()):
            return
        for axis, (c, size, extent) in enumerate(zip(coord, tile, glob.shape)):
            first = c * size
            if first < extent and first + size > 0:
                continue
            names = n.expr_names(s.coord[axis])
            view = glob.node.name if isinstance(glob.node, n.Allocate) else glob.tensor
            dim, tdim = show(glob.dims[axis]), show(s.tile[axis])
            verb = "writes" if s.dst_level == "global" else "reads"
            where = f"the Copy at line {s.line} {verb} elements {first}..{first + size - 1} of dimension {axis} of {view}, which has {extent} ({dim})"
            instance = "first" if self.probe == 0 else "last"
            side = "before the first" if first < 0 else "past the last"
            loop = next((lp for lp, _, _ in reversed(self.loops) if lp.var in names), None)
            axis_node = next((self.axes[a][0] for a in reversed(list(self.axes)) if a in names), None)
            node = loop or axis_node or s.coord[axis]
            if id(node) in self.overruns:
                return
            self.overruns.add(id(node))
            if loop is not None:
                self.add("TL312", loop, f"loop {loop.var} runs {side} tile of {view}: at {loop.var} = {env[loop.var]} (its {instance} iteration in the {instance} program instance) {where}",
                         f"loop over the tiles that exist, e.g. for {loop.var} = 0 : cdiv({dim}, {tdim})")
            elif axis_node is not None:
                self.add("TL312", axis_node, f"grid axis {axis_node.name} runs {side} tile of {view}: at {axis_node.name} = {env[axis_node.name]} (the {instance} program instance) {where}",
                         f"one program instance per tile, e.g. {axis_node.name} : cdiv({dim}, {tdim})")
            else:
                self.add("TL312", node, f"the tile of {view} at [{', '.join(show(e) for e in s.coord)}] lies {side} tile: {where}",
                         f"coordinates count tiles of {tdim} from 0 to cdiv({dim}, {tdim}) - 1")
            return

    def c_Elementwise(self, s: n.Elementwise, env: dict, loop) -> None:
        tiles: list[tuple[str, Info]] = []
        for a in s.args:
            if isinstance(a, n.Name) and a.id in self.names:
                info = self.names[a.id]
                if not self.require_register(info, a.id, s, f"Compute {s.op}"):
                    return
                tiles.append((a.id, info))
            else:
                if isinstance(a, n.Name) and a.id in self.refused:
                    self.silenced += 1
                    return  # its defining statement was refused and reported
                if isinstance(a, n.Name) and a.id not in env and a.id not in self.scalar_set:
                    self.add("TL200", a, f"{a.id!r} is used before it is defined", "define the tile, or declare a runtime scalar with 'scalar NAME'")
                    return
                self.value(a, env, "operand", integer=False)
        if not tiles:
            self.add("TL302", s, f"Compute {s.op} has no tile operand", "name at least one register tile")
            return
        first_name, first = max(tiles, key=lambda t: len(t[1].shape))
        for name, info in tiles:
            if info.shape == first.shape or not info.shape or not first.shape:
                continue
            if len(info.shape) == 1 and len(first.shape) == 2 and info.shape[0] == first.shape[0]:
                continue  # a per-row vector widens across the columns
            self.add("TL306", s, f"Compute {s.op}: {name} {dims_text(info.dims)} and {first_name} {dims_text(first.dims)} do not broadcast", "operands must have equal shapes, or be a per-row vector (BM) against a (BM, N) tile")
            return
        if s.op in ("RowMax", "RowSum"):
            if len(first.shape) != 2:
                self.add("TL302", s, f"{s.op} reduces the columns of a 2-d tile; {first_name} is {dims_text(first.dims)}", "apply it to a (rows, cols) tile")
                return
            out = Info("register", first.shape[:1], first.dims[:1], first.dtype, s, rows=first.rows)
        else:
            online = next((i.online for _, i in tiles if i.online is not None), None)
            out = Info("register", first.shape, first.dims, first.dtype, s, layout=first.layout, rows=first.rows, cols=first.cols, online=online)
        target = s.out if s.out is not None else s.args[0].id
        if s.op == "Add" and target in self.names:
            # Adding update-weighted values into a tile that already exists accumulates them.
            src = next((i.online for name, i in tiles if name != target and i.online is not None), None)
            if src is not None and target not in src.rescale:
                self.add("TL409", s, f"{target} accumulates values weighted by the online softmax at line {src.line} but is not rescaled there", f"add 'rescale {target}' to that OnlineSoftmax")
            out.online = None
        if s.out is None and target in self.names:
            keep = self.names[target]
            out.node, out.init = keep.node, keep.init
            if s.op in ("RowMax", "RowSum") or keep.shape != out.shape:
                self.add("TL306", s, f"Compute {s.op} would change the shape of {target} in place", "add 'and get NEW_NAME'")
                return
        self.names[target] = out
        self.report.defs(self.k, s, target, out, loop)

    def c_Cast(self, s: n.Cast, env: dict, loop) -> None:
        src = self.get(s.src, s)
        if src is None or not self.require_register(src, s.src, s, "Cast"):
            return
        dtype = self.resolve_dtype(s.dtype, s)
        out = Info("register", src.shape, src.dims, dtype, src.node if s.out is None else s, layout=src.layout, rows=src.rows, cols=src.cols, online=src.online, init=src.init)
        self.names[s.out or s.src] = out
        self.report.defs(self.k, s, s.out or s.src, out, loop)

    def _index_names(self, info: Info) -> tuple[str, ...]:
        return (("q_idx",) if info.rows else ()) + (("h_idx",) if isinstance(info.rows, Packed) else ()) + (("kv_idx",) if info.cols else ())

    def c_ScoreMod(self, s: n.ScoreMod, env: dict, loop) -> None:
        t = self.get(s.target, s)
        if t is None or not self.require_register(t, s.target, s, "ScoreMod"):
            return
        self.names_ok(s.expr, env, ("score",) + self._index_names(t) + self.h_idx_defined(s.expr, t, s.target))
        self.want_kind(s.expr, "num", "a score modifier must give a number, not a truth value", "to drop keys use 'Compute Mask S keep ...'")

    def want_kind(self, e: n.Expr, want: str, message: str, hint: str) -> None:
        try:
            if expr_kind(e) != want:
                self.add("TL310", e, message, hint)
        except KindError as err:
            self.add("TL310", err.node, f"this expression mixes truth values and numbers: {err}", hint)

    def c_Mask(self, s: n.Mask, env: dict, loop) -> None:
        t = self.get(s.target, s)
        if t is None or not self.require_register(t, s.target, s, "Mask"):
            return
        self.names_ok(s.keep, env, self._index_names(t) + self.h_idx_defined(s.keep, t, s.target))
        self.want_kind(s.keep, "bool", "a mask must be a truth value (a comparison, and, or, not)", "e.g. keep kv_idx <= q_idx + Sk - Sq")

    def c_Softmax(self, s: n.Softmax, env: dict, loop) -> None:
        t = self.get(s.target, s)
        if t is not None:
            self.require_register(t, s.target, s, "Softmax")

    def c_OnlineSoftmax(self, s: n.OnlineSoftmax, env: dict, loop) -> None:
        S = self.get(s.scores, s)
        m = self.get(s.row_max, s)
        l = self.get(s.row_sum, s)
        if S is None or m is None or l is None:
            return
        for name, info in ((s.scores, S), (s.row_max, m), (s.row_sum, l)):
            if not self.require_register(info, name, s, "OnlineSoftmax"):
                return
        rows = S.shape[:1]
        for name, info, init, want in ((s.row_max, m, "-inf", -math.inf), (s.row_sum, l, "0", 0.0)):
            if info.shape != rows:
                self.add("TL307", s, f"{name} has shape {dims_text(info.dims)}; the running state needs one value per row of {s.scores} {dims_text(S.dims[:1])}", f"Allocate {name} in register {dims_text(S.dims[:1])} : acc = {init}")
            elif isinstance(info.node, n.Allocate):
                try:
                    start = 0.0 if info.init is None else evaluate(info.init, self.env)
                except TLRuntimeError:  # evaluate()'s only failure; the Allocate reports it
                    start = None
                if start is None:
                    continue
                ok = float(start) <= -1e30 if want == -math.inf else float(start) == want
                if not ok:
                    self.add("TL411", info.node, f"{name} starts at {show(info.init) if info.init is not None else 0}; the running {'max' if want else 'sum'} must start at {init}", f"write '= {init}'")
        for name in s.rescale:
            acc = self.get(name, s)
            if acc is not None and acc.shape[:1] != rows:
                self.add("TL307", s, f"rescaled {name} {dims_text(acc.dims)} does not have the rows of {s.scores}", "rescale accumulators with one row per score row")
        out = Info("register", S.shape, S.dims, S.dtype, s, layout=S.layout, rows=S.rows, cols=S.cols, online=s)
        self.names[s.out] = out
        self.report.defs(self.k, s, s.out, out, loop)

    def c_Normalize(self, s: n.Normalize, env: dict, loop) -> None:
        acc, l = self.get(s.acc, s), self.get(s.row_sum, s)
        if acc is None or l is None or not all(self.require_register(i, nm, s, "Normalize") for i, nm in ((acc, s.acc), (l, s.row_sum))):
            return
        if acc.shape[:1] != l.shape:
            self.add("TL307", s, f"{s.row_sum} {dims_text(l.dims)} does not have one value per row of {s.acc} {dims_text(acc.dims)}", "normalise by the running sum of the same rows")
        out = Info("register", acc.shape, acc.dims, acc.dtype, s, rows=acc.rows, cols=acc.cols)
        self.names[s.out] = out
        self.report.defs(self.k, s, s.out, out, loop)

    def c_LogSumExp(self, s: n.LogSumExp, env: dict, loop) -> None:
        m, l = self.get(s.row_max, s), self.get(s.row_sum, s)
        if m is None or l is None or not all(self.require_register(i, nm, s, "LogSumExp") for i, nm in ((m, s.row_max), (l, s.row_sum))):
            return
        if m.shape != l.shape:
            self.add("TL307", s, f"{s.row_max} and {s.row_sum} differ in shape", "both are per-row state vectors")
        out = Info("register", m.shape, m.dims, self.dtypes.get("acc", "fp32"), s, rows=m.rows)
        self.names[s.out] = out
        self.report.defs(self.k, s, s.out, out, loop)

    def c_Reshape(self, s: n.Reshape, env: dict, loop) -> None:
        t = self.get(s.name, s)
        if t is None or not self.require_register(t, s.name, s, "Reshape"):
            return
        if t.layout is not None and t.layout != s.src_layout:
            self.add("TL407", s, f"{s.name} is in layout {t.layout}, not {s.src_layout}", f"write 'Reshape {s.name} from {t.layout} to {s.dst_layout}'")
        t.layout = s.dst_layout


class _Probe:
    """Stands in for a tensor while checking: any element reads as 1.0."""

    def __getitem__(self, index):
        return 1.0


def _defines(s: n.Stmt) -> str | None:
    """The tile a statement defines from scratch (None for one that changes a tile in place)."""
    if isinstance(s, n.Allocate):
        return s.name
    if isinstance(s, n.Copy):
        return s.dst if s.dst_level != "global" else None
    if isinstance(s, (n.Gemm, n.OnlineSoftmax, n.Normalize, n.LogSumExp)):
        return s.out
    if isinstance(s, (n.Elementwise, n.Cast)):
        return s.out
    return None
