"""Stage 2: a checked TL program -> one standalone Triton module (kernels plus a launcher).

The translation is statement by statement; every TL statement appears as a comment above the
code it became, and TL names stay the Python names. What TL makes explicit and Triton decides by
itself is dropped with a comment: shared-memory tiles (Triton stages loads through shared memory
as its pipeliner sees fit) and register layouts (``Reshape``; ``tl.dot`` converts operands).

Memory model of the generated code:
- a global view (``Allocate X in global (...) at t[i, j]``) is a base pointer whose offset is
  computed in int64 once per program, so batch and head strides never overflow; offsets inside a
  view are int32, which the launcher guarantees by checking every view's span;
- tiles are padded to powers of two (Triton's block shapes): head dims D/Dv become D_PAD/DV_PAD
  and the padding is masked on load and store, so callers never pad;
- elements outside a view read as 0 (as in the TL interpreter) and are never written.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass

from .. import __version__
from ..dtypes import FORMATS
from ..errors import Position, TranslateError
from ..tl import nodes as n
from ..abi import ARG_DTYPE, ARG_SHAPES, arg_format
from ..tl.printer import expr as tl_expr
from ..tl.printer import kernel as print_kernel
from ..tl.printer import print_program, stmt as tl_stmt
from . import exprs

TRITON_DTYPE = {
    "fp16": "tl.float16", "bf16": "tl.bfloat16", "fp32": "tl.float32", "tf32": "tl.float32",
    "fp64": "tl.float64", "fp8e4m3": "tl.float8e4nv", "fp8e5m2": "tl.float8e5",
}
TORCH_DTYPE = {
    "fp16": "torch.float16", "bf16": "torch.bfloat16", "fp32": "torch.float32", "fp64": "torch.float64",
    "fp8e4m3": "torch.float8_e4m3fn", "fp8e5m2": "torch.float8_e5m2",
}
SIGNATURE_DTYPE = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64", "fp8e4m3": "fp8e4nv", "fp8e5m2": "fp8e5"}
SIZE_ARGS = ("B", "Hq", "Hkv", "Sq", "Sk")
INT_SCALARS = frozenset({"window_left", "window_right"})
# Parameters that are launch options rather than kernel constants.
LAUNCH_PARAMS = {"warps": "num_warps", "stages": "num_stages"}
# Parameters that choose how the translator writes the kernel (0 or 1), not kernel constants:
#   tma:        load q/k/v tiles through TMA tensor descriptors (sm_90+) instead of pointer loads
#   persistent: launch one program per SM that loops over the TL grid, instead of one per point
#   ws:         warp-specialise the pipelined K/V loops (tl.range(..., warp_specialize=True))
STRATEGY_PARAMS = ("tma", "persistent", "ws")
TMA_TENSORS = ("q", "k", "v")
INDENT = "    "


@dataclass
class _Tile:
    """A register (or shared) tile in the generated code."""

    dims: tuple[str, ...]  # Triton block dims (constexpr names or numbers)
    tl_dtype: str
    rows: str | None = None  # Python expression of the global row index vector (q_idx)
    cols: str | None = None  # ... of the column index vector (kv_idx)
    level: str = "register"


@dataclass
class _View:
    """A global view: base pointer plus one (extent, stride) per view dimension."""

    tensor: str
    extents: tuple[n.Expr, ...]
    strides: tuple[str, ...]
    tl_dtype: str
    offsets: tuple[str, ...] = ()  # Python expressions of the leading indices (TMA coordinates)


@dataclass
class KernelInfo:
    """What a caller needs to launch or compile one generated kernel."""

    name: str
    tensors: tuple[str, ...]  # pointer arguments, in order
    ranks: dict[str, int]  # dimensions of each tensor argument (one stride argument each)
    tensor_dtypes: dict[str, str]
    scalars: tuple[str, ...]
    params: dict[str, int]
    constexprs: dict[str, int]
    num_warps: int
    num_stages: int
    descriptors: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # (argument, tensor, block shape)
    persistent: bool = False

    def signature(self, stride_one: bool = True) -> tuple[dict[str, str], dict[str, object]]:
        """Triton compile signature and constants: (arg -> type, constexpr arg -> value).

        With ``stride_one`` the innermost stride of every tensor is specialised to 1, as Triton
        does at run time for contiguous rows, so an ahead-of-time compile matches the real one."""
        sig: dict[str, str] = {f"{t}_ptr": "*" + SIGNATURE_DTYPE[self.tensor_dtypes[t]] for t in self.tensors}
        for name, tensor, block in self.descriptors:
            sig[name] = f"tensordesc<{SIGNATURE_DTYPE[self.tensor_dtypes[tensor]]}[{', '.join(map(str, block))}]>"
        const: dict[str, object] = {}
        for t in self.tensors:
            names = stride_names(t, self.ranks[t])
            for name in names:
                sig[name] = "i32"
            if stride_one:
                sig[names[-1]] = "constexpr"
                const[names[-1]] = 1
        sig.update({s: "i32" for s in SIZE_ARGS})
        sig.update({s: "i32" if s in INT_SCALARS else "fp32" for s in self.scalars})
        for name, value in self.constexprs.items():
            sig[name] = "constexpr"
            const[name] = value
        return sig, const

    def divisible_strides(self, head_dims: tuple[int, ...]) -> frozenset[str]:
        """Strides Triton's JIT will see as multiples of 16 for contiguous tensors of these head
        dims (every stride but the innermost is a multiple of the head dim)."""
        if any(d % 16 for d in head_dims):
            return frozenset()
        return frozenset(name for t in self.tensors for name in stride_names(t, self.ranks[t])[:-1])


def stride_names(tensor: str, rank: int) -> list[str]:
    return [f"stride_{tensor}{i}" for i in range(rank)]


@dataclass
class TritonModule:
    """The generated source and what the caller needs to know about each kernel in it."""

    source: str
    kernels: list[KernelInfo]


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


class _KernelTranslator:
    def __init__(self, kernel: n.Kernel, head_dim: int, head_dim_v: int, file: str | None, scratch_ranks: dict[str, int]):
        self.k = kernel
        self.file = file
        self.D, self.Dv = head_dim, head_dim_v
        self.dtypes = kernel.dtype_map()
        self.params = {p.name: p.value for p in kernel.params}
        self.lines: list[str] = []
        self.depth = 1
        self.tiles: dict[str, _Tile] = {}
        self.views: dict[str, _View] = {}
        self.scratch_ranks = scratch_ranks
        self.tensor_ranks = {**{a: len(s) for a, s in ARG_SHAPES.items()}, **scratch_ranks}
        self.generated: set[str] = set()
        self.helpers: set[str] = set()
        self.nonneg: set[str] = set(SIZE_ARGS) | {"D", "Dv"} | set(self.params) | {g.name for g in kernel.grid}
        self.scope: dict[str, str] = {}  # TL name -> Python expression for expression contexts
        self.loop_stops: dict[str, n.Expr] = {}  # loop variable -> its (exclusive) upper bound
        for name in SIZE_ARGS + ("D", "Dv"):
            self.scope[name] = name
        for name, value in self.params.items():
            # launch options and strategies are literals in the kernel; the rest are constexpr arguments
            self.scope[name] = str(value) if name in LAUNCH_PARAMS or name in STRATEGY_PARAMS else name
        for name in STRATEGY_PARAMS:
            if self.params.get(name, 0) not in (0, 1):
                self.fail(kernel, f"parameter {name} = {self.params[name]} is not 0 or 1", f"{name} = 1 turns the strategy on, 0 off")
        self.tma, self.persistent, self.ws = (bool(self.params.get(p, 0)) for p in STRATEGY_PARAMS)
        self.descriptors: dict[tuple[str, tuple[str, ...]], str] = {}
        self._check_strategies()
        for name in kernel.scalars:
            self.scope[name] = name
        self.tensors = self._tensors_used()

    # ------------------------------------------------------------------ helpers
    def fail(self, node: n.Node, message: str, hint: str | None = None) -> None:
        raise TranslateError(f"{self.k.name}: {message}", where=Position(node.line, node.col, self.file), hint=hint)

    def emit(self, line: str = "") -> None:
        self.lines.append(INDENT * self.depth + line if line else "")

    def comment_tl(self, s: n.Stmt) -> None:
        first = tl_stmt(s)[0].strip()
        self.emit(f"# TL: {first}")

    def name(self, tl_name: str, node: n.Node) -> str:
        """The Python name of a TL name; TL names that clash with Python or generated code are errors."""
        if keyword.iskeyword(tl_name) or tl_name in ("tl", "triton", "torch", "float", "range", "pid"):
            self.fail(node, f"the name {tl_name!r} is reserved in the generated Python", "rename it in the TL program")
        if tl_name in self.generated:
            self.fail(node, f"the name {tl_name!r} clashes with a name the translator generates", "rename it in the TL program")
        return tl_name

    def fresh(self, base: str) -> str:
        """A generated name that no TL name uses."""
        name, i = base, 1
        while name in self.generated or name in self.tiles or name in self.views or name in self.scope:
            i += 1
            name = f"{base}{i}"
        self.generated.add(name)
        return name

    def ctx(self, extra: dict[str, str] | None = None) -> exprs.ExprContext:
        names = dict(self.scope)
        names.update(extra or {})
        floats = {s for s in self.k.scalars if s not in INT_SCALARS} | {"score"}
        return exprs.ExprContext(names, set(self.nonneg), self._index, self.helpers, self.file, floats)

    def dev(self, e: n.Expr, extra: dict[str, str] | None = None) -> str:
        ctx = self.ctx(extra)
        out = exprs.device(e, ctx)
        return out

    def _index(self, e: n.Index) -> str:
        if e.name not in self.tensors:
            self.fail(e, f"{e.name}[...] reads a tensor this kernel does not take", "tensors: " + ", ".join(self.tensors))
        rank = self.tensor_ranks[e.name]
        if len(e.args) != rank:
            self.fail(e, f"{e.name} has {rank} dimensions; {e.name}[...] gives {len(e.args)} index(es)")
        terms = [f"tl.cast({self.dev(a)}, tl.int64) * {s}" for a, s in zip(e.args, stride_names(e.name, rank))]
        return f"tl.load({e.name}_ptr + {' + '.join(terms)})"

    def block_dim(self, e: n.Expr, node: n.Node) -> str:
        """A tile dimension as a Triton block size: a power-of-two parameter or number, or a head dim (padded)."""
        if isinstance(e, n.Name) and e.id == "D":
            return "D_PAD"
        if isinstance(e, n.Name) and e.id == "Dv":
            return "DV_PAD"
        if isinstance(e, n.Name) and e.id in self.params:
            value = self.params[e.id]
            if value is None or not _pow2(value):
                self.fail(node, f"tile dimension {e.id} = {value} is not a power of two", "Triton block shapes are powers of two: choose 16, 32, 64, 128, ...")
            return e.id
        if isinstance(e, n.Num) and isinstance(e.value, int) and _pow2(e.value):
            return str(e.value)
        self.fail(node, f"tile dimension {tl_expr(e)} is not a parameter, a number or a head dim", "write tiles as (BM, D), (BN, Dv), (BM) with power-of-two parameters")
        raise AssertionError

    def pad_needed(self, e: n.Expr) -> bool:
        return isinstance(e, n.Name) and ((e.id == "D" and self.D != next_pow2(self.D)) or (e.id == "Dv" and self.Dv != next_pow2(self.Dv)))

    def tl_format(self, alias: str, node: n.Node) -> str:
        fmt = self.dtypes.get(alias, alias)
        if fmt not in TRITON_DTYPE:
            self.fail(node, f"data type {alias!r} has no Triton equivalent", "formats: " + ", ".join(TRITON_DTYPE))
        return fmt

    def _tensors_used(self) -> tuple[str, ...]:
        used: set[str] = set()
        for s in n.walk(self.k.body):
            if isinstance(s, n.Allocate) and s.level == "global":
                used.add(s.tensor)
            for e in _stmt_exprs(s):
                used |= {i.name for i in n.indexes(e)}
        order = [a for a in ARG_SHAPES if a in used] + [sc.name for sc in self.k.scratch if sc.name in used]
        for t in used - set(order):
            self.fail(self.k, f"tensor {t!r} is neither a kernel argument nor declared scratch", "arguments: " + ", ".join(ARG_SHAPES))
        return tuple(order)

    def tensor_format(self, t: str) -> str:
        if t in ARG_DTYPE:
            return arg_format(t, self.dtypes)
        sc = next(sc for sc in self.k.scratch if sc.name == t)
        return self.tl_format(sc.dtype, sc)

    def _check_strategies(self) -> None:
        target = None
        if self.k.target is not None:
            from ..targets import get_target
            target = get_target(self.k.target)
        if self.tma and target is not None and not target.has_tma:
            self.fail(self.k, f"tma = 1 needs TMA (sm_90 or newer); this kernel targets {target.sm}", "set tma = 0: pointer loads with cp.async")
        if self.ws and target is not None and target.cc[0] == 9:
            self.fail(self.k, "ws = 1 (warp_specialize) does not compile for sm_90 with Triton 3.6 (its NVGPUWarpSpecialization pass fails)",
                      "set ws = 0 on Hopper")

    # ------------------------------------------------------------------ kernel
    def translate(self) -> tuple[list[str], KernelInfo]:
        k = self.k
        for p, v in self.params.items():
            if v is None:
                self.fail(k, f"parameter {p} is open", "a sketch cannot be translated: give every parameter a value")
        for t in self.tensors:
            for s in stride_names(t, self.tensor_ranks[t]):
                self.generated.add(s)
            self.generated.add(f"{t}_ptr")
        self.generated |= {"D_PAD", "DV_PAD", "pid"}
        constexprs = {"D": self.D, "Dv": self.Dv, "D_PAD": next_pow2(self.D), "DV_PAD": next_pow2(self.Dv)}
        constexprs.update({p: v for p, v in self.params.items() if p not in LAUNCH_PARAMS and p not in STRATEGY_PARAMS})
        self.constexprs = constexprs
        self.generated |= {f"{t}_desc" for t in TMA_TENSORS} | {"tile", "num_tiles"}

        self._grid()
        self.block(k.body)
        if self.persistent:
            self.depth -= 1
        args = [f"{t}_ptr" for t in self.tensors] + list(self.descriptors.values())
        for t in self.tensors:
            args += stride_names(t, self.tensor_ranks[t])
        args += list(SIZE_ARGS) + list(k.scalars)
        args += [f"{c}: tl.constexpr" for c in constexprs]
        header = ["@triton.jit", f"def {k.name}("]
        header += [INDENT + a + "," for a in args]
        header += ["):"]
        tl_lines = [line for line in _kernel_header_lines(k)]
        doc = [INDENT + '"""TL kernel ' + k.name + ':', ""] + [INDENT + line for line in tl_lines] + [INDENT + '"""']
        info = KernelInfo(
            name=k.name, tensors=self.tensors, ranks={t: self.tensor_ranks[t] for t in self.tensors},
            tensor_dtypes={t: self.tensor_format(t) for t in self.tensors}, scalars=tuple(k.scalars),
            params=dict(self.params), constexprs=constexprs,
            num_warps=int(self.params.get("warps") or 4), num_stages=int(self.params.get("stages") or 2),
            descriptors=tuple((name, tensor, (1,) * (self.tensor_ranks[tensor] - len(dims)) + tuple(self._block_value(d) for d in dims))
                              for (tensor, dims), name in self.descriptors.items()),
            persistent=self.persistent,
        )
        return header + doc + self.lines, info

    def _grid(self) -> None:
        """Flatten the TL grid onto Triton's axis 0, the last TL axis fastest (neighbouring
        programs share K/V in L2)."""
        k = self.k
        self.emit(f"# TL grid: {', '.join(f'{g.name} : {tl_expr(g.extent)}' for g in k.grid)} (flattened, {k.grid[-1].name} fastest)" if k.grid else "# TL grid: one program")
        if not k.grid:
            return
        if self.persistent:
            total = " * ".join(f"({self.dev(g.extent)})" for g in k.grid)
            self.emit("# persistent: one program per SM walks the grid's points in order, stride = programs")
            self.emit(f"num_tiles = {total}")
            self.emit("for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):")
            self.depth += 1
            self.emit("pid = tile")
        else:
            self.emit("pid = tl.program_id(0)")
        grid_names = [g.name for g in k.grid]
        for i, g in enumerate(reversed(k.grid)):
            if n.expr_names(g.extent) & set(grid_names):
                self.fail(g, f"grid extent of {g.name} depends on another grid axis", "Triton grids are rectangular: give every axis an extent of sizes and parameters")
            name = self.name(g.name, g)
            extent = self.dev(g.extent)
            if i == len(k.grid) - 1:
                self.emit(f"{name} = pid")
            else:
                self.emit(f"{name} = pid % {extent}")
                self.emit(f"pid = pid // {extent}")
            self.scope[g.name] = name
        self.emit()

    def block(self, body: tuple[n.Stmt, ...]) -> None:
        for s in body:
            getattr(self, "s_" + type(s).__name__)(s)

    # ------------------------------------------------------------------ statements
    def s_Allocate(self, s: n.Allocate) -> None:
        self.comment_tl(s)
        name = self.name(s.name, s)
        if s.level == "global":
            if s.tensor not in self.tensor_ranks:
                self.fail(s, f"{s.tensor!r} is not a tensor argument or scratch")
            rank = self.tensor_ranks[s.tensor]
            strides = stride_names(s.tensor, rank)
            if len(s.offset) + len(s.shape) != rank:
                self.fail(s, f"{s.tensor} has {rank} dimensions; offset {len(s.offset)} + shape {len(s.shape)} do not add up")
            base = f"{s.tensor}_ptr"
            terms = [f"tl.cast({self.dev(e)}, tl.int64) * {st}" for e, st in zip(s.offset, strides)]
            self.emit(f"{name} = {base}" + "".join(f" + {t}" for t in terms))
            self.views[s.name] = _View(s.tensor, s.shape, tuple(strides[len(s.offset):]), self.tensor_format(s.tensor),
                                       tuple(self.dev(e) for e in s.offset))
            return
        fmt = self.tl_format(s.dtype, s)
        dims = tuple(self.block_dim(d, s) for d in s.shape)
        if s.level == "shared":
            self.emit("# (shared memory is Triton's to manage: loads are staged through it by the pipeliner)")
            self.tiles[s.name] = _Tile(dims, fmt, level="shared")
            return
        init = 0.0 if s.init is None else self.dev(s.init)
        self.emit(f"{name} = tl.full([{', '.join(dims)}], {init}, {TRITON_DTYPE[fmt]})")
        self.tiles[s.name] = _Tile(dims, fmt)

    def s_Copy(self, s: n.Copy) -> None:
        self.comment_tl(s)
        if s.src_level == "global":
            self._load(s)
        elif s.dst_level == "global":
            self._store(s)
        else:
            src = self._tile(s.src, s)
            dst = self.tiles.get(s.dst)
            fmt = dst.tl_dtype if dst is not None else src.tl_dtype
            name = self.name(s.dst, s)
            self.emit(f"{name} = {s.src}{self._convert(src.tl_dtype, fmt)}")
            self.tiles[s.dst] = _Tile(src.dims, fmt, src.rows, src.cols, s.dst_level)

    def _window(self, s: n.Copy, view: _View, base_name: str) -> tuple[list[str], str, list[str]]:
        """Index vectors, the in-bounds mask and the offset expression of a Copy's tile."""
        if s.tile is None or s.coord is None or len(s.tile) != len(view.extents) or len(s.coord) != len(view.extents):
            self.fail(s, "a Copy to or from global memory needs one tile size and one coordinate per view dimension")
        rank = len(s.tile)
        idx_names, masks, offsets = [], [], []
        for d, (size, coord, extent, stride) in enumerate(zip(s.tile, s.coord, view.extents, view.strides)):
            block = self.block_dim(size, s)
            idx = self.fresh(f"{base_name}_{'rows' if d == 0 else 'cols'}" if rank <= 2 else f"{base_name}_idx{d}")
            start = self.dev(n.Binary("*", coord, size))
            if isinstance(coord, n.Num) and coord.value == 0:
                self.emit(f"{idx} = tl.arange(0, {block})")
            else:
                self.emit(f"{idx} = {start} + tl.arange(0, {block})")
            # in-bounds: below the view's extent, and inside the tile where it was padded
            same_extent = tl_expr(size) == tl_expr(extent) and isinstance(coord, n.Num) and coord.value == 0
            conds = []
            if not same_extent and not self._tile_inside(coord, size, extent):
                conds.append(f"({idx} < {self.dev(extent)})")
            if self.pad_needed(size):
                conds.append(f"(tl.arange(0, {block}) < {self.dev(size)})" if not same_extent else f"({idx} < {self.dev(size)})")
            expand = _expand(d, rank)
            masks += [f"{c}{expand}" for c in conds]
            offsets.append(f"{idx}{expand} * {stride}")
            idx_names.append(idx)
        mask = " & ".join(masks)
        return idx_names, mask, offsets

    def _tile_inside(self, coord: n.Expr, size: n.Expr, extent: n.Expr) -> bool:
        """Whether tile ``coord`` of ``size`` rows provably ends within ``extent``: the coordinate
        is a loop variable whose bound is at most ``extent // size`` (the planner writes such
        bounds for the tiles it knows are whole), so the load needs no bounds mask."""
        if not isinstance(coord, n.Name) or coord.id not in self.loop_stops or coord.id not in self.nonneg:
            return False  # unknown coordinate, or a loop that may start below zero
        whole = tl_expr(n.Binary("//", extent, size))

        def within(stop: n.Expr) -> bool:
            if tl_expr(stop) == whole:
                return True
            return isinstance(stop, n.Call) and stop.func == "min" and any(within(a) for a in stop.args)
        return within(self.loop_stops[coord.id])

    def _load(self, s: n.Copy) -> None:
        view = self._view(s.src, s)
        dst = self.tiles.get(s.dst)
        if dst is not None and dst.level != s.dst_level:
            self.fail(s, f"{s.dst} lives in {dst.level}, not {s.dst_level}")
        name = self.name(s.dst, s)
        idx, mask, offsets = self._window(s, view, s.dst)
        ptrs = f"{s.src} + " + " + ".join(offsets)
        fmt = dst.tl_dtype if dst is not None else view.tl_dtype
        load = f"tl.load({ptrs}, mask={mask}, other=0.0)" if mask else f"tl.load({ptrs})"
        if self._tma_loadable(s, view):
            # TMA zero-fills what lies outside the tensor, as the masked load would
            dims = tuple(self.block_dim(t, s) for t in s.tile)
            desc = self._descriptor(view.tensor, dims)
            coords = list(view.offsets) + ["0" if isinstance(c, n.Num) and c.value == 0 else self.dev(n.Binary("*", c, t))
                                           for c, t in zip(s.coord, s.tile)]
            load = f"{desc}.load([{', '.join(coords)}]).reshape({', '.join(dims)})"
        self.emit(f"{name} = {load}{self._convert(view.tl_dtype, fmt)}")
        dims = tuple(self.block_dim(t, s) for t in s.tile)
        self.tiles[s.dst] = _Tile(dims, fmt, idx[0], idx[1] if len(idx) > 1 else None, s.dst_level)

    def _tma_loadable(self, s: n.Copy, view: _View) -> bool:
        """TMA reads whole boxes of the tensor; a padded tile dim must be the view's full extent."""
        if not self.tma or view.tensor not in TMA_TENSORS or len(s.tile) != 2:
            return False
        return all(not self.pad_needed(t) or (tl_expr(t) == tl_expr(e) and isinstance(c, n.Num) and c.value == 0)
                   for t, c, e in zip(s.tile, s.coord, view.extents))

    def _descriptor(self, tensor: str, dims: tuple[str, ...]) -> str:
        key = (tensor, dims)
        if key not in self.descriptors:
            same = sum(t == tensor for t, _ in self.descriptors)
            self.descriptors[key] = f"{tensor}_desc" + (str(same + 1) if same else "")
        return self.descriptors[key]

    def _block_value(self, dim: str) -> int:
        return int(dim) if dim.isdigit() else int(self.constexprs[dim])

    def _store(self, s: n.Copy) -> None:
        view = self._view(s.dst, s)
        src = self._tile(s.src, s)
        _, mask, offsets = self._window(s, view, s.dst)
        ptrs = f"{s.dst} + " + " + ".join(offsets)
        value = f"{s.src}{self._convert(src.tl_dtype, view.tl_dtype)}"
        self.emit(f"tl.store({ptrs}, {value}, mask={mask})" if mask else f"tl.store({ptrs}, {value})")

    def _convert(self, have: str, want: str) -> str:
        if TRITON_DTYPE[have] == TRITON_DTYPE[want]:
            return ""
        return f".to({TRITON_DTYPE[want]})"

    def _tile(self, name: str, node: n.Node) -> _Tile:
        if name not in self.tiles:
            self.fail(node, f"{name!r} is not a tile here", "produce it with a Copy or Compute ... and get, or Allocate it in register")
        return self.tiles[name]

    def _view(self, name: str, node: n.Node) -> _View:
        if name not in self.views:
            self.fail(node, f"{name!r} is not a global view", f"Allocate {name} in global (...) at tensor[...]")
        return self.views[name]

    def s_Gemm(self, s: n.Gemm) -> None:
        self.comment_tl(s)
        a, b = self._tile(s.a, s), self._tile(s.b, s)
        if len(a.dims) != 2 or len(b.dims) != 2:
            self.fail(s, "GEMM operands are 2-d tiles")
        A = f"tl.trans({s.a})" if s.a_trans else s.a
        B = f"tl.trans({s.b})" if s.b_trans else s.b
        fmts = {a.tl_dtype, b.tl_dtype}
        precision = ""
        if fmts <= {"fp32", "tf32"}:
            precision = ', input_precision="tf32"' if fmts == {"tf32"} else ', input_precision="ieee"'
        rows = a.cols if s.a_trans else a.rows
        cols = b.rows if s.b_trans else b.cols
        out_dims = (a.dims[0] if not s.a_trans else a.dims[1], b.dims[1] if not s.b_trans else b.dims[0])
        name = self.name(s.out, s)
        if s.accumulate:
            acc = self._tile(s.out, s)
            self.emit(f"{name} = tl.dot({A}, {B}, {name}{precision})")
            acc.rows = acc.rows or rows
            acc.cols = acc.cols or cols
        else:
            fmt = self.tl_format("acc", s) if "acc" in self.dtypes else "fp32"
            out_dtype = "" if fmt == "fp32" else f", out_dtype={TRITON_DTYPE[fmt]}"
            self.emit(f"{name} = tl.dot({A}, {B}{precision}{out_dtype})")
            self.tiles[s.out] = _Tile(out_dims, fmt, rows, cols)

    def _operand(self, e: n.Expr, rank: int) -> str:
        if isinstance(e, n.Name) and e.id in self.tiles:
            t = self.tiles[e.id]
            return f"{e.id}[:, None]" if len(t.dims) == 1 and rank == 2 else e.id
        return self.dev(e)

    def s_Elementwise(self, s: n.Elementwise) -> None:
        self.comment_tl(s)
        tiles = [self.tiles[a.id] for a in s.args if isinstance(a, n.Name) and a.id in self.tiles]
        if not tiles:
            self.fail(s, f"Compute {s.op} needs at least one tile operand")
        first = max(tiles, key=lambda t: len(t.dims))
        rank = len(first.dims)
        ops = [self._operand(a, rank) for a in s.args]
        target = s.out if s.out is not None else s.args[0].id
        name = self.name(target, s)
        out = _Tile(first.dims, first.tl_dtype, first.rows, first.cols)
        if s.op in ("RowMax", "RowSum"):
            if rank != 2:
                self.fail(s, f"{s.op} needs a 2-d tile")
            value = f"tl.{'max' if s.op == 'RowMax' else 'sum'}({ops[0]}, axis=1)"
            out = _Tile(first.dims[:1], first.tl_dtype, first.rows, None)
        else:
            value = {
                "Multiply": "{0} * {1}", "Add": "{0} + {1}", "Subtract": "{0} - {1}", "Divide": "{0} / {1}",
                "Maximum": "tl.maximum({0}, {1})", "Minimum": "tl.minimum({0}, {1})", "Exp": "tl.exp({0})",
                "Log": "tl.log({0})", "Tanh": "tanh({0})", "Abs": "tl.abs({0})", "Neg": "-{0}",
            }[s.op].format(*ops)
            if s.op == "Tanh":
                self.helpers.add("tanh")
        if out.tl_dtype not in ("fp32", "tf32"):
            value = f"({value}).to({TRITON_DTYPE[out.tl_dtype]})"
        self.emit(f"{name} = {value}")
        self.tiles[target] = out

    def s_Cast(self, s: n.Cast) -> None:
        self.comment_tl(s)
        src = self._tile(s.src, s)
        fmt = self.tl_format(s.dtype, s)
        target = s.out or s.src
        name = self.name(target, s)
        conv = self._convert(src.tl_dtype, fmt)
        if fmt == "tf32":
            self.emit("# (tf32 is how the tensor cores read fp32: the GEMMs reading this tile use input_precision='tf32')")
        self.emit(f"{name} = {s.src}{conv}")
        self.tiles[target] = _Tile(src.dims, fmt, src.rows, src.cols)

    def _index_names(self, t: _Tile, expr: n.Expr) -> dict[str, str]:
        """q_idx and kv_idx as the tile's index vectors; int64 (b and h too) where ``expr``
        multiplies indices, whose int32 products could wrap."""
        wide = exprs.multiplies_indices(expr, self.ctx().floats)
        widen = (lambda x: f"{x}.to(tl.int64)") if wide else (lambda x: x)
        names = {}
        if t.rows is not None:
            names["q_idx"] = widen(f"{t.rows}[:, None]" if len(t.dims) == 2 else t.rows)
        if t.cols is not None:
            names["kv_idx"] = widen(f"{t.cols}[None, :]")
        if wide:
            for g in ("b", "h"):
                if g in self.scope:
                    names[g] = f"tl.cast({self.scope[g]}, tl.int64)"
        return names

    def s_ScoreMod(self, s: n.ScoreMod) -> None:
        self.comment_tl(s)
        t = self._tile(s.target, s)
        extra = self._index_names(t, s.expr)
        extra["score"] = s.target
        value = self.dev(s.expr, extra)
        if "score" not in n.expr_names(s.expr):
            value = f"{value} + tl.zeros_like({s.target})"  # a constant modifier still fills the tile
        if t.tl_dtype not in ("fp32", "tf32"):
            value = f"({value}).to({TRITON_DTYPE[t.tl_dtype]})"
        self.emit(f"{s.target} = {value}")

    def s_Mask(self, s: n.Mask) -> None:
        self.comment_tl(s)
        t = self._tile(s.target, s)
        keep = self.dev(s.keep, self._index_names(t, s.keep))
        self.emit(f'{s.target} = tl.where({keep}, {s.target}, float("-inf"))')

    def s_Softmax(self, s: n.Softmax) -> None:
        self.comment_tl(s)
        t = self._tile(s.target, s)
        if len(t.dims) != 2:
            self.fail(s, "Softmax needs a 2-d tile")
        x = s.target
        mx, total = self.fresh(f"{x}_max"), self.fresh(f"{x}_sum")
        self.emit(f"{mx} = tl.max({x}, axis=1)")
        self.emit(f'{mx} = tl.where({mx} == float("-inf"), 0.0, {mx})  # a fully masked row stays at zero weight')
        self.emit(f"{x} = tl.exp({x} - {mx}[:, None])")
        self.emit(f"{total} = tl.sum({x}, axis=1)")
        self.emit(f"{x} = {x} * tl.where({total} > 0, 1.0 / {total}, 0.0)[:, None]")

    def s_OnlineSoftmax(self, s: n.OnlineSoftmax) -> None:
        self.comment_tl(s)
        S = self._tile(s.scores, s)
        m, l = s.row_max, s.row_sum
        self._tile(m, s)
        self._tile(l, s)
        two_d = len(S.dims) == 2
        m_new, m_safe, alpha = self.fresh(f"{m}_new"), self.fresh(f"{m}_safe"), self.fresh(f"{m}_alpha")
        block_max = f"tl.max({s.scores}, axis=1)" if two_d else s.scores
        self.emit(f"{m_new} = tl.maximum({m}, {block_max})")
        self.emit(f'{m_safe} = tl.where({m_new} == float("-inf"), 0.0, {m_new})  # nothing visible yet: weights stay 0')
        self.emit(f"{alpha} = tl.exp({m} - {m_safe})")
        out = self.name(s.out, s)
        self.emit(f"{out} = tl.exp({s.scores} - {m_safe}{'[:, None]' if two_d else ''})")
        self.emit(f"{l} = {l} * {alpha} + {f'tl.sum({out}, axis=1)' if two_d else out}")
        for acc in s.rescale:
            a = self._tile(acc, s)
            self.emit(f"{acc} = {acc} * {alpha}{'[:, None]' if len(a.dims) == 2 else ''}")
        self.emit(f"{m} = {m_new}")
        self.tiles[s.out] = _Tile(S.dims, S.tl_dtype, S.rows, S.cols)

    def s_Normalize(self, s: n.Normalize) -> None:
        self.comment_tl(s)
        acc = self._tile(s.acc, s)
        self._tile(s.row_sum, s)
        out = self.name(s.out, s)
        inv = self.fresh(f"{s.row_sum}_inv")
        self.emit(f"{inv} = tl.where({s.row_sum} > 0, 1.0 / {s.row_sum}, 0.0)  # a row that saw nothing gives O = 0")
        self.emit(f"{out} = {s.acc} * {inv}{'[:, None]' if len(acc.dims) == 2 else ''}")
        self.tiles[s.out] = _Tile(acc.dims, acc.tl_dtype, acc.rows, acc.cols)

    def s_LogSumExp(self, s: n.LogSumExp) -> None:
        self.comment_tl(s)
        m = self._tile(s.row_max, s)
        self._tile(s.row_sum, s)
        out = self.name(s.out, s)
        self.emit(f'{out} = tl.where({s.row_sum} > 0, {s.row_max} + tl.log({s.row_sum}), float("-inf"))')
        self.tiles[s.out] = _Tile(m.dims, "fp32", m.rows, None)

    def s_Reshape(self, s: n.Reshape) -> None:
        self.comment_tl(s)
        self._tile(s.name, s)
        self.emit("# (register layouts are Triton's: tl.dot converts its operands)")

    def s_Loop(self, s: n.Loop) -> None:
        for line in tl_stmt(s)[:1]:
            self.emit(f"# TL: {line.strip()}")
        var = self.name(s.var, s)
        start, stop = self.dev(s.start), self.dev(s.stop)
        if s.stages is not None:
            ws = ", warp_specialize=True" if self.ws else ""
            self.emit(f"for {var} in tl.range({start}, {stop}, num_stages={self.dev(s.stages)}{ws}):")
        else:
            self.emit(f"for {var} in range({start}, {stop}):")
        saved_scope = dict(self.scope)
        self.scope[s.var] = var
        self.loop_stops[s.var] = s.stop
        if exprs.nonnegative(s.start, self.nonneg):
            self.nonneg.add(s.var)
        self.depth += 1
        before = set(self.tiles)
        generated = set(self.generated)
        self.block(s.body)
        self.depth -= 1
        self.generated = generated  # names made inside the loop die with it: a later loop may reuse them
        self.emit("# TL: end")
        self.scope = saved_scope
        self.nonneg.discard(s.var)
        del self.loop_stops[s.var]
        # tiles first defined inside the loop do not exist after it
        for name in set(self.tiles) - before:
            del self.tiles[name]


def _expand(d: int, rank: int) -> str:
    if rank == 1:
        return ""
    return "[:, None]" if d == 0 else "[None, :]"


def _stmt_exprs(s: n.Stmt) -> list[n.Expr]:
    if isinstance(s, n.Allocate):
        return list(s.shape) + list(s.offset) + ([s.init] if s.init is not None else [])
    if isinstance(s, n.Copy):
        return list(s.tile or ()) + list(s.coord or ())
    if isinstance(s, n.Elementwise):
        return list(s.args)
    if isinstance(s, n.ScoreMod):
        return [s.expr]
    if isinstance(s, n.Mask):
        return [s.keep]
    if isinstance(s, n.Loop):
        return [s.start, s.stop] + ([s.stages] if s.stages is not None else [])
    return []


def _kernel_header_lines(k: n.Kernel) -> list[str]:
    lines = print_kernel(k)
    return lines[: lines.index("")] if "" in lines else lines


# ---------------------------------------------------------------------- launcher
def _launcher(program: n.Program, infos: list[KernelInfo], file: str | None) -> list[str]:
    tensors = [t for t in ARG_SHAPES if any(t in i.tensors for i in infos)]
    scalars = []
    for i in infos:
        scalars += [s for s in i.scalars if s not in scalars]
    sig = ", ".join(t for t in ("q", "k", "v", "o", "lse") if t in tensors)
    kw = "".join(f", {s}" for s in scalars) + (", alibi_slopes" if "alibi_slopes" in tensors else "")
    lines = [
        f"def launch({sig}, *{kw}) -> None:",
        f'{INDENT}"""Run the program on BHSD-indexed tensors (any strides; BSHD is q.transpose(1, 2)).',
        "",
        f"{INDENT}Writes O into ``o`` (B, Hq, Sq, Dv) and the natural-log log-sum-exp into ``lse`` (B, Hq, Sq, fp32).",
        f'{INDENT}"""',
        f"{INDENT}B, Hq, Sq, D = q.shape",
        f"{INDENT}Hkv, Sk = k.shape[1], k.shape[2]",
        f"{INDENT}Dv = v.shape[3]",
        f"{INDENT}check_arguments(dict({', '.join(f'{t}={t}' for t in tensors)}))",
    ]
    for name in ("window_left", "window_right"):
        if name in scalars:
            # a window wider than Sq + Sk keys is unbounded; clamping keeps the kernel's int32 bounds from wrapping
            lines += [f"{INDENT}if {name} < 0:",
                      f"{INDENT * 2}raise ValueError(f\"{name} must be >= 0, got {{{name}}}\")",
                      f"{INDENT}{name} = min(int({name}), Sq + Sk)"]
    for info in infos:
        kernel = next(k for k in program.kernels if k.name == info.name)
        ctx = exprs.ExprContext({**{s: s for s in SIZE_ARGS + ('D', 'Dv')}, **{p: str(v) for p, v in info.params.items()}}, file=file)
        for sc in kernel.scratch:
            if sc.name in info.tensors and f"{sc.name} = " not in "\n".join(lines):
                shape = ", ".join(exprs.host(e, ctx) for e in sc.shape)
                fmt = dict(kernel.dtypes).get(sc.dtype, sc.dtype)
                shape += "," if len(sc.shape) == 1 else ""
                lines.append(f"{INDENT}{sc.name} = torch.empty(({shape}), device=q.device, dtype={TORCH_DTYPE[fmt]})")
        grid = " * ".join(exprs.host(g.extent, ctx) for g in kernel.grid) or "1"
        if info.persistent:
            lines.append(f"{INDENT}points = {grid}")
            grid = "min(points, program_slots(q.device))"
        for name, tensor, block in info.descriptors:
            lines.append(f"{INDENT}{name} = tma_descriptor({tensor}, \"{tensor}\", {list(block)})")
        groups = [
            ", ".join(list(info.tensors) + [d[0] for d in info.descriptors]),
            ", ".join(f"*{t}.stride()" for t in info.tensors),
            ", ".join(SIZE_ARGS + info.scalars),
            ", ".join(f"{c}={v}" for c, v in info.constexprs.items()),
            f"num_warps={info.num_warps}, num_stages={info.num_stages}",
        ]
        lines.append(f"{INDENT}{info.name}[({grid},)](")
        lines += [f"{INDENT * 2}{g}," for g in groups if g]
        lines.append(f"{INDENT})")
    return lines


_TMA_SOURCE = '''
def tma_descriptor(t, name, block):
    """A TMA descriptor over the whole tensor; TMA needs unit inner stride and 16-byte alignment."""
    size = t.element_size()
    if t.stride(-1) != 1 or t.data_ptr() % 16 or any(st * size % 16 for st in t.stride()[:-1]):
        raise ValueError(f"{name} is read through TMA, which needs a unit inner stride, 16-byte aligned strides and data; "
                         f"got strides {tuple(t.stride())} of {size}-byte elements (regenerate with tma = 0 for such tensors)")
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block)
'''

_PERSISTENT_SOURCE = '''
def program_slots(device) -> int:
    """Programs a persistent launch starts: one per SM (a few on the CPU interpreter)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
'''


_CHECK_SOURCE = '''
def check_arguments(tensors: dict) -> None:
    """Reject what this specialisation cannot run, instead of computing something wrong."""
    q, k, v = tensors["q"], tensors["k"], tensors["v"]
    if q.shape[-1] != HEAD_DIM or k.shape[-1] != HEAD_DIM or v.shape[-1] != HEAD_DIM_V:
        raise ValueError(f"this kernel is specialised to head dims D={HEAD_DIM}, Dv={HEAD_DIM_V}; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    for name, t in tensors.items():
        want = TENSOR_DTYPES[name]
        if t.dtype != want:
            raise ValueError(f"{name} must be {want}, got {t.dtype}")
        if t.dim() != len(TENSOR_SHAPES[name]):
            raise ValueError(f"{name} must have dims {TENSOR_SHAPES[name]}, got shape {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device}, q on {q.device}")
        # Offsets inside a head (sequence x head dim) are int32 in the kernel; batch and head offsets are int64.
        span = sum((size - 1) * abs(stride) for size, stride in list(zip(t.shape, t.stride()))[-2:])
        if span >= 2**31:
            raise ValueError(f"{name}: one head spans {span} elements, more than int32 offsets reach; split the sequence")
    # Every size must agree with the one q, k and v fix: a mismatch would read or write out of bounds.
    B, Hq, Sq, _ = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads {Hq} must be a multiple of key/value heads {Hkv}")
    sizes = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Sk": Sk, "D": HEAD_DIM, "Dv": HEAD_DIM_V}
    for name, t in tensors.items():
        want = tuple(sizes[d] for d in TENSOR_SHAPES[name])
        if tuple(t.shape) != want:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; with q {tuple(q.shape)} and k {tuple(k.shape)} it must be {want} ({', '.join(TENSOR_SHAPES[name])})")
'''


def translate(program: n.Program, *, head_dim: int, head_dim_v: int | None = None, file: str | None = None) -> TritonModule:
    """Triton source for a fully parameterised TL ``program`` specialised to the head dims.

    The program should have passed ``tl.check`` for its target; the translator still refuses
    what Triton cannot express (non-power-of-two tiles, grid extents that depend on other axes)
    with a TranslateError at the offending statement."""
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    for name, value in (("head_dim", head_dim), ("head_dim_v", head_dim_v)):
        if not 1 <= value <= 1024:
            raise TranslateError(f"{name} = {value} is outside 1..1024", where=file, hint="head dims are 16..512 in an AttentionSpec")
    scratch_ranks: dict[str, int] = {}
    for k in program.kernels:
        for sc in k.scratch:
            scratch_ranks[sc.name] = len(sc.shape)
    bodies: list[str] = []
    infos: list[KernelInfo] = []
    helpers: set[str] = set()
    for kernel in program.kernels:
        tr = _KernelTranslator(kernel, head_dim, head_dim_v, file, scratch_ranks)
        lines, info = tr.translate()
        bodies += lines + ["", ""]
        infos.append(info)
        helpers |= tr.helpers
    dtypes = {}
    for info in infos:
        for t, fmt in info.tensor_dtypes.items():
            if t in ARG_SHAPES:
                dtypes[t] = fmt
    for fmt in dtypes.values():
        if fmt not in FORMATS or fmt not in TORCH_DTYPE:
            raise TranslateError(f"tensor format {fmt} has no torch dtype", where=file)
    names = ", ".join(i.name for i in infos)
    src = [
        f'"""{names}: generated by attnforge {__version__} from TL (stage 2, Triton). Do not edit: edit the TL.',
        "",
        f"Specialised to head dims D={head_dim}, Dv={head_dim_v} and the tensor formats in TENSOR_DTYPES; batch,",
        "heads, sequence lengths and all strides are runtime values. The TL program is TL_SOURCE below.",
        '"""',
        "",
        "import torch",
        "import triton",
        "import triton.language as tl",
        *(["from triton.tools.tensor_descriptor import TensorDescriptor"] if any(i.descriptors for i in infos) else []),
        "",
        f"HEAD_DIM = {head_dim}",
        f"HEAD_DIM_V = {head_dim_v}",
        "TENSOR_DTYPES = {" + ", ".join(f'"{t}": {TORCH_DTYPE[f]}' for t, f in dtypes.items()) + "}",
        "TENSOR_SHAPES = {" + ", ".join(f'"{t}": {ARG_SHAPES[t]!r}' for t in dtypes) + "}",
        "TL_SOURCE = '''\\",
        print_program(program).replace("\\", "\\\\").replace("'''", "\\'\\'\\'") + "'''",
        "",
    ]
    for h in ("floordiv", "floormod", "tanh"):
        if h in helpers:
            src += ["", exprs.HELPER_SOURCE[h]]
    src += ["", *bodies]
    src += _CHECK_SOURCE.strip("\n").split("\n") + ["", ""]
    if any(i.descriptors for i in infos):
        src += _TMA_SOURCE.strip("\n").split("\n") + ["", ""]
    if any(i.persistent for i in infos):
        src += _PERSISTENT_SOURCE.strip("\n").split("\n") + ["", ""]
    src += _launcher(program, infos, file)
    return TritonModule("\n".join(src) + "\n", infos)
