"""Reference interpreter: executes TL-Code tile by tile in numpy, one program instance at a time.

It follows the program literally (grid, loop bounds, tile coordinates, masks, online softmax,
normalisation), so a wrong bound or a missing rescale gives a measurably wrong answer. Values are
float64; with ``exact=False`` every Cast, every load into a lower-precision tile and every store
rounds to the format the program names, so the result shows the program's real precision.

Each tile remembers the global row and column index of its elements (``rows``/``cols``), taken
from the coordinates of the Copy that loaded it and carried through GEMMs; masks and score
modifiers read them as ``q_idx`` (rows) and ``kv_idx`` (columns).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import math
from typing import Callable, Iterator, Mapping, NoReturn

import numpy as np

from ..dtypes import FORMATS, round_to
from ..errors import Position, TLRuntimeError, shorten
from . import nodes as n
from ..abi import ARG_DTYPE, arg_format
from .evaluate import evaluate
from .limits import MAX_ELEMENTS, MAX_STEPS
from .printer import expr as show
from .roles import Blocked, RoleSteps
from .tiles import Tile
from ..splits import INTERPRETER_SM_COUNT, split_count

SIZE_NAMES = ("B", "Hq", "Hkv", "Sq", "Sk", "D", "Dv")


@dataclass
class RunResult:
    """The global tensors after the run (outputs written in place) and counters for tests."""

    tensors: dict[str, np.ndarray]
    programs: int = 0
    loop_trips: int = 0
    steps: int = 0  # the work done, as the budget counts it (see _Kernel.charge)
    max_steps: int = MAX_STEPS


# A statement on a tile of more elements counts one step per this many (numpy's cost per call is
# about flat up to a few thousand elements, then grows with them).
ELEMENTS_PER_STEP = 4096
_BUDGET_HINT = (f"a step is a program instance, a loop trip or a statement (one more per {ELEMENTS_PER_STEP} elements of its tile); "
                "bound the grid and the loops by the problem's tiles ('attnforge tl check' reports loops that run past them, TL312), "
                "or run smaller shapes")


class _Kernel(RoleSteps):
    """Executes one kernel of a program over its whole grid (its roles, if any: ``roles``)."""

    def __init__(self, kernel: n.Kernel, env: dict, tensors: dict[str, np.ndarray], tensor_dtypes: dict[str, str], exact: bool, file: str | None, result: RunResult, progress=None):
        self.k = kernel
        self.tensor_dtypes = tensor_dtypes
        self.env = env
        self.tensors = tensors
        self.exact = exact
        self.file = file
        self.result = result
        self.dtypes = kernel.dtype_map()
        self.progress = progress
        self.prepare_roles()

    # -- helpers
    def fail(self, node: n.Node, message: str, hint: str | None = None) -> NoReturn:
        raise TLRuntimeError(f"{self.k.name}: {message}", where=Position(node.line, node.col, self.file), hint=hint)

    def dtype(self, name: str, node: n.Node) -> str:
        resolved = self.dtypes.get(name, name)
        if resolved not in FORMATS:
            self.fail(node, f"unknown data type {name!r}", "declare it in the header: dtype qkv = bf16, acc = fp32, out = bf16")
        return resolved

    def round(self, data: np.ndarray, dtype: str) -> np.ndarray:
        return data if self.exact else round_to(data, dtype)

    def ev(self, e: n.Expr, env: dict):
        return evaluate(e, env, self.tensors, self.file)

    def ev_int(self, e: n.Expr, env: dict, what: str) -> int:
        v = self.ev(e, env)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            self.fail(e, f"{what} must be an integer, got {v!r}", "use // or cdiv() for integer division, and integer sizes")
        return int(v)

    def shape(self, dims: tuple[n.Expr, ...], env: dict) -> tuple[int, ...]:
        values = tuple(self.ev_int(d, env, "a dimension") for d in dims)
        for d, v in zip(dims, values):
            if v < 1:
                self.fail(d, f"dimension {v} is not positive", "every dimension of a tile or buffer is at least 1")
        if math.prod(values) > MAX_ELEMENTS:
            self.too_large(dims[0], f"a tile or buffer of shape {values}", math.prod(values))
        return values

    def too_large(self, node: n.Node, what: str, elements: int) -> NoReturn:
        self.fail(node, f"{what} has {elements:,} elements; the interpreter takes at most {MAX_ELEMENTS:,} (2**26) per array",
                  "use smaller tiles or shapes: the interpreter runs in float64 on the CPU")

    # -- the work budget
    def charge(self, node: n.Node, steps: int) -> None:
        """Count ``steps`` of work; past the run's budget, stop at ``node``."""
        self.result.steps += steps
        if self.result.steps > self.result.max_steps:
            r = self.result
            self.fail(node, f"the run exceeds the interpreter's work budget of {r.max_steps:,} steps here "
                            f"({r.programs:,} program instances and {r.loop_trips:,} loop trips so far)", _BUDGET_HINT)

    def steps_left(self) -> int:
        return self.result.max_steps - self.result.steps

    @staticmethod
    def written_size(s: n.Stmt, local: dict[str, Tile]) -> int:
        """Elements of the tile a statement wrote (what its work grows with); 0 for views and loops."""
        if isinstance(s, n.Copy):
            name = s.src if s.dst_level == "global" else s.dst
        elif isinstance(s, n.Allocate):
            name = None if s.level == "global" else s.name
        elif isinstance(s, n.Elementwise):
            name = s.out if s.out is not None else getattr(s.args[0], "id", None)
        elif isinstance(s, n.Cast):
            name = s.out or s.src
        else:
            name = getattr(s, "out", None) or getattr(s, "target", None)  # Reshape and Loop: neither
        tile = local.get(name) if name is not None else None
        return int(tile.data.size) if tile is not None else 0

    def tile_of(self, name: str, node: n.Node, local: dict[str, Tile]) -> Tile:
        if name not in local:
            self.fail(node, f"{name!r} is not defined", "Allocate it, or produce it with a Copy or a Compute ... and get")
        return local[name]

    def launch_values(self, fixed: Mapping[str, int], sm_count: int) -> dict[str, int]:
        """The kernel's launch-time values for these sizes: a value in ``fixed`` as it is, any other
        by the host's rule. The rule reads sizes, parameters and scalars, never another launch value."""
        values = {}
        for v in self.k.launch:
            if v.name in fixed:
                values[v.name] = fixed[v.name]
            else:
                programs = self.ev_int(v.programs, self.env, f"the program count of launch {v.name}")
                tiles = self.ev_int(v.tiles, self.env, f"the K/V tile count of launch {v.name}")
                values[v.name] = split_count(programs, tiles, sm_count, v.per_sm)
        return values

    # -- grid
    def run(self) -> None:
        total = self._grid_size()
        where: n.Node = self.k.grid[0] if self.k.grid else self.k
        if total is not None and self.k.grid:  # point at the widest axis
            where = max(self.k.grid, key=lambda a: self.ev_int(a.extent, self.env, "a grid extent"))
        grid = shorten(", ".join(f"{a.name} : {show(a.extent)}" for a in self.k.grid), 120)
        if total is not None and total > self.steps_left():
            self.fail(where, f"the grid {grid} has {total:,} program instances; the interpreter's work budget of "
                             f"{self.result.max_steps:,} steps has {self.steps_left():,} left", _BUDGET_HINT)
        cheapest = None
        for i, (point, after) in enumerate(self._grid(dict(self.env))):
            before = self.result.steps
            self.result.programs += 1
            self.charge(where, 1)
            self.run_instance(point)
            cost = self.result.steps - before
            cheapest = cost if cheapest is None else min(cheapest, cost)
            left = total - i - 1 if total is not None else after
            if cheapest * left > self.steps_left():
                # Stop now rather than at the budget: even the cheapest instance so far, repeated for
                # each of the (at least) `left` still to run, does not fit.
                self.fail(where, f"the grid {grid} has {i + 1 + left:,}{'' if total is not None else ' or more'} program instances of about "
                                 f"{cheapest:,} steps or more each (the cheapest of the first {i + 1:,}): more than the interpreter's work budget "
                                 f"of {self.result.max_steps:,} steps", _BUDGET_HINT)
            if self.progress is not None:
                self.progress(self.k.name, i + 1, total)

    def _grid_size(self) -> int | None:
        """Number of program instances, when no extent depends on another axis."""
        try:
            return math.prod(self.ev_int(a.extent, self.env, "a grid extent") for a in self.k.grid)
        except TLRuntimeError:
            return None

    def _grid(self, env: dict):
        """Every grid point in row-major order, with the number of points still to come on the
        innermost axis; an extent may read the axes before it. Iterative (an odometer), so a grid
        of many axes needs no deep recursion."""
        axes = self.k.grid
        if not axes:
            yield env, 0
            return
        envs = [env]  # envs[d]: the point's names before axis d
        ranges = [range(self.ev_int(axes[0].extent, env, f"grid extent of {axes[0].name}"))]
        index = [0]
        while ranges:
            depth = len(ranges) - 1
            if index[depth] >= len(ranges[depth]):
                ranges.pop()
                index.pop()
                envs.pop()
                continue
            i = ranges[depth][index[depth]]
            index[depth] += 1
            point = {**envs[depth], axes[depth].name: i}
            if depth + 1 == len(axes):
                yield point, len(ranges[depth]) - index[depth]
            else:
                spec = axes[depth + 1]
                envs.append(point)
                ranges.append(range(self.ev_int(spec.extent, point, f"grid extent of {spec.name}")))
                index.append(0)

    def block(self, body: tuple[n.Stmt, ...], env: dict, local: dict[str, Tile]) -> Iterator[Blocked | None]:
        """Execute ``body``; a generator so that roles can interleave (``roles.RoleSteps``): it
        yields a ``Blocked`` where a ``Wait`` would block and None after a signal (an arrival)."""
        for stmt in body:
            if isinstance(stmt, n.Loop):  # a loop's trips and statements count themselves
                yield from self.s_Loop(stmt, env, local)
                continue
            if isinstance(stmt, (n.Wait, n.Arrive, n.WaitGemm)):
                yield from self.sync(stmt, env)  # may block, or signal
                self.charge(stmt, 1)
                continue
            staged = self.stage(stmt, env, local)  # ring stages named, pending GEMM results guarded
            try:
                with np.errstate(all="ignore"):  # inf and nan are values here; the comparison judges them
                    getattr(self, "s_" + type(staged).__name__)(staged, env, local)
            except (ValueError, IndexError, TypeError, OverflowError, MemoryError) as err:
                # Shapes the checker would have rejected (tl check) surface here as numpy errors.
                self.fail(stmt, f"cannot execute this statement: {type(err).__name__}: {err}"[:400], "run 'attnforge tl check' on the program")
            self.charge(stmt, 1 + self.written_size(staged, local) // ELEMENTS_PER_STEP)
            if self.finish(stmt, staged, env):
                yield None  # an async copy landed and arrived: a role declared earlier may now run

    # -- statements
    def s_Allocate(self, s: n.Allocate, env: dict, local: dict[str, Tile]) -> None:
        if s.level == n.BARRIER:
            self.allocate_barrier(s, env)
            return
        shape = self.shape(s.shape, env)
        if s.level == "global":
            if s.tensor not in self.tensors:
                self.fail(s, f"tensor {s.tensor!r} is not an argument of this kernel", "tensors: " + ", ".join(sorted(self.tensors)))
            base = self.tensors[s.tensor]
            offset = tuple(self.ev_int(e, env, "an offset") for e in s.offset)
            if len(offset) + len(shape) != base.ndim:
                self.fail(s, f"{s.tensor} has {base.ndim} dimensions; offset {len(offset)} + shape {len(shape)} do not add up")
            if any(not 0 <= i < d for i, d in zip(offset, base.shape)):
                self.fail(s, f"offset {offset} is outside {s.tensor} of shape {base.shape}")
            if s.pack is not None:
                self.packed_view(s, env, base, offset, shape, local)
                return
            view = base[offset]
            if view.shape != shape:
                self.fail(s, f"{s.name}: {s.tensor}{list(offset)} has shape {view.shape}, not {shape}")
            local[s.name] = Tile(view, "global", self.tensor_dtypes.get(s.tensor, "fp32"), extent=shape)
            return
        dtype = self.dtype(s.dtype, s)
        if s.ring is not None or s.name in self.async_filled:  # filled by TMA: NaN until a copy lands
            self.allocate_async(s, shape, dtype, env, local)
            return
        init = 0.0 if s.init is None else float(self.ev(s.init, env))
        local[s.name] = Tile(np.full(shape, init, dtype=np.float64), s.level, dtype)

    def packed_view(self, s: n.Allocate, env: dict, base: np.ndarray, offset: tuple[int, ...], shape: tuple[int, ...], local: dict[str, Tile]) -> None:
        """``pack P``: slices o .. o + P - 1 of the last offset's dimension, interleaved into the first
        view dimension: row r is slice o + r % P at position r // P. ``data`` keeps them as the
        (P, T, ...) numpy view of the tensor, so stores write through."""
        p = self.ev_int(s.pack, env, "a pack factor")
        if p < 1:
            self.fail(s.pack, f"pack factor {p} is not positive", "pack at least one slice")
        if not shape:
            self.fail(s, f"{s.name} has no dimension to pack {s.tensor}'s slices into")
        lead, axis = offset[-1], len(offset) - 1
        if lead + p > base.shape[axis]:
            self.fail(s, f"packed slices {lead}..{lead + p - 1} leave dimension {axis} of {s.tensor} (size {base.shape[axis]})")
        view = base[offset[:-1]][lead:lead + p]
        want = (p * view.shape[1],) + view.shape[2:]
        if want != shape:
            self.fail(s, f"{s.name}: {s.tensor}{list(offset)} packed {p} times has shape {want}, not {shape}")
        local[s.name] = Tile(view, "global", self.tensor_dtypes.get(s.tensor, "fp32"), extent=shape, pack=p, pack_base=lead)

    @staticmethod
    def _select(view: Tile, index: list[np.ndarray]) -> tuple:
        """The numpy index of the view's elements at ``index`` (one integer vector per view
        dimension, outer product); a packed view's rows r are (slice r % P, position r // P)."""
        grid = np.ix_(*index)
        if view.pack is None:
            return grid
        return (grid[0] % view.pack, grid[0] // view.pack) + grid[1:]

    def s_Copy(self, s: n.Copy, env: dict, local: dict[str, Tile]) -> None:
        src = self.tile_of(s.src, s, local)
        if src.level != s.src_level:
            self.fail(s, f"{s.src} lives in {src.level}, not {s.src_level}")
        dst = local.get(s.dst)
        if dst is not None and dst.level != s.dst_level:
            self.fail(s, f"{s.dst} lives in {dst.level}, not {s.dst_level}")
        if dst is None and s.dst_level != "register":
            self.fail(s, f"{s.dst} is not allocated in {s.dst_level}", f"add Allocate {s.dst} in {s.dst_level} (...)")
        if s.src_level == "global":
            self.load(s, src, dst, env, local)
        elif s.dst_level == "global":
            self.store(s, src, dst, env)
        else:
            data = src.data
            dtype = dst.dtype if dst is not None else src.dtype
            if dst is not None and dst.data.shape != data.shape:
                self.fail(s, f"{s.src} has shape {data.shape} but {s.dst} has {dst.data.shape}")
            local[s.dst] = Tile(self.round(data.copy(), dtype), s.dst_level, dtype, src.rows, src.cols, None, heads=src.heads)

    def _tile_window(self, s: n.Copy, env: dict, extent: tuple[int, ...]):
        if s.tile is None or s.coord is None:
            self.fail(s, "a Copy to or from global memory needs a tile shape and a coordinate", "write Copy X (BM, D) at [m, 0] from global to ...")
        tile = self.shape(s.tile, env)
        coord = tuple(self.ev_int(c, env, "a coordinate") for c in s.coord)
        if len(tile) != len(extent) or len(coord) != len(extent):
            self.fail(s, f"tile {tile} and coordinate {coord} must have one entry per dimension of the {len(extent)}-d global tensor")
        index = [c * t + np.arange(t) for c, t in zip(coord, tile)]
        inside = [(i >= 0) & (i < e) for i, e in zip(index, extent)]
        return tile, index, inside

    def load(self, s: n.Copy, src: Tile, dst: Tile | None, env: dict, local: dict[str, Tile]) -> None:
        tile, index, inside = self._tile_window(s, env, src.extent)
        data = np.zeros(tile, dtype=np.float64)  # out-of-bounds elements read as zero
        sel_dst = np.ix_(*[np.nonzero(m)[0] for m in inside])
        sel_src = self._select(src, [i[m] for i, m in zip(index, inside)])
        data[sel_dst] = src.data[sel_src]
        if dst is not None and dst.data.shape != data.shape:
            self.fail(s, f"tile {tile} does not fit {s.dst} of shape {dst.data.shape}")
        dtype = dst.dtype if dst is not None else src.dtype
        rows, heads = index[0], None
        if src.pack is not None:  # packed rows: position r // P (q_idx), slice pack_base + r % P (h_idx)
            rows, heads = index[0] // src.pack, src.pack_base + index[0] % src.pack
        cols = index[1] if len(index) > 1 else None
        local[s.dst] = Tile(self.round(data, dtype), s.dst_level, dtype, rows, cols, None, heads=heads)

    def store(self, s: n.Copy, src: Tile, dst: Tile, env: dict) -> None:
        tile, index, inside = self._tile_window(s, env, dst.extent)
        if src.data.shape != tile:
            self.fail(s, f"{s.src} has shape {src.data.shape}, not the tile {tile}")
        sel_src = np.ix_(*[np.nonzero(m)[0] for m in inside])
        sel_dst = self._select(dst, [i[m] for i, m in zip(index, inside)])
        dst.data[sel_dst] = self.round(src.data, dst.dtype)[sel_src]

    def s_Gemm(self, s: n.Gemm, env: dict, local: dict[str, Tile]) -> None:
        a = self.tile_of(s.a, s, local)
        b = self.tile_of(s.b, s, local)
        A = a.data.T if s.a_trans else a.data
        Bm = b.data.T if s.b_trans else b.data
        if A.ndim != 2 or Bm.ndim != 2 or A.shape[1] != Bm.shape[0]:
            self.fail(s, f"GEMM of {s.a}{'^T' if s.a_trans else ''} {A.shape} and {s.b}{'^T' if s.b_trans else ''} {Bm.shape}: inner dimensions differ")
        if A.shape[0] * Bm.shape[1] > MAX_ELEMENTS:
            self.too_large(s, f"the GEMM product {s.out} ({A.shape[0]}, {Bm.shape[1]})", A.shape[0] * Bm.shape[1])
        product = A @ Bm
        rows = a.cols if s.a_trans else a.rows
        heads = None if s.a_trans else a.heads
        cols = b.rows if s.b_trans else b.cols
        if s.accumulate:
            acc = self.tile_of(s.out, s, local)
            if acc.data.shape != product.shape:
                self.fail(s, f"cannot accumulate {product.shape} into {s.out} of shape {acc.data.shape}")
            acc.data = self.round(acc.data + product, acc.dtype)
            if acc.rows is None:
                acc.rows, acc.heads = rows, heads
            acc.cols = acc.cols if acc.cols is not None else cols
        else:
            dtype = self.dtypes.get("acc", "fp32")
            local[s.out] = Tile(self.round(product, dtype), "register", dtype, rows, cols, "mma_c", heads=heads)

    def _operand(self, e: n.Expr, env: dict, local: dict[str, Tile], like: np.ndarray | None):
        """A Compute argument: a tile's data (a row vector widened against 2-d tiles) or a scalar."""
        if isinstance(e, n.Name) and e.id in local:
            data = local[e.id].data
            if like is not None and data.ndim == 1 and like.ndim == 2:
                if data.shape[0] != like.shape[0]:
                    self.fail(e, f"{e.id} has {data.shape[0]} rows, the tile has {like.shape[0]}")
                return data[:, None]
            return data
        return self.ev(e, env)

    def s_Elementwise(self, s: n.Elementwise, env: dict, local: dict[str, Tile]) -> None:
        tiles = [local[a.id] for a in s.args if isinstance(a, n.Name) and a.id in local]
        if not tiles:
            self.fail(s, f"Compute {s.op} needs at least one tile operand")
        first = max(tiles, key=lambda t: t.data.ndim)
        values = [self._operand(a, env, local, first.data) for a in s.args]
        op = s.op
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if op in ("RowMax", "RowSum"):
                x = np.asarray(values[0])
                if x.ndim != 2:
                    self.fail(s, f"{op} needs a 2-d tile, got shape {x.shape}")
                data = x.max(axis=1) if op == "RowMax" else x.sum(axis=1)
                out = Tile(data, "register", first.dtype, first.rows, None, None, heads=first.heads)
            else:
                fn = {
                    "Multiply": np.multiply, "Add": np.add, "Subtract": np.subtract, "Divide": np.divide,
                    "Maximum": np.maximum, "Minimum": np.minimum, "Exp": np.exp, "Log": np.log,
                    "Tanh": np.tanh, "Abs": np.abs, "Neg": np.negative,
                }[op]
                data = np.broadcast_to(fn(*values), first.data.shape).astype(np.float64)
                out = replace(first, data=data)
        target = s.out if s.out is not None else s.args[0].id
        out.data = self.round(out.data, out.dtype)
        local[target] = out

    def s_Cast(self, s: n.Cast, env: dict, local: dict[str, Tile]) -> None:
        src = self.tile_of(s.src, s, local)
        dtype = self.dtype(s.dtype, s)
        local[s.out or s.src] = replace(src, data=self.round(src.data, dtype), dtype=dtype)

    def _index_env(self, tile: Tile, env: dict) -> dict:
        scoped = dict(env)
        if tile.rows is not None:
            scoped["q_idx"] = tile.rows[:, None] if tile.data.ndim == 2 else tile.rows
        if tile.heads is not None:
            scoped["h_idx"] = tile.heads[:, None] if tile.data.ndim == 2 else tile.heads
        if tile.cols is not None:
            scoped["kv_idx"] = tile.cols[None, :]
        return scoped

    def s_ScoreMod(self, s: n.ScoreMod, env: dict, local: dict[str, Tile]) -> None:
        t = self.tile_of(s.target, s, local)
        scoped = self._index_env(t, env)
        scoped["score"] = t.data
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            t.data = self.round(np.broadcast_to(np.asarray(self.ev(s.expr, scoped), dtype=np.float64), t.data.shape).copy(), t.dtype)

    def s_Mask(self, s: n.Mask, env: dict, local: dict[str, Tile]) -> None:
        t = self.tile_of(s.target, s, local)
        keep = np.broadcast_to(np.asarray(self.ev(s.keep, self._index_env(t, env)), dtype=bool), t.data.shape)
        t.data = np.where(keep, t.data, -np.inf)

    def s_Softmax(self, s: n.Softmax, env: dict, local: dict[str, Tile]) -> None:
        t = self.tile_of(s.target, s, local)
        x = t.data if t.data.ndim == 2 else t.data[:, None]
        m = x.max(axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(x - m)
        total = p.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(total > 0, p / np.where(total > 0, total, 1.0), 0.0)
        t.data = self.round(p.reshape(t.data.shape), t.dtype)

    def s_OnlineSoftmax(self, s: n.OnlineSoftmax, env: dict, local: dict[str, Tile]) -> None:
        S = self.tile_of(s.scores, s, local)
        m = self.tile_of(s.row_max, s, local)
        l = self.tile_of(s.row_sum, s, local)
        x = S.data if S.data.ndim == 2 else S.data[:, None]
        if m.data.shape != (x.shape[0],) or l.data.shape != (x.shape[0],):
            self.fail(s, f"state {s.row_max}/{s.row_sum} must have shape ({x.shape[0]},), one value per row of {s.scores}")
        m_new = np.maximum(m.data, x.max(axis=1))
        m_safe = np.where(np.isfinite(m_new), m_new, 0.0)  # a row with nothing visible yet stays at zero weight
        alpha = np.exp(m.data - m_safe)
        p = np.exp(x - m_safe[:, None])
        l.data = self.round(l.data * alpha + p.sum(axis=1), l.dtype)
        m.data = m_new
        for name in s.rescale:
            acc = self.tile_of(name, s, local)
            if acc.data.shape[0] != x.shape[0]:
                self.fail(s, f"{name} has {acc.data.shape[0]} rows, {s.scores} has {x.shape[0]}")
            acc.data = self.round(acc.data * (alpha[:, None] if acc.data.ndim == 2 else alpha), acc.dtype)
        local[s.out] = replace(S, data=self.round(p.reshape(S.data.shape), S.dtype))

    def s_Normalize(self, s: n.Normalize, env: dict, local: dict[str, Tile]) -> None:
        acc = self.tile_of(s.acc, s, local)
        l = self.tile_of(s.row_sum, s, local).data
        l2 = l[:, None] if acc.data.ndim == 2 else l
        with np.errstate(invalid="ignore", divide="ignore"):
            data = np.where(l2 > 0, acc.data / np.where(l2 > 0, l2, 1.0), 0.0)
        local[s.out] = replace(acc, data=self.round(data, acc.dtype))

    def s_LogSumExp(self, s: n.LogSumExp, env: dict, local: dict[str, Tile]) -> None:
        m = self.tile_of(s.row_max, s, local)
        l = self.tile_of(s.row_sum, s, local).data
        with np.errstate(invalid="ignore", divide="ignore"):
            data = np.where(l > 0, m.data + np.log(np.where(l > 0, l, 1.0)), -np.inf)
        acc = self.dtypes.get("acc", "fp32")
        local[s.out] = replace(m, data=self.round(data, acc), dtype=acc)

    def s_Reshape(self, s: n.Reshape, env: dict, local: dict[str, Tile]) -> None:
        t = self.tile_of(s.name, s, local)
        t.layout = s.dst_layout  # numerically the identity: only the register layout changes

    def s_Loop(self, s: n.Loop, env: dict, local: dict[str, Tile]) -> Iterator[Blocked | None]:
        start = self.ev_int(s.start, env, "a loop bound")
        stop = self.ev_int(s.stop, env, "a loop bound")
        if stop - start > self.steps_left():
            self.fail(s, f"loop {s.var} = {start} : {stop} has {stop - start:,} trips; the interpreter's work budget of "
                         f"{self.result.max_steps:,} steps has {self.steps_left():,} left", _BUDGET_HINT)
        cheapest = None
        for i in range(start, stop):
            before = self.result.steps
            self.result.loop_trips += 1
            self.charge(s, 1)
            yield from self.block(s.body, {**env, s.var: i}, local)
            cost = self.result.steps - before
            cheapest = cost if cheapest is None else min(cheapest, cost)
            if cheapest * (stop - i - 1) > self.steps_left():  # even the cheapest trip so far, repeated, does not fit
                self.fail(s, f"loop {s.var} = {start} : {stop} has {stop - start:,} trips of about {cheapest:,} steps or more each "
                             f"(the cheapest of the first {i - start + 1:,}): more than the interpreter's work budget of {self.result.max_steps:,} steps", _BUDGET_HINT)


def run_program(
    program: n.Program,
    sizes: Mapping[str, int],
    tensors: Mapping[str, np.ndarray],
    *,
    scalars: Mapping[str, float] | None = None,
    params: Mapping[str, int] | None = None,
    exact: bool = True,
    file: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    max_steps: int = MAX_STEPS,
    sm_count: int = INTERPRETER_SM_COUNT,
) -> RunResult:
    """Run every kernel of ``program`` in order over shared global ``tensors`` (written in place).

    ``sizes`` binds B, Hq, Hkv, Sq, Sk, D, Dv; ``params`` overrides or fills the header's
    parameters, and fixes launch-time values; ``scalars`` binds the runtime scalars the kernels
    declare. A launch-time value (``launch NSPLIT = splits(...)``) not fixed by ``params`` is what
    the host's rule gives for these sizes on a GPU of ``sm_count`` SMs (``splits.split_count``).
    Scratch tensors are created (NaN-filled) on first declaration. ``progress(kernel, done,
    total)`` is called after each program instance. ``max_steps`` is the work budget
    (``limits.MAX_STEPS``): a run that would need more steps (program instances, loop trips,
    statements) stops with TLRuntimeError.
    """
    declared = {name for k in program.kernels for name in (*k.param_map(), *k.launch_names())}
    unknown = sorted(set(params or {}) - declared)
    if unknown:
        raise TLRuntimeError(f"parameter {unknown[0]!r} is not declared by the program", where=Position(1, 1, file), hint="parameters: " + ", ".join(sorted(declared)))
    tensors = dict(tensors)
    result = RunResult(tensors, max_steps=max_steps)
    tensor_dtypes: dict[str, str] = {}
    for kernel in program.kernels:
        dtypes = kernel.dtype_map()
        for alias, fmt in dtypes.items():
            if fmt not in FORMATS:
                raise TLRuntimeError(f"{kernel.name}: dtype {alias} = {fmt} is not a format", where=Position(kernel.line, kernel.col, file), hint="formats: " + ", ".join(FORMATS))
        tensor_dtypes.update({name: arg_format(name, dtypes) for name in ARG_DTYPE})
        for sc in kernel.scratch:
            fmt = dtypes.get(sc.dtype, sc.dtype)
            if fmt not in FORMATS:
                raise TLRuntimeError(f"scratch {sc.name} has unknown data type {sc.dtype!r}", where=Position(sc.line, sc.col, file), hint="formats: fp16, bf16, fp32, fp8e4m3, fp8e5m2")
            tensor_dtypes[sc.name] = fmt
        env: dict = {name: int(sizes[name]) for name in SIZE_NAMES if name in sizes}
        values = kernel.param_map()
        values.update(params or {})
        open_ = [name for name, v in values.items() if v is None]
        if open_:
            raise TLRuntimeError(f"{kernel.name}: parameters {', '.join(open_)} are open (a sketch cannot run)", where=Position(kernel.line, kernel.col, file), hint="give values: param BM = 64, ...")
        env.update(values)
        for name in kernel.scalars:
            if not scalars or name not in scalars:
                raise TLRuntimeError(f"{kernel.name}: runtime scalar {name!r} has no value", where=Position(kernel.line, kernel.col, file), hint=f"pass scalars={{'{name}': ...}}")
            env[name] = scalars[name]
        runner = _Kernel(kernel, env, tensors, tensor_dtypes, exact, file, result, progress)
        env.update(runner.launch_values(params or {}, sm_count))
        for sc in kernel.scratch:
            shape = runner.shape(sc.shape, env)
            if sc.name in tensors:
                if tensors[sc.name].shape != shape:
                    raise TLRuntimeError(f"scratch {sc.name} declared with shape {shape}, earlier {tensors[sc.name].shape}", where=Position(sc.line, sc.col, file))
            else:
                tensors[sc.name] = np.full(shape, np.nan)
        runner.run()
    return result
