"""The CUDA backend's memory movement: Allocate (global views, packed or not; shared regions;
register tiles), Copy global -> shared (16-byte cp.async, or vector loads on sm_75), shared ->
register (ldmatrix of MMA operands), global -> register (straight into the fragment layout: a
split-KV combine's partial results), register -> global (predicated stores), and the pipelined
loop that issues a loop's global -> shared Copies stages-1 iterations ahead and waits for each at
the depth it needs (its waits are recorded for ``compile.lint``).

A packed view (``Allocate ... pack G``) has rows that are (head, position) pairs: view row r is
slice ``offset[-1] + r % G`` of the packed dimension at position ``r // G`` of the next one, so
every row gets its own pointer (``_row_offset``) and its Copies are masked by the view's rows."""

from __future__ import annotations

from ...analysis import View
from ...analysis.bounds import nonnegative
from ...tl import nodes as n
from ...tl.printer import expr as tl_expr
from ...tl.printer import stmt as tl_stmt
from .base import CTYPE, INDENT, EmitterBase, Pipe, Rows, RTile, ceil16

# Registers a thread may hold in fp32 accumulators (the output tile and the score tile) and the
# query tile's A fragments together before the A fragments are re-read from shared memory per k
# slice instead (FlashAttention-2 keeps Q in shared memory by default). Measured on the H200
# (bench/cuda_tiles.py, D=128, one m16 tile a warp, BN=64: 128 registers held): Q kept is 13-18%
# faster than re-read without a mask, about 3% slower under the causal mask; at D=256 (224 held) Q kept
# pushes BN down to 16, 0.69x FlashAttention-2 against 0.84x re-read at BN=64.
Q_REGISTER_BUDGET = 160
# A tile copy of more trips per thread than this is unrolled by 4, not whole: unrolled whole, nvcc
# keeps every trip's address (or, on sm_75, its loaded data) live across the K/V loop and spills (a
# one-warp D = 128 decode kernel: 360 bytes). A block of fewer than 4 warps (a decode block of
# BM = 16 or 32 rows) has the lower limit; prefill blocks (4 warps or more) copy at most 16 trips.
COPY_UNROLL_TRIPS = {"few_warps": 8, "default": 16}


def copy_unroll(trips: int, warps: int) -> str:
    limit = COPY_UNROLL_TRIPS["few_warps" if warps < 4 else "default"]
    return "#pragma unroll" if trips <= limit else "#pragma unroll 4"


class MemoryEmitter(EmitterBase):
    """Allocate, Copy and the pipelined Loop: one method per TL statement kind, with their copy loops."""

    def s_Allocate(self, s: n.Allocate) -> None:
        self.comment_tl(s)
        name = self.name(s.name, s)
        if s.level == "global":
            if s.tensor not in self.facts.ranks:
                self.fail(s, f"{s.tensor!r} is not a tensor argument")
            rank = self.facts.ranks[s.tensor]
            if len(s.offset) + len(s.shape) != rank:
                self.fail(s, f"{s.tensor} has {rank} dimensions; offset {len(s.offset)} + shape {len(s.shape)} do not add up")
            if s.pack is not None and (not s.offset or len(s.shape) not in (1, 2)):
                self.fail(s, "a packed view packs slices of its last offset's dimension into the rows of a 1-d or 2-d view",
                          "write Allocate Q in global (G * Sq, D) at q[b, hk * G] pack G")
            ctype = CTYPE[self.facts.formats[s.tensor]]
            const = "const " if s.tensor in ("q", "k", "v", "alibi_slopes") else ""
            terms = "".join(f" + (long long)({self.dev(e)}) * stride_{s.tensor}{i}" for i, e in enumerate(s.offset))
            self.emit(f"{const}{ctype}* {name} = {s.tensor}_ptr{terms};")
            self.scope.views[s.name] = View(s.tensor, s.shape, s.offset, self.facts.formats[s.tensor], s.pack)
            if s.pack is not None:
                self.emit(f"// packed: view row r is {s.tensor} slice {tl_expr(s.offset[-1])} + r % ({tl_expr(s.pack)}) at position r // ({tl_expr(s.pack)})")
            return
        if s.level == "shared":
            sh = self.shared[s.name]
            self.emit(f"// {sh.rows} rows x {sh.cols_pad} columns (pitch {sh.pitch}: 16 bytes of padding per row), {sh.slots} slot(s), {sh.bytes} bytes at offset {sh.offset}")
            self.emit(f"af_elem* {name} = reinterpret_cast<af_elem*>(af_smem + {sh.offset});")
            self.scope.tiles[s.name] = RTile("shared", name, sh.fmt, shared=sh, dims=s.shape)
            return
        fmt = self.k.dtype_map().get(s.dtype, s.dtype)
        if fmt != "fp32":
            self.fail(s, f"register tile {s.name} is {fmt}: the CUDA backend keeps register tiles in fp32 (MMA accumulators)", "dtype acc = fp32")
        init = "0.0f" if s.init is None else self.dev(s.init)
        if len(s.shape) == 1:
            t = RTile("rows", name, fmt, dims=s.shape)
        elif len(s.shape) == 2:
            cols = self.int_value(s.shape[1], s, "tile dimension")
            t = RTile("acc", name, fmt, ncols=ceil16(cols), true_cols=cols, dims=s.shape)
        else:
            self.fail(s, "register tiles are 1-d or 2-d")
        self.declare(t, init)
        self.scope.tiles[s.name] = t

    # ------------------------------------------------------------------ rows of a view
    def _packed_parts(self, view: View, coord: n.Expr, row: str) -> tuple[str, str]:
        """(position, slice in the group) of packed view row ``row``: TL's // and % round toward minus
        infinity, C++'s toward zero; the plain operators where the row is provably >= 0."""
        pack = self.dev(view.pack)
        if nonnegative(coord, self.scope.nonneg) and nonnegative(view.pack, self.scope.nonneg):
            return f"(({row}) / {pack})", f"(({row}) % {pack})"
        return f"af_floordiv({row}, {pack})", f"af_floormod({row}, {pack})"

    def _row_offset(self, view: View, coord: n.Expr, row: str) -> str:
        """The element offset of view row ``row`` (a C++ name) from the view's base pointer (int64)."""
        first_dim = len(view.offset)  # the view's first (row) dimension in the tensor
        if view.pack is None:
            return f"(long long){row} * stride_{view.tensor}{first_dim}"
        pos, slot = self._packed_parts(view, coord, row)
        return f"(long long){slot} * stride_{view.tensor}{first_dim - 1} + (long long){pos} * stride_{view.tensor}{first_dim}"

    def _rows_of(self, view: View, s: n.Copy, row0: str) -> Rows:
        """The rows a Copy's tile holds, for q_idx / h_idx in masks and score modifiers."""
        if view.pack is None:
            return Rows(row0)
        pos, slot = self._packed_parts(view, s.coord[0], "{r}")
        return Rows(row0, pos, f"({self.dev(view.offset[-1])} + {slot})")

    def _load_code(self, s: n.Copy, var_override: dict[str, str] | None, slot: str) -> list[str]:
        """The code of a global->shared Copy: every thread copies 16-byte pieces of the tile."""
        view = self.view(s.src, s)
        sh = self.shared.get(s.dst)
        if sh is None:
            self.fail(s, f"{s.dst} is not an allocated shared tile")
        if s.tile is None or s.coord is None or len(s.tile) != 2 or len(view.extents) != 2:
            self.fail(s, "a global->shared Copy takes a 2-d tile of a 2-d view")
        rows = self.int_value(s.tile[0], s, "tile dimension")
        cols = self.int_value(s.tile[1], s, "tile dimension")
        if rows != sh.rows or cols != sh.cols:
            self.fail(s, f"the tile ({rows}, {cols}) is not the shape of {s.dst} ({sh.rows}, {sh.cols})")
        if not (isinstance(s.coord[1], n.Num) and s.coord[1].value == 0) or s.tile[1] != view.extents[1]:
            self.fail(s, "a tile spans the whole head dim here: coordinate [.., 0] and the view's column extent", "copy (BN, D) at [j, 0]")
        rank = self.facts.ranks[view.tensor]
        row_stride = f"stride_{view.tensor}{rank - 2}"
        row0 = self.dev(n.Binary("*", s.coord[0], s.tile[0]), var_override)
        extent = self.dev(view.extents[0], var_override)
        chunks = rows * sh.cols_pad // 8
        per_row = sh.cols_pad // 8
        nt = self.warps * 32
        trips = -(-chunks // nt)
        # a tile the loop's bound keeps within the view (``for j = 0 : Sk // BN``; a prefetch of tile af_jn is issued only
        # while af_jn is below that bound) and whose rows hold no padding columns: its copies need no predicate
        inside = (view.pack is None and sh.cols_pad == sh.cols
                  and self.scope.tile_inside(s.coord[0], s.tile[0], view.extents[0]))
        head = [f"const int af_row0 = {row0}, af_rows = {extent} - af_row0;"]
        if view.pack is None and nt % per_row == 0:
            # a pass of the block covers whole rows: each thread keeps one pointer and steps it by the
            # pass's rows (written as base + row * stride per trip, nvcc hoists every trip's 64-bit
            # offset out of the K/V loop: 16 live registers a tile at 8 trips, the spills of a
            # 4-warp BM = 128 kernel)
            step = nt // per_row
            head += [f"const int af_r0 = af_tid / {per_row}, af_col = (af_tid % {per_row}) * 8;  // this thread's first row and column",
                     f"const af_elem* af_p = {s.src} + (long long)(af_row0 + af_r0) * {row_stride} + af_col;",
                     f"const long long af_step = (long long){step} * {row_stride};  // {step} rows a pass"]
            advance, trip, in_guard, guard, address = ", af_p += af_step", f"const int af_r = af_r0 + af_i * {step};", [], f"af_r < {rows}", "af_p"
        else:
            trip, in_guard = "const int af_c = af_tid + af_i * af_NT;", [f"const int af_r = af_c / {per_row}, af_col = (af_c % {per_row}) * 8;"]
            advance, guard = "", f"af_c < {chunks}"
            if view.pack is None:  # rows at one stride from the tile's first
                head.append(f"const af_elem* af_src = {s.src} + (long long)af_row0 * {row_stride};")
                address = f"af_src + (long long)af_r * {row_stride} + af_col"
            else:  # packed: each row its own pointer (head, position); rows past the view's G * Sq zero-filled
                head[0] += "  // packed rows: (head, position) pairs"
                in_guard.append("const int af_vr = af_row0 + af_r;  // the view's row")
                address = f"{s.src} + {self._row_offset(view, s.coord[0], 'af_vr')} + af_col"
        guard = "" if chunks % nt == 0 else f"if ({guard}) "
        dst = f"af_dst + af_r * {sh.pitch} + af_col"
        in_view = f"af_r < af_rows && af_col < {sh.cols}"
        copy = ([f"af_copy16_inside({dst}, {address}, {in_view});  // a whole tile inside the view (sm_75 keeps the predicate)"] if inside else
                [f"const bool af_in = {in_view};", f"af_copy16({dst}, af_in ? {address} : {s.src}, af_in);"])
        return [
            "{",
            *(INDENT + line for line in head),
            f"{INDENT}af_elem* af_dst = {s.dst} + ({slot}) * {sh.slot_elems};",
            copy_unroll(trips, self.warps),
            f"{INDENT}for (int af_i = 0; af_i < {trips}; ++af_i{advance}) {{",
            f"{INDENT * 2}{trip}",
            f"{INDENT * 2}{guard}{{",
            *(INDENT * 3 + line for line in in_guard),
            *(INDENT * 3 + line for line in copy),
            f"{INDENT * 2}}}",
            f"{INDENT}}}",
            "}",
        ]

    def _emit_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.emit(line)

    def _wait(self, count: int) -> None:
        line = f"af_cp_wait<{count}>();"
        self.waits.append(line)
        self.emit(line + "  // cp.async: this Copy's group has landed")
        self.emit("__syncthreads();")

    def s_Copy(self, s: n.Copy) -> None:
        self.comment_tl(s)
        if s.src_level == "global" and s.dst_level == "shared":
            self._copy_in(s)
        elif s.src_level == "register" and s.dst_level == "global":
            self._store(s)
        elif s.src_level == "shared" and s.dst_level == "register":
            self._to_registers(s)
        elif s.src_level == "global" and s.dst_level == "register":
            self._load_fragments(s)
        else:
            self.fail(s, f"a Copy from {s.src_level} to {s.dst_level} has no CUDA translation here", "stage global tiles through shared memory")

    def _copy_in(self, s: n.Copy) -> None:
        pipe = self.pipe
        if pipe is None or s not in pipe.loads:
            if pipe is not None:
                self.fail(s, "a global->shared Copy in a loop must be in the loop's own body")
            self.emit("// cp.async, then wait for it (not pipelined: outside any loop)")
            self._emit_lines(self._load_code(s, None, "0"))
            self.emit("af_cp_commit();")
            self._wait(0)
            self.scope.tiles[s.dst].rows = self._rows_of(self.view(s.src, s), s, self.dev(n.Binary("*", s.coord[0], s.tile[0])))
            return
        i, N, S = pipe.loads.index(s), len(pipe.loads), pipe.stages
        if S == 1:
            if i == 0:
                self.emit("// stages = 1: every thread is done with the slot; load this tile's copies, one commit group each")
                self.emit("__syncthreads();")
                for c in pipe.loads:
                    self._emit_lines(self._load_code(c, None, "0"))
                    self.emit("af_cp_commit();")
            self._wait(N - 1 - i)
        else:
            if i == 0:
                self._wait(N - 1 + N * (S - 2))
                self.emit(f"// prefetch tile {pipe.var} + {S - 1} into the slot every thread has finished with (issued after the barrier)")
                self.emit("{")
                self.depth += 1
                self.emit(f"const int af_jn = {pipe.var} + {S - 1}, af_sn = ({pipe.it} + {S - 1}) % {S};")
                for c in pipe.loads:
                    self.emit(f"if (af_jn < {pipe.stop})")
                    self._emit_lines(self._load_code(c, {pipe.var: "af_jn"}, "af_sn"))
                    self.emit("af_cp_commit();")
                self.depth -= 1
                self.emit("}")
            else:
                self._wait(N - 1 - i + N * (S - 1))
        self.scope.tiles[s.dst].rows = self._rows_of(self.view(s.src, s), s, self.dev(n.Binary("*", s.coord[0], s.tile[0])))

    def _accumulator_registers(self, a_operand: str) -> int:
        """fp32 accumulator registers a thread holds while a GEMM reading ``a_operand`` runs: every
        2-d register tile the kernel allocates (the output) and the widest score tile such a GEMM
        makes (one per loop; the loops run one after another). An n8 tile is 4 registers a thread
        per m16 tile."""
        def regs(cols: int) -> int:
            return cols // 8 * 4 * self.MT

        held = sum(regs(ceil16(self.int_value(a.shape[1], a, "tile dimension"))) for a in n.walk(self.k.body)
                   if isinstance(a, n.Allocate) and a.level == "register" and len(a.shape) == 2)
        scores = [regs(src.rows if g.b_trans else src.cols_pad) for g in n.walk(self.k.body)
                  if isinstance(g, n.Gemm) and g.a == a_operand and not g.accumulate and (src := self._shared_source(g.b)) is not None]
        return held + max(scores, default=0)

    def _shared_source(self, reg: str):
        """The shared tile a register operand is copied from (``Copy Ks from shared to register Kr``)."""
        for c in n.walk(self.k.body):
            if isinstance(c, n.Copy) and c.dst == reg and c.src_level == "shared" and c.src in self.shared:
                return self.shared[c.src]
        return None

    def _role(self, name: str) -> str | None:
        """'a' or 'b': how the GEMMs of the kernel read register tile ``name``."""
        for g in n.walk(self.k.body):
            if isinstance(g, n.Gemm):
                if g.a == name:
                    return "a"
                if g.b == name:
                    return "b"
        return None

    def _to_registers(self, s: n.Copy) -> None:
        src = self.tile(s.src, s)
        if src.kind != "shared":
            self.fail(s, f"{s.src} is not a shared tile")
        name = self.name(s.dst, s)
        role = self._role(s.dst)
        sh = src.shared
        if role == "a":
            if sh.rows != self.M:
                self.fail(s, f"the A operand {s.dst} has {sh.rows} rows; the block's register tiles have {self.M}")
            kt = sh.cols_pad // 16
            held = self.MT * kt * 4 + self._accumulator_registers(s.dst)
            if held <= Q_REGISTER_BUDGET:
                self.emit(f"// ldmatrix.x4: A fragments of this warp's {16 * self.MT} rows, {kt} k slices of 16, kept in registers")
                self.emit(f"uint32_t {name}[af_MT][{kt}][4];")
                self.emit("#pragma unroll")
                self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
                self.emit("#pragma unroll")
                self.emit(f"for (int af_k = 0; af_k < {kt}; ++af_k)")
                self.emit(f"{INDENT}af_ldsm_x4({name}[af_mt][af_k], {self._slot_base(src)} + (af_warp * af_MT * 16 + af_mt * 16 + (af_lane & 15)) * {sh.pitch} + af_k * 16 + (af_lane >> 4) * 8);")
                self.scope.tiles[s.dst] = RTile("a_regs", name, sh.fmt, ncols=sh.cols_pad, true_cols=sh.cols, rows=src.rows, shared=sh)
            else:
                self.emit(f"// ({self.MT * kt * 4} registers of A fragments beside {held - self.MT * kt * 4} of accumulators would crowd them: "
                          f"the GEMM reads {s.dst} from {s.src} by ldmatrix per k slice)")
                self.scope.tiles[s.dst] = RTile("a_shared", name, sh.fmt, ncols=sh.cols_pad, true_cols=sh.cols, rows=src.rows, shared=sh)
        elif role == "b":
            self.emit(f"// (ldmatrix per 16-wide k slice inside the GEMM that reads {s.dst}: B fragments never all live in registers)")
            self.scope.tiles[s.dst] = RTile("b_shared", name, sh.fmt, ncols=sh.cols_pad, true_cols=sh.cols, rows=src.rows, shared=sh)
        else:
            self.fail(s, f"{s.dst} is not read by a GEMM: the CUDA backend loads shared tiles into registers only as MMA operands")

    def _store(self, s: n.Copy) -> None:
        view = self.view(s.dst, s)
        src = self.tile(s.src, s)
        if s.tile is None or s.coord is None or len(s.tile) != len(view.extents):
            self.fail(s, "a register->global Copy takes one tile size and coordinate per view dimension")
        if self.int_value(s.tile[0], s, "tile dimension") != self.M:
            self.fail(s, f"the stored tile has {tl_expr(s.tile[0])} rows, not the block's {self.M}")
        row0 = self.dev(n.Binary("*", s.coord[0], s.tile[0]))
        extent = self.dev(view.extents[0])
        row = f"{row0} + af_warp * (af_MT * 16) + af_mt * 16 + af_g + af_r * 8"
        off = self._row_offset(view, s.coord[0], "af_row")  # of the view's row af_row
        if view.pack is not None:
            self.emit("// packed rows: each its own (head, position); rows past the view's G * Sq are not stored")
        if src.kind == "rows" and len(s.tile) == 1:
            self.emit("// lanes with af_t == 0 hold each fragment row's value")
            self.emit("if (af_t == 0) {")
            self.depth += 1
            self.emit("#pragma unroll")
            self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
            self.emit("#pragma unroll")
            self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
            self.emit(f"{INDENT}const int af_row = {row};")
            self.emit(f"{INDENT}if (af_row < {extent}) {s.dst}[{off}] = {src.cname}[af_mt][af_r];")
            self.emit("}")
            self.depth -= 1
            self.emit("}")
            return
        if src.kind != "acc" or len(s.tile) != 2:
            self.fail(s, f"{s.src} is not a 2-d register tile of fragments")
        if not (isinstance(s.coord[1], n.Num) and s.coord[1].value == 0) or s.tile[1] != view.extents[1]:
            self.fail(s, "a stored tile spans the whole head dim: coordinate [.., 0]")
        cols = self.int_value(s.tile[1], s, "tile dimension")
        self.emit("// each thread stores its fragment pairs (rows g and g+8, columns 2t, 2t+1 of every n8 tile)")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_nt = 0; af_nt < {src.ncols // 8}; ++af_nt)")
        self.emit("#pragma unroll")
        self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
        self.emit(f"{INDENT}const int af_row = {row}, af_col = af_nt * 8 + af_t * 2;")
        self.emit(f"{INDENT}if (af_row < {extent} && af_col < {cols})")
        self.emit(f"{INDENT * 2}af_store2({s.dst} + {off} + af_col, {src.cname}[af_mt][af_nt][2 * af_r], {src.cname}[af_mt][af_nt][2 * af_r + 1]);")
        self.emit("}")

    def _load_fragments(self, s: n.Copy) -> None:
        """Copy global -> register: a (BM) vector or a (BM, N) tile read straight into the fragment
        layout the block's register tiles use (no shared memory, no MMA operand): thread (g, t) of
        warp w reads rows w * 16 * MT + 16 * mt + g (+ 8), and of a 2-d tile columns 8 * nt + 2t, +1.
        Rows past the view's extent (and padded columns) read as zero, as TL's out-of-bounds reads do."""
        view = self.view(s.src, s)
        if s.tile is None or s.coord is None or len(s.tile) != len(view.extents) or len(s.tile) not in (1, 2):
            self.fail(s, "a global->register Copy takes a (BM) or (BM, N) tile of a 1-d or 2-d view, one coordinate per dimension")
        if self.int_value(s.tile[0], s, "tile dimension") != self.M:
            self.fail(s, f"the loaded tile has {tl_expr(s.tile[0])} rows, not the block's {self.M}", "every register tile is indexed by the block's rows")
        rank = len(s.tile)
        existing = self.scope.tiles.get(s.dst)
        row0 = self.dev(n.Binary("*", s.coord[0], s.tile[0]))
        rows = self._rows_of(view, s, row0)
        if rank == 1:
            t = RTile("rows", self.name(s.dst, s), view.fmt, rows=rows, dims=tuple(s.tile))
        else:
            if not (isinstance(s.coord[1], n.Num) and s.coord[1].value == 0) or s.tile[1] != view.extents[1]:
                self.fail(s, "a loaded tile spans the view's whole row: coordinate [.., 0] and the view's column extent", "copy (BM, Dv) at [m, 0]")
            cols = self.int_value(s.tile[1], s, "tile dimension")
            if cols % 2:
                self.fail(s, f"{cols} columns: fragment pairs need an even column count")
            t = RTile("acc", self.name(s.dst, s), view.fmt, ncols=ceil16(cols), true_cols=cols, rows=rows, dims=tuple(s.tile))
        if existing is not None:
            if existing.kind != t.kind or existing.ncols != t.ncols:
                self.fail(s, f"{s.dst} is already a register tile of another shape")
            existing.rows = rows  # (its format stays the allocated one: the values are rounded to it where they are used)
            t = existing
        else:
            self.declare(t, None)
            self.scope.tiles[s.dst] = t
        extent = self.dev(view.extents[0])
        self.emit("// straight into the fragment layout: each thread reads the rows (g, g + 8) and columns (2t, 2t + 1) it holds")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
        self.emit("#pragma unroll")
        self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
        self.depth += 1
        self.emit(f"const int af_row = {row0} + af_warp * (af_MT * 16) + af_mt * 16 + af_g + af_r * 8;")
        self.emit(f"const bool af_in = af_row < {extent};  // rows past the view's extent read as zero")
        off = self._row_offset(view, s.coord[0], "af_row")
        if rank == 1:
            self.emit(f"{t.cname}[af_mt][af_r] = af_in ? (float)({s.src}[{off}]) : 0.0f;")
        else:
            self.emit(f"const {CTYPE[view.fmt]}* af_at = {s.src} + (af_in ? {off} : 0);  // the row's first element")
            self.emit("#pragma unroll")
            self.emit(f"for (int af_nt = 0; af_nt < {t.ncols // 8}; ++af_nt) {{")
            self.emit(f"{INDENT}const int af_col = af_nt * 8 + af_t * 2;")
            self.emit(f"{INDENT}const float2 af_v = af_in && af_col < {cols} ? af_load2(af_at + af_col) : make_float2(0.0f, 0.0f);")
            self.emit(f"{INDENT}{t.cname}[af_mt][af_nt][2 * af_r] = af_v.x;")
            self.emit(f"{INDENT}{t.cname}[af_mt][af_nt][2 * af_r + 1] = af_v.y;")
            self.emit("}")
        self.depth -= 1
        self.emit("}")

    # ------------------------------------------------------------------ the pipelined loop
    def s_Loop(self, s: n.Loop) -> None:
        self.emit(f"// TL: {tl_stmt(s)[0].strip()}")
        if self.pipe is not None:
            self.fail(s, "nested loops have no CUDA translation here")
        var = self.name(s.var, s)
        stages = self.int_value(s.stages, s, "stages") if s.stages is not None else 1
        loads = [c for c in s.body if isinstance(c, n.Copy) and c.src_level == "global" and c.dst_level == "shared"]
        nested = [c for c in n.walk(s.body) if isinstance(c, n.Copy) and c.src_level == "global" and c.dst_level == "shared" and c not in loads]
        if nested:
            self.fail(nested[0], "a global->shared Copy nested deeper than the loop's own body")
        self.loop_count += 1
        lo, hi, it = f"af_lo{self.loop_count}", f"af_hi{self.loop_count}", f"af_it{self.loop_count}"
        self.emit("{")
        self.depth += 1
        self.emit(f"const int {lo} = {self.dev(s.start)}, {hi} = {self.dev(s.stop)};")
        pipe = Pipe(stages, loads, it, var, lo, hi, slot_expr=f"({it} % {stages})" if stages > 1 else "0")
        if loads:
            self.emit("__syncthreads();  // the shared slots are free: no warp still reads the previous loop's tiles")
            if stages > 1:
                self.emit(f"// prologue: the first {stages - 1} tile(s) in flight, one cp.async group per Copy")
                for st in range(stages - 1):
                    self.emit("{")
                    self.depth += 1
                    self.emit(f"const int af_jn = {lo} + {st};")
                    for c in loads:
                        self.emit(f"if (af_jn < {hi})")
                        self._emit_lines(self._load_code(c, {s.var: "af_jn"}, str(st)))
                        self.emit("af_cp_commit();")
                    self.depth -= 1
                    self.emit("}")
        self.emit(f"for (int {var} = {lo}, {it} = 0; {var} < {hi}; ++{var}, ++{it}) {{")
        self.pipe = pipe if loads else None
        with self.scope.loop(s.var, s.start, s.stop, var):
            self.depth += 1
            self.block(s.body)
            self.depth -= 1
        self.pipe = None
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        self.emit("// TL: end")
