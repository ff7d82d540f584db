"""One TL kernel -> the body of one ``@triton.jit`` function, statement by statement.

Every TL statement becomes a ``# TL:`` comment above the code it became, and TL names stay the
Python names. What TL makes explicit and Triton decides by itself is dropped with a comment:
shared-memory tiles (Triton stages loads through shared memory as its pipeliner sees fit) and
register layouts (``Reshape``; ``tl.dot`` converts operands). The backend-neutral facts (which
loads are provably inside, which names are non-negative, tile roles, loop scopes) come from
``attnforge.analysis``; this module only writes Triton.
"""

from __future__ import annotations

import keyword
from typing import NoReturn

from ...abi import INT_SCALARS, SIZE_ARGS
from ...analysis import LN2, LOG2E, KernelFacts, Scope, Tile, View, base2_softmax, multiplies_indices, nonnegative
from ...errors import Position, TranslateError
from ...sizes import is_pow2, next_pow2
from ...tl import nodes as n
from ...tl.printer import expr as tl_expr
from ...tl.printer import stmt as tl_stmt
from . import exprs
from .formats import TL_TYPE

INDENT = "    "
TMA_TENSORS = ("q", "k", "v")
_RESERVED = frozenset({"tl", "triton", "torch", "float", "range", "pid"})
_ELEMENTWISE = {
    "Multiply": "{0} * {1}", "Add": "{0} + {1}", "Subtract": "{0} - {1}", "Divide": "{0} / {1}",
    "Maximum": "tl.maximum({0}, {1})", "Minimum": "tl.minimum({0}, {1})", "Exp": "tl.exp({0})",
    "Log": "tl.log({0})", "Tanh": "tanh({0})", "Abs": "tl.abs({0})", "Neg": "-{0}",
}


def stride_names(tensor: str, rank: int) -> list[str]:
    return [f"stride_{tensor}{i}" for i in range(rank)]


class KernelEmitter:
    """Writes one kernel's body; ``descriptors`` and ``helpers`` say what the module must add."""

    def __init__(self, kernel: n.Kernel, facts: KernelFacts, head_dim: int, head_dim_v: int, file: str | None):
        self.k, self.facts, self.file = kernel, facts, file
        self.D, self.Dv = head_dim, head_dim_v
        self.lines: list[str] = []
        self.depth = 1
        self.helpers: set[str] = set()
        self.descriptors: dict[tuple[str, tuple[str, ...]], str] = {}  # (tensor, block dims) -> argument name
        self.tma, self.persistent, self.ws = (facts.strategies[s] for s in ("tma", "persistent", "ws"))
        names = {s: s for s in SIZE_ARGS + ("D", "Dv")}
        for name, value in facts.params.items():
            # launch options and strategies are literals in the kernel; constants are constexpr arguments
            names[name] = name if name in facts.constants else str(value)
        names.update({s: s for s in kernel.scalars})
        # launch-time values (a split count) are runtime integer arguments, as the sizes are, and >= 1
        names.update({v.name: v.name for v in facts.launch})
        self.launch = frozenset(v.name for v in facts.launch)
        self.scope = Scope(names, set(SIZE_ARGS) | {"D", "Dv"} | set(facts.params) | self.launch | {g.name for g in kernel.grid})
        for t in facts.tensors:
            self.scope.generated |= {f"{t}_ptr", *stride_names(t, facts.ranks[t])}
        self.scope.generated |= {"D_PAD", "DV_PAD", "pid", "tile", "num_tiles"} | {f"{t}_desc" for t in TMA_TENSORS}
        self.floats = frozenset({s for s in kernel.scalars if s not in INT_SCALARS} | {"score"})
        # online softmaxes fed straight by `Multiply S, scale` run in base 2 (analysis/softmax.py)
        self.base2 = base2_softmax(kernel, frozenset(kernel.scalars) | frozenset(facts.params) | frozenset(SIZE_ARGS) | {"D", "Dv"})
        for v in facts.launch:
            self.name(v.name, v)  # an argument of the kernel: a Python name that clashes with nothing generated

    # ------------------------------------------------------------------ helpers
    def fail(self, node: n.Node, message: str, hint: str | None = None) -> NoReturn:
        raise TranslateError(f"{self.k.name}: {message}", where=Position(node.line, node.col, self.file), hint=hint)

    def emit(self, line: str = "") -> None:
        self.lines.append(INDENT * self.depth + line if line else "")

    def comment_tl(self, s: n.Stmt) -> None:
        self.emit(f"# TL: {tl_stmt(s)[0].strip()}")

    def name(self, tl_name: str, node: n.Node) -> str:
        """The Python name of a TL name; TL names that clash with Python or generated code are errors."""
        if keyword.iskeyword(tl_name) or tl_name in _RESERVED:
            self.fail(node, f"the name {tl_name!r} is reserved in the generated Python", "rename it in the TL program")
        if tl_name in self.scope.generated:
            self.fail(node, f"the name {tl_name!r} clashes with a name the translator generates", "rename it in the TL program")
        return tl_name

    def dev(self, e: n.Expr, extra: dict[str, str] | None = None) -> str:
        names = {**self.scope.names, **(extra or {})}
        ctx = exprs.ExprContext(names, set(self.scope.nonneg), lambda i: self._index(i, extra), self.helpers, self.file, set(self.floats))
        return exprs.device(e, ctx)

    def _index(self, e: n.Index, extra: dict[str, str] | None = None) -> str:
        """An element read; its indices see the names of the expression around it (h_idx, q_idx)."""
        if e.name not in self.facts.tensors:
            self.fail(e, f"{e.name}[...] reads a tensor this kernel does not take", "tensors: " + ", ".join(self.facts.tensors))
        rank = self.facts.ranks[e.name]
        if len(e.args) != rank:
            self.fail(e, f"{e.name} has {rank} dimensions; {e.name}[...] gives {len(e.args)} index(es)")
        terms = [f"tl.cast({self.dev(a, extra)}, tl.int64) * {s}" for a, s in zip(e.args, stride_names(e.name, rank))]
        return f"tl.load({e.name}_ptr + {' + '.join(terms)})"

    def block_dim(self, e: n.Expr, node: n.Node) -> str:
        """A tile dimension as a Triton block size: a power-of-two parameter or number, or a head dim (padded)."""
        if isinstance(e, n.Name) and e.id == "D":
            return "D_PAD"
        if isinstance(e, n.Name) and e.id == "Dv":
            return "DV_PAD"
        if isinstance(e, n.Name) and e.id in self.facts.params:
            value = self.facts.params[e.id]
            if not is_pow2(value):
                self.fail(node, f"tile dimension {e.id} = {value} is not a power of two", "Triton block shapes are powers of two: choose 16, 32, 64, 128, ...")
            return e.id
        if isinstance(e, n.Num) and isinstance(e.value, int) and is_pow2(e.value):
            return str(e.value)
        if n.expr_names(e) & self.launch:
            self.fail(node, f"tile dimension {tl_expr(e)} reads a launch-time value; Triton block shapes are fixed when the kernel compiles",
                      "use a power-of-two parameter (the checker reports this as TL314)")
        self.fail(node, f"tile dimension {tl_expr(e)} is not a parameter, a number or a head dim", "write tiles as (BM, D), (BN, Dv), (BM) with power-of-two parameters")

    def block_value(self, dim: str) -> int:
        padded = {"D_PAD": next_pow2(self.D), "DV_PAD": next_pow2(self.Dv)}
        return int(dim) if dim.isdigit() else padded.get(dim) or int(self.facts.constants[dim])

    def pad_needed(self, e: n.Expr) -> bool:
        return isinstance(e, n.Name) and ((e.id == "D" and self.D != next_pow2(self.D)) or (e.id == "Dv" and self.Dv != next_pow2(self.Dv)))

    def fmt_of(self, alias: str, node: n.Node) -> str:
        fmt = self.k.dtype_map().get(alias, alias)
        if fmt not in TL_TYPE:
            self.fail(node, f"data type {alias!r} has no Triton equivalent", "formats: " + ", ".join(TL_TYPE))
        return fmt

    def tile(self, name: str, node: n.Node) -> Tile:
        if name not in self.scope.tiles:
            self.fail(node, f"{name!r} is not a tile here", "produce it with a Copy or Compute ... and get, or Allocate it in register")
        return self.scope.tiles[name]

    def view(self, name: str, node: n.Node) -> View:
        if name not in self.scope.views:
            self.fail(node, f"{name!r} is not a global view", f"Allocate {name} in global (...) at tensor[...]")
        return self.scope.views[name]

    @staticmethod
    def convert(have: str, want: str) -> str:
        return "" if TL_TYPE[have] == TL_TYPE[want] else f".to({TL_TYPE[want]})"

    @staticmethod
    def expand(d: int, rank: int) -> str:
        return "" if rank == 1 else ("[:, None]" if d == 0 else "[None, :]")

    # ------------------------------------------------------------------ kernel
    def run(self) -> list[str]:
        self._grid()
        self.block(self.k.body)
        return self.lines

    def _grid(self) -> None:
        """Flatten the TL grid onto Triton's axis 0, the last TL axis fastest (neighbouring
        programs share K/V in L2), counted down: a prefill grid's last axis is its row tiles, and
        under a causal mask the last tiles see the most keys; launched first, they leave the short
        ones to fill the end of the grid."""
        k = self.k
        if not k.grid:
            self.emit("# TL grid: one program")
            return
        self.emit(f"# TL grid: {', '.join(f'{g.name} : {tl_expr(g.extent)}' for g in k.grid)} (flattened, {k.grid[-1].name} fastest)")
        if self.persistent:
            total = " * ".join(f"({self.dev(g.extent)})" for g in k.grid)
            self.emit("# persistent: one program per SM walks the grid's points from the last, stride = programs")
            self.emit(f"num_tiles = {total}")
            self.emit("for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):")
            self.depth += 1
            self.emit("pid = num_tiles - 1 - tile  # heaviest causal row tiles first")
        else:
            self.emit("pid = tl.num_programs(0) - 1 - tl.program_id(0)  # heaviest causal row tiles first")
        grid_names = {g.name for g in k.grid}
        for i, g in enumerate(reversed(k.grid)):
            if n.expr_names(g.extent) & grid_names:
                self.fail(g, f"grid extent of {g.name} depends on another grid axis", "Triton grids are rectangular: give every axis an extent of sizes and parameters")
            name = self.name(g.name, g)
            extent = self.dev(g.extent)
            if i == len(k.grid) - 1:
                self.emit(f"{name} = pid")
            else:
                self.emit(f"{name} = pid % {extent}")
                self.emit(f"pid = pid // {extent}")
            self.scope.names[g.name] = name
        self.emit()

    def block(self, body: tuple[n.Stmt, ...]) -> None:
        for s in body:
            getattr(self, "s_" + type(s).__name__)(s)

    # ------------------------------------------------------------------ memory
    def s_Allocate(self, s: n.Allocate) -> None:
        self.comment_tl(s)
        name = self.name(s.name, s)
        if s.level == "global":
            if s.tensor not in self.facts.ranks:
                self.fail(s, f"{s.tensor!r} is not a tensor argument or scratch")
            rank = self.facts.ranks[s.tensor]
            if len(s.offset) + len(s.shape) != rank:
                self.fail(s, f"{s.tensor} has {rank} dimensions; offset {len(s.offset)} + shape {len(s.shape)} do not add up")
            terms = [f"tl.cast({self.dev(e)}, tl.int64) * {st}" for e, st in zip(s.offset, stride_names(s.tensor, rank))]
            self.emit(f"{name} = {s.tensor}_ptr" + "".join(f" + {t}" for t in terms))
            self.scope.views[s.name] = View(s.tensor, s.shape, s.offset, self.facts.formats[s.tensor], s.pack)
            return
        fmt = self.fmt_of(s.dtype, s)
        dims = [self.block_dim(d, s) for d in s.shape]
        if s.level == "shared":
            self.emit("# (shared memory is Triton's to manage: loads are staged through it by the pipeliner)")
            self.scope.tiles[s.name] = Tile(s.shape, fmt, level="shared")
            return
        init = 0.0 if s.init is None else self.dev(s.init)
        self.emit(f"{name} = tl.full([{', '.join(dims)}], {init}, {TL_TYPE[fmt]})")
        self.scope.tiles[s.name] = Tile(s.shape, fmt)

    def s_Copy(self, s: n.Copy) -> None:
        self.comment_tl(s)
        if s.src_level == "global":
            self._load(s)
        elif s.dst_level == "global":
            self._store(s)
        else:
            src = self.tile(s.src, s)
            dst = self.scope.tiles.get(s.dst)
            fmt = dst.fmt if dst is not None else src.fmt
            name = self.name(s.dst, s)
            self.emit(f"{name} = {s.src}{self.convert(src.fmt, fmt)}")
            self.scope.tiles[s.dst] = Tile(src.dims, fmt, src.rows, src.cols, s.dst_level, src.heads)

    def _window(self, s: n.Copy, view: View, base_name: str) -> tuple[list[str], str, list[str], str | None]:
        """Index vectors, the in-bounds mask and the offset terms of a Copy's tile, and for a packed
        view the vector of each row's packed slice (h_idx); a packed view's row vector holds
        positions (q_idx)."""
        if s.tile is None or s.coord is None or len(s.tile) != len(view.extents) or len(s.coord) != len(view.extents):
            self.fail(s, "a Copy to or from global memory needs one tile size and one coordinate per view dimension")
        rank = len(s.tile)
        strides = stride_names(view.tensor, self.facts.ranks[view.tensor])[len(view.offset):]
        idx_names, masks, offsets, heads = [], [], [], None
        for d, (size, coord, extent, stride) in enumerate(zip(s.tile, s.coord, view.extents, strides)):
            block = self.block_dim(size, s)
            idx = self.scope.fresh(f"{base_name}_{'rows' if d == 0 else 'cols'}" if rank <= 2 else f"{base_name}_idx{d}")
            if isinstance(coord, n.Num) and coord.value == 0:
                self.emit(f"{idx} = tl.arange(0, {block})")
            else:
                self.emit(f"{idx} = {self.dev(n.Binary('*', coord, size))} + tl.arange(0, {block})")
            # in bounds: below the view's extent, and inside the tile where it was padded
            same_extent = size == extent and isinstance(coord, n.Num) and coord.value == 0
            conds = []
            if not same_extent and not self.scope.tile_inside(coord, size, extent):
                conds.append(f"({idx} < {self.dev(extent)})")
            if self.pad_needed(size):
                conds.append(f"(tl.arange(0, {block}) < {self.dev(size)})" if not same_extent else f"({idx} < {self.dev(size)})")
            expand = self.expand(d, rank)
            masks += [f"{c}{expand}" for c in conds]
            if d == 0 and view.pack is not None:
                idx, term, heads = self._packed_rows(s, view, idx, coord, base_name)
                offsets.append(term.format(e=expand))
            else:
                offsets.append(f"{idx}{expand} * {stride}")
            idx_names.append(idx)
        return idx_names, " & ".join(masks), offsets, heads

    def _packed_rows(self, s: n.Copy, view: View, rows: str, coord: n.Expr, base_name: str) -> tuple[str, str, str]:
        """Packed row r of ``view`` is slice ``offset[-1] + r % P`` of the packed dimension at
        position ``r // P``: the position vector (q_idx), the row offset term (``{e}`` marks where
        the row expansion goes; the slice term in int64, as head offsets are) and the vector of
        slices (h_idx)."""
        pack = self.dev(view.pack)
        lead = len(view.offset) - 1
        strides = stride_names(view.tensor, self.facts.ranks[view.tensor])
        pos, slot, heads = (self.scope.fresh(f"{base_name}_{x}") for x in ("pos", "slot", "head"))
        if nonnegative(coord, self.scope.nonneg) and nonnegative(view.pack, self.scope.nonneg):
            self.emit(f"{pos} = {rows} // {pack}  # packed rows: position r // P, slice r % P")
            self.emit(f"{slot} = {rows} % {pack}")
        else:
            self.helpers |= {"floordiv", "floormod"}
            self.emit(f"{pos} = floordiv({rows}, {pack})  # packed rows: position r // P, slice r % P")
            self.emit(f"{slot} = floormod({rows}, {pack})")
        self.emit(f"{heads} = {self.dev(view.offset[-1])} + {slot}")
        term = f"tl.cast({slot}, tl.int64){{e}} * {strides[lead]} + {pos}{{e}} * {strides[lead + 1]}"
        return pos, term, heads

    def _load(self, s: n.Copy) -> None:
        view = self.view(s.src, s)
        dst = self.scope.tiles.get(s.dst)
        if dst is not None and dst.level != s.dst_level:
            self.fail(s, f"{s.dst} lives in {dst.level}, not {s.dst_level}")
        name = self.name(s.dst, s)
        idx, mask, offsets, heads = self._window(s, view, s.dst)
        fmt = dst.fmt if dst is not None else view.fmt
        ptrs = f"{s.src} + " + " + ".join(offsets)
        load = f"tl.load({ptrs}, mask={mask}, other=0.0)" if mask else f"tl.load({ptrs})"
        if self._tma_loadable(s, view):
            # TMA zero-fills what lies outside the tensor, as the masked load would
            dims = tuple(self.block_dim(t, s) for t in s.tile)
            desc = self._descriptor(view.tensor, dims)
            coords = [self.dev(e) for e in view.offset]
            coords += ["0" if isinstance(c, n.Num) and c.value == 0 else self.dev(n.Binary("*", c, t)) for c, t in zip(s.coord, s.tile)]
            load = f"{desc}.load([{', '.join(coords)}]).reshape({', '.join(dims)})"
        self.emit(f"{name} = {load}{self.convert(view.fmt, fmt)}")
        self.scope.tiles[s.dst] = Tile(s.tile, fmt, idx[0], idx[1] if len(idx) > 1 else None, s.dst_level, heads)

    def _tma_loadable(self, s: n.Copy, view: View) -> bool:
        """TMA reads whole boxes of the tensor; a padded tile dim must be the view's full extent."""
        if not self.tma or view.tensor not in TMA_TENSORS or len(s.tile) != 2 or view.pack is not None:
            return False  # a packed view's rows are not one box of the tensor
        return all(not self.pad_needed(t) or (t == e and isinstance(c, n.Num) and c.value == 0)
                   for t, c, e in zip(s.tile, s.coord, view.extents))

    def _descriptor(self, tensor: str, dims: tuple[str, ...]) -> str:
        key = (tensor, dims)
        if key not in self.descriptors:
            same = sum(t == tensor for t, _ in self.descriptors)
            self.descriptors[key] = f"{tensor}_desc" + (str(same + 1) if same else "")
        return self.descriptors[key]

    def _store(self, s: n.Copy) -> None:
        view = self.view(s.dst, s)
        src = self.tile(s.src, s)
        _, mask, offsets, _ = self._window(s, view, s.dst)
        ptrs = f"{s.dst} + " + " + ".join(offsets)
        value = f"{s.src}{self.convert(src.fmt, view.fmt)}"
        self.emit(f"tl.store({ptrs}, {value}, mask={mask})" if mask else f"tl.store({ptrs}, {value})")

    # ------------------------------------------------------------------ compute
    def s_Gemm(self, s: n.Gemm) -> None:
        self.comment_tl(s)
        a, b = self.tile(s.a, s), self.tile(s.b, s)
        if a.rank != 2 or b.rank != 2:
            self.fail(s, "GEMM operands are 2-d tiles")
        A = f"tl.trans({s.a})" if s.a_trans else s.a
        B = f"tl.trans({s.b})" if s.b_trans else s.b
        fmts = {a.fmt, b.fmt}
        precision = ""
        if fmts <= {"fp32", "tf32"}:
            precision = ', input_precision="tf32"' if fmts == {"tf32"} else ', input_precision="ieee"'
        rows = a.cols if s.a_trans else a.rows
        heads = None if s.a_trans else a.heads
        cols = b.rows if s.b_trans else b.cols
        out_dims = (a.dims[1] if s.a_trans else a.dims[0], b.dims[0] if s.b_trans else b.dims[1])
        name = self.name(s.out, s)
        if s.accumulate:
            acc = self.tile(s.out, s)
            self.emit(f"{name} = tl.dot({A}, {B}, {name}{precision})")
            if acc.rows is None:
                acc.rows, acc.heads = rows, heads
            acc.cols = acc.cols or cols
        else:
            fmt = self.fmt_of("acc", s) if "acc" in self.k.dtype_map() else "fp32"
            out_dtype = "" if fmt == "fp32" else f", out_dtype={TL_TYPE[fmt]}"
            self.emit(f"{name} = tl.dot({A}, {B}{precision}{out_dtype})")
            self.scope.tiles[s.out] = Tile(out_dims, fmt, rows, cols, heads=heads)

    def _operand(self, e: n.Expr, rank: int) -> str:
        if isinstance(e, n.Name) and e.id in self.scope.tiles:
            return f"{e.id}[:, None]" if self.scope.tiles[e.id].rank == 1 and rank == 2 else e.id
        return self.dev(e)

    def s_Elementwise(self, s: n.Elementwise) -> None:
        self.comment_tl(s)
        tiles = [self.scope.tiles[a.id] for a in s.args if isinstance(a, n.Name) and a.id in self.scope.tiles]
        if not tiles:
            self.fail(s, f"Compute {s.op} needs at least one tile operand")
        first = max(tiles, key=lambda t: t.rank)
        ops = [self._operand(a, first.rank) for a in s.args]
        target = s.out if s.out is not None else s.args[0].id
        name = self.name(target, s)
        out = Tile(first.dims, first.fmt, first.rows, first.cols, heads=first.heads)
        if s.op in ("RowMax", "RowSum"):
            if first.rank != 2:
                self.fail(s, f"{s.op} needs a 2-d tile")
            value = f"tl.{'max' if s.op == 'RowMax' else 'sum'}({ops[0]}, axis=1)"
            out = Tile(first.dims[:1], first.fmt, first.rows, None, heads=first.heads)
        elif id(s) in self.base2.multiplies:
            value = f"{ops[0]} * ({ops[1]} * {LOG2E})"
            self.emit("# log2(e) folded into the scale: the online softmax below runs in base 2 (exp2)")
        else:
            value = _ELEMENTWISE[s.op].format(*ops)
            if s.op == "Tanh":
                self.helpers.add("tanh")
        if out.fmt not in ("fp32", "tf32"):
            value = f"({value}).to({TL_TYPE[out.fmt]})"
        self.emit(f"{name} = {value}")
        self.scope.tiles[target] = out

    def s_Cast(self, s: n.Cast) -> None:
        self.comment_tl(s)
        src = self.tile(s.src, s)
        fmt = self.fmt_of(s.dtype, s)
        target = s.out or s.src
        name = self.name(target, s)
        if fmt == "tf32":
            self.emit("# (tf32 is how the tensor cores read fp32: the GEMMs reading this tile use input_precision='tf32')")
        self.emit(f"{name} = {s.src}{self.convert(src.fmt, fmt)}")
        self.scope.tiles[target] = Tile(src.dims, fmt, src.rows, src.cols, heads=src.heads)

    def _index_names(self, t: Tile, expr: n.Expr) -> dict[str, str]:
        """q_idx and kv_idx as the tile's index vectors; int64 (b and h too) where ``expr``
        multiplies indices, whose int32 products could wrap."""
        wide = multiplies_indices(expr, self.floats)
        widen = (lambda x: f"{x}.to(tl.int64)") if wide else (lambda x: x)
        names = {}
        if t.rows is not None:
            names["q_idx"] = widen(f"{t.rows}[:, None]" if t.rank == 2 else t.rows)
        if t.cols is not None:
            names["kv_idx"] = widen(f"{t.cols}[None, :]")
        if t.heads is not None:
            names["h_idx"] = widen(f"{t.heads}[:, None]" if t.rank == 2 else t.heads)
        if wide:
            for g in ("b", "h"):
                if g in self.scope.names:
                    names[g] = f"tl.cast({self.scope.names[g]}, tl.int64)"
        return names

    def s_ScoreMod(self, s: n.ScoreMod) -> None:
        self.comment_tl(s)
        t = self.tile(s.target, s)
        extra = self._index_names(t, s.expr)
        extra["score"] = s.target
        value = self.dev(s.expr, extra)
        if "score" not in n.expr_names(s.expr):
            value = f"{value} + tl.zeros_like({s.target})"  # a constant modifier still fills the tile
        if t.fmt not in ("fp32", "tf32"):
            value = f"({value}).to({TL_TYPE[t.fmt]})"
        self.emit(f"{s.target} = {value}")

    def s_Mask(self, s: n.Mask) -> None:
        self.comment_tl(s)
        t = self.tile(s.target, s)
        keep = self.dev(s.keep, self._index_names(t, s.keep))
        self.emit(f'{s.target} = tl.where({keep}, {s.target}, float("-inf"))')

    def s_Softmax(self, s: n.Softmax) -> None:
        self.comment_tl(s)
        if self.tile(s.target, s).rank != 2:
            self.fail(s, "Softmax needs a 2-d tile")
        x = s.target
        mx, total = self.scope.fresh(f"{x}_max"), self.scope.fresh(f"{x}_sum")
        self.emit(f"{mx} = tl.max({x}, axis=1)")
        self.emit(f'{mx} = tl.where({mx} == float("-inf"), 0.0, {mx})  # a fully masked row stays at zero weight')
        self.emit(f"{x} = tl.exp({x} - {mx}[:, None])")
        self.emit(f"{total} = tl.sum({x}, axis=1)")
        self.emit(f"{x} = {x} * tl.where({total} > 0, 1.0 / {total}, 0.0)[:, None]")

    def s_OnlineSoftmax(self, s: n.OnlineSoftmax) -> None:
        self.comment_tl(s)
        S = self.tile(s.scores, s)
        m, l = s.row_max, s.row_sum
        self.tile(m, s)
        self.tile(l, s)
        two_d = S.rank == 2
        m_new, m_safe, alpha = self.scope.fresh(f"{m}_new"), self.scope.fresh(f"{m}_safe"), self.scope.fresh(f"{m}_alpha")
        self.emit(f"{m_new} = tl.maximum({m}, {f'tl.max({s.scores}, axis=1)' if two_d else s.scores})")
        self.emit(f'{m_safe} = tl.where({m_new} == float("-inf"), 0.0, {m_new})  # nothing visible yet: weights stay 0')
        exp = "tl.math.exp2" if id(s) in self.base2.softmaxes else "tl.exp"  # base 2: scores and max carry log2(e)
        self.emit(f"{alpha} = {exp}({m} - {m_safe})")
        out = self.name(s.out, s)
        self.emit(f"{out} = {exp}({s.scores} - {m_safe}{'[:, None]' if two_d else ''})")
        self.emit(f"{l} = {l} * {alpha} + {f'tl.sum({out}, axis=1)' if two_d else out}")
        for acc in s.rescale:
            self.emit(f"{acc} = {acc} * {alpha}{'[:, None]' if self.tile(acc, s).rank == 2 else ''}")
        self.emit(f"{m} = {m_new}")
        self.scope.tiles[s.out] = Tile(S.dims, S.fmt, S.rows, S.cols, heads=S.heads)

    def s_Normalize(self, s: n.Normalize) -> None:
        self.comment_tl(s)
        acc = self.tile(s.acc, s)
        self.tile(s.row_sum, s)
        out = self.name(s.out, s)
        inv = self.scope.fresh(f"{s.row_sum}_inv")
        self.emit(f"{inv} = tl.where({s.row_sum} > 0, 1.0 / {s.row_sum}, 0.0)  # a row that saw nothing gives O = 0")
        self.emit(f"{out} = {s.acc} * {inv}{'[:, None]' if acc.rank == 2 else ''}")
        self.scope.tiles[s.out] = Tile(acc.dims, acc.fmt, acc.rows, acc.cols, heads=acc.heads)

    def s_LogSumExp(self, s: n.LogSumExp) -> None:
        self.comment_tl(s)
        m = self.tile(s.row_max, s)
        self.tile(s.row_sum, s)
        out = self.name(s.out, s)
        m_nat = f"{s.row_max} * {LN2}" if s.row_max in self.base2.states else s.row_max  # a base-2 running max back to nats
        self.emit(f'{out} = tl.where({s.row_sum} > 0, {m_nat} + tl.log({s.row_sum}), float("-inf"))')
        self.scope.tiles[s.out] = Tile(m.dims, "fp32", m.rows, None, heads=m.heads)

    def s_Reshape(self, s: n.Reshape) -> None:
        self.comment_tl(s)
        self.tile(s.name, s)
        self.emit("# (register layouts are Triton's: tl.dot converts its operands)")

    # ------------------------------------------------------------------ control
    def s_Loop(self, s: n.Loop) -> None:
        self.emit(f"# TL: {tl_stmt(s)[0].strip()}")
        var = self.name(s.var, s)
        start, stop = self.dev(s.start), self.dev(s.stop)
        if s.stages is not None:
            if n.expr_names(s.stages) & self.launch:
                self.fail(s.stages, "the pipeline depth reads a launch-time value; Triton needs it when it compiles the kernel",
                          "use a parameter or a number (the checker reports this as TL314)")
            ws = ", warp_specialize=True" if self.ws else ""
            self.emit(f"for {var} in tl.range({start}, {stop}, num_stages={self.dev(s.stages)}{ws}):")
        else:
            self.emit(f"for {var} in range({start}, {stop}):")
        with self.scope.loop(s.var, s.start, s.stop, var):
            self.depth += 1
            self.block(s.body)
            self.depth -= 1
        self.emit("# TL: end")
