"""One TL kernel -> one ``extern "C" __global__`` CUDA C++ function, statement by statement.

The translation table is ``TRANSLATION_TABLE`` below (each TL statement becomes a ``// TL:``
comment above the code it became); ``manual.translation_manual`` renders it, with the prelude's
helpers and the kernel ABI, as the CUDA translation manual a model reads.

What the translator cannot express is refused with a ``TranslateError`` naming the statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from ...abi import INT_SCALARS, SIZE_ARGS
from ...analysis import KernelFacts, Scope, View, multiplies_indices
from ...errors import Position, TranslateError
from ...tl import nodes as n
from ...tl.printer import expr as tl_expr
from ...tl.printer import stmt as tl_stmt
from . import exprs

# TL statement (its node class, the form it takes) -> what this emitter writes for it: the one
# home of the table; the CUDA translation manual a model reads (manual.py) is made from it, and
# a test keeps one row per TL statement kind (tl.nodes.Stmt).
TRANSLATION_TABLE: tuple[tuple[str, str, str], ...] = (
    ("Allocate", "Allocate X in global ... at t[..]", "a base pointer (int64 offsets from the tensor's strides); a packed view (`pack G`) is refused"),
    ("Allocate", "Allocate X in shared (R, D)", "a region of dynamic shared memory, rows padded by 16 bytes (ldmatrix reads 8 rows "
                                                "without bank conflicts); one slot per pipeline stage when a pipelined loop fills it"),
    ("Allocate", "Allocate X in register (BM[, N])", "fp32 fragments in the mma.sync C layout: each warp owns 16*MT rows, each "
                                                     "thread rows g and g+8 of every m16 tile"),
    ("Copy", "Copy global -> shared", "16-byte cp.async (sm_80+) with zero fill past the tensor's end, or 16-byte vector loads "
                                      "(sm_75); in a pipelined loop issued stages-1 tiles ahead, one commit group per Copy"),
    ("Copy", "Copy shared -> register", "ldmatrix: A operands (the query tile) into registers once (or per k slice inside the GEMM "
                                        "when they would not fit), B operands per 16-wide k slice inside the GEMM"),
    ("Copy", "Copy register -> global", "predicated 2-element stores of each thread's pairs"),
    ("Gemm", "Compute GEMM A, B[^T]", "mma.sync m16n8k16 (sm_80+) / 2x m16n8k8 (sm_75), ldmatrix (.trans for a B stored k-major) "
                                      "for B fragments"),
    ("Cast", "Compute Cast P to qkv", "in place on a fragment tile: the values are rounded where they are packed into MMA operand "
                                      "registers, at the Reshape"),
    ("Reshape", "Reshape P from mma_c to mma_a", "accumulator pairs packed into A-operand registers (af_pack)"),
    ("OnlineSoftmax", "Compute OnlineSoftmax", "row max / sum on the fragments, quad shuffles (xor 1, 2); a row that has seen "
                                               "nothing keeps weight 0; the row sum stays per thread until it is read"),
    ("Normalize", "Compute Normalize", "the quad's partial row sums added up, then O / l (0 for a row that saw no key)"),
    ("LogSumExp", "Compute LogSumExp", "m + log(l), -inf for a row that saw no key"),
    ("ScoreMod", "Compute ScoreMod", "per fragment element, q_idx/kv_idx from the fragment map"),
    ("Mask", "Compute Mask S keep EXPR", "per fragment element: -inf where EXPR is false, q_idx/kv_idx from the fragment map"),
    ("Elementwise", "Compute Multiply/Add/Exp/... (elementwise)", "per fragment element"),
    ("Softmax", "Compute Softmax (one pass)", "refused (TranslateError): the planner's OnlineSoftmax form is translated"),
    ("Loop", "for j = a : b pipeline stages", "a loop whose global->shared Copies are issued stages-1 iterations ahead, each waited "
                                              "for (af_cp_wait) at the depth the pipeline needs; nested pipelined loops are refused"),
)
INDENT = "    "
CTYPE = {"fp16": "__half", "bf16": "__nv_bfloat16", "fp32": "float"}
_CPP_KEYWORDS = frozenset("""auto bool break case char const continue default do double else enum extern float for goto if int long
register return short signed sizeof static struct switch typedef union unsigned void volatile while class delete new private
protected public template this throw try catch namespace using virtual friend inline operator typename asm true false nullptr
constexpr decltype static_assert alignas alignof noexcept thread_local""".split())
_ELEMENTWISE = {
    "Multiply": "({0} * {1})", "Add": "({0} + {1})", "Subtract": "({0} - {1})", "Divide": "({0} / {1})",
    "Maximum": "fmaxf({0}, {1})", "Minimum": "fminf({0}, {1})", "Exp": "expf({0})", "Log": "logf({0})",
    "Tanh": "af_tanh({0})", "Abs": "fabsf({0})", "Neg": "(-{0})",
}
# Registers a warp may spend on the query tile's A fragments before they are re-read from
# shared memory per k slice instead (FlashAttention-2 keeps Q in shared memory by default too).
Q_REGISTER_BUDGET = 64


def ceil16(x: int) -> int:
    return (x + 15) // 16 * 16


@dataclass
class Shared:
    """A shared tile: rows x cols (cols padded to 16), ``slots`` copies for a pipelined loop."""

    name: str
    rows: int
    cols: int  # true columns (a head dim)
    cols_pad: int
    fmt: str
    slots: int = 1
    offset: int = 0

    @property
    def pitch(self) -> int:
        return self.cols_pad + 8  # 16 bytes of padding per row: ldmatrix rows land in distinct banks

    @property
    def slot_elems(self) -> int:
        return self.rows * self.pitch

    @property
    def bytes(self) -> int:
        return self.slots * self.slot_elems * 2


@dataclass
class RTile:
    """A register tile, or a register name for a shared tile (an operand ldmatrix reads)."""

    kind: str  # "rows" (BM,) fp32 per row; "acc" (BM, N) mma C fragments; "afrag" mma A fragments;
    #            "a_shared"/"b_shared" an operand read from shared memory by the GEMM; "a_regs" A fragments loaded once
    cname: str
    fmt: str
    ncols: int = 0  # padded columns (acc/afrag), or the k extent
    true_cols: int = 0
    rows: str | None = None  # C++ expression of the tile's first global row (q_idx)
    cols: str | None = None  # ... of its first global column (kv_idx)
    shared: Shared | None = None
    partial_sum: bool = False  # a row sum each thread holds for its own columns only (quad-reduce before use)
    dims: tuple = ()

    @property
    def rank(self) -> int:
        return 1 if self.kind == "rows" else 2


@dataclass
class Pipe:
    """A pipelined loop: its stage count and the global->shared Copies it streams, in order."""

    stages: int
    loads: list[n.Copy]
    it: str  # C++ name of the iteration counter
    var: str
    start: str
    stop: str
    slot_expr: str = ""


@dataclass
class KernelCode:
    name: str
    lines: list[str]
    threads: int
    smem: int
    tensors: tuple[str, ...]
    ranks: dict[str, int]
    formats: dict[str, str]
    scalars: tuple[str, ...]
    grid: list[str]  # host expressions of the TL grid extents (flattened, last fastest)
    waits: list[str] = field(default_factory=list)  # the cp.async waits of each pipelined loop, in order (for the static lint)
    notes: list[str] = field(default_factory=list)
    params: dict[str, int] = field(default_factory=dict)


class KernelEmitter:
    def __init__(self, kernel: n.Kernel, facts: KernelFacts, head_dim: int, head_dim_v: int, file: str | None):
        self.k, self.facts, self.file = kernel, facts, file
        self.D, self.Dv = head_dim, head_dim_v
        self.lines: list[str] = []
        self.depth = 1
        self.notes: list[str] = []
        self.waits: list[str] = []
        names = {s: s for s in SIZE_ARGS + ("D", "Dv")}
        for name, value in facts.params.items():
            names[name] = name if name in facts.constants else str(value)
        names.update({s: s for s in kernel.scalars})
        self.scope = Scope(names, set(SIZE_ARGS) | {"D", "Dv"} | set(facts.params) | {g.name for g in kernel.grid})
        self.floats = frozenset({s for s in kernel.scalars if s not in INT_SCALARS} | {"score"})
        self.shared: dict[str, Shared] = {}
        self.pipe: Pipe | None = None
        self.loop_count = 0
        self.rows_param: str | None = None
        self.M = 0
        self._check_header()

    # ------------------------------------------------------------------ helpers
    def fail(self, node: n.Node, message: str, hint: str | None = None) -> NoReturn:
        raise TranslateError(f"{self.k.name}: {message}", where=Position(node.line, node.col, self.file), hint=hint)

    def emit(self, line: str = "") -> None:
        self.lines.append(INDENT * self.depth + line if line else "")

    def comment_tl(self, s: n.Stmt) -> None:
        self.emit(f"// TL: {tl_stmt(s)[0].strip()}")

    def name(self, tl_name: str, node: n.Node) -> str:
        if tl_name in _CPP_KEYWORDS or tl_name.startswith("af_") or tl_name.endswith("_ptr") or tl_name.startswith("stride_"):
            self.fail(node, f"the name {tl_name!r} is reserved in the generated CUDA C++", "rename it in the TL program")
        return tl_name

    def dev(self, e: n.Expr, extra: dict[str, str] | None = None) -> str:
        ctx = exprs.ExprContext({**self.scope.names, **(extra or {})}, set(self.scope.nonneg), self._index, self.file, set(self.floats))
        return exprs.device(e, ctx)

    def _index(self, e: n.Index) -> str:
        if e.name not in self.facts.tensors:
            self.fail(e, f"{e.name}[...] reads a tensor this kernel does not take")
        rank = self.facts.ranks[e.name]
        if len(e.args) != rank:
            self.fail(e, f"{e.name} has {rank} dimensions; {e.name}[...] gives {len(e.args)} index(es)")
        terms = " + ".join(f"(long long)({self.dev(a)}) * stride_{e.name}{i}" for i, a in enumerate(e.args))
        return f"{e.name}_ptr[{terms}]"

    def int_value(self, e: n.Expr, node: n.Node, what: str) -> int:
        if isinstance(e, n.Num) and isinstance(e.value, int):
            return e.value
        if isinstance(e, n.Name):
            if e.id == "D":
                return self.D
            if e.id == "Dv":
                return self.Dv
            if e.id in self.facts.params:
                return int(self.facts.params[e.id])
        self.fail(node, f"{what} {tl_expr(e)} is not a number, a parameter or a head dim", "write tiles as (BM, D), (BN, Dv), (BM)")

    def tile(self, name: str, node: n.Node) -> RTile:
        t = self.scope.tiles.get(name)
        if t is None:
            self.fail(node, f"{name!r} is not a tile here")
        return t

    def view(self, name: str, node: n.Node) -> View:
        if name not in self.scope.views:
            self.fail(node, f"{name!r} is not a global view")
        return self.scope.views[name]

    @property
    def MT(self) -> int:
        return self.M // (16 * self.warps)

    # ------------------------------------------------------------------ header and layout
    def _check_header(self) -> None:
        k, facts = self.k, self.facts
        for s in ("tma", "persistent", "ws"):
            if facts.strategies[s]:
                self.fail(k, f"strategy {s} = 1 has no CUDA translation", f"plan with {s} = 0 (the CUDA backend refuses it for every target)")
        dmap = k.dtype_map()
        if dmap.get("qkv") not in ("fp16", "bf16"):
            self.fail(k, f"operand format {dmap.get('qkv')!r}: the CUDA backend's MMAs take fp16 or bf16", "use dtype qkv = fp16 or bf16 (tf32/fp32 kernels: --backend triton)")
        if dmap.get("acc", "fp32") != "fp32":
            self.fail(k, "accumulators must be fp32 (mma.sync accumulates in fp32 here)", "dtype acc = fp32")
        if dmap.get("out", dmap["qkv"]) not in CTYPE:
            self.fail(k, f"output format {dmap.get('out')!r} has no CUDA type here")
        for d, what in ((self.D, "D"), (self.Dv, "Dv")):
            if d % 8 or not 8 <= d <= 256:
                self.fail(k, f"head dim {what} = {d}: the CUDA backend copies rows in 16-byte pieces and takes head dims that are multiples of 8 up to 256",
                          "pad the head dim to a multiple of 8, or use --backend triton")
        for t in facts.tensors:
            if t not in ("q", "k", "v", "o", "lse", "alibi_slopes"):
                self.fail(k, f"tensor {t!r} (scratch) has no CUDA translation yet", "split-KV decode programs: --backend triton")
        self.fmt_qkv = dmap["qkv"]
        warps = facts.num_warps
        self.warps_asked = warps
        self.warps = warps

    def _layout_shared(self) -> int:
        """Slots per shared tile (the stage count of the pipelined loop that fills it), offsets."""
        allocs = {s.name: s for s in n.walk(self.k.body) if isinstance(s, n.Allocate) and s.level == "shared"}

        def visit(body: tuple[n.Stmt, ...], stages: int) -> None:
            for s in body:
                if isinstance(s, n.Loop):
                    visit(s.body, self.int_value(s.stages, s, "stages") if s.stages is not None else 1)
                elif isinstance(s, n.Copy) and s.src_level == "global" and s.dst_level == "shared" and s.dst in allocs:
                    sh = self.shared.get(s.dst)
                    if sh is not None:
                        sh.slots = max(sh.slots, stages)
        for name, a in allocs.items():
            if len(a.shape) != 2:
                self.fail(a, "shared tiles are 2-d (rows, head dim) here")
            rows = self.int_value(a.shape[0], a, "tile dimension")
            cols = self.int_value(a.shape[1], a, "tile dimension")
            if rows % 16:
                self.fail(a, f"shared tile {name} has {rows} rows; MMA tiles need a multiple of 16")
            fmt = self.k.dtype_map().get(a.dtype, a.dtype)
            if fmt != self.fmt_qkv:
                self.fail(a, f"shared tile {name} is {fmt}; the CUDA backend stages operands in the qkv format ({self.fmt_qkv})")
            self.shared[name] = Shared(name, rows, cols, ceil16(cols), fmt)
        visit(self.k.body, 1)
        offset = 0
        for sh in self.shared.values():
            sh.offset = offset
            offset += (sh.bytes + 127) // 128 * 128
        return offset

    def _rows_param(self) -> None:
        """The block's row count (M): the first dim of every register tile; the warps split it in m16 tiles."""
        regs = [s for s in n.walk(self.k.body) if isinstance(s, n.Allocate) and s.level == "register"]
        if not regs:
            self.fail(self.k, "no register tile: the CUDA backend translates tiled attention programs")
        first = regs[0].shape[0]
        self.M = self.int_value(first, regs[0], "tile dimension")
        if self.M % 16:
            self.fail(regs[0], f"{tl_expr(first)} = {self.M}: register tiles are split in 16-row MMA tiles")
        if self.M < 16 * self.warps:
            self.warps = self.M // 16
            self.notes.append(f"{self.k.name}: BM = {self.M} rows hold {self.warps} warps' MMA tiles; launched with {self.warps} warps, not warps = {self.warps_asked}")
        if self.M % (16 * self.warps):
            self.fail(regs[0], f"{tl_expr(first)} = {self.M} is not a multiple of 16 x warps = {16 * self.warps}", "each warp owns whole 16-row MMA tiles")
        for r in regs:
            if r.shape[0] != first:
                self.fail(r, f"register tile {r.name} has {tl_expr(r.shape[0])} rows, not {tl_expr(first)}", "every register tile is indexed by the block's query rows")

    # ------------------------------------------------------------------ kernel
    def run(self) -> KernelCode:
        self._rows_param()
        smem = self._layout_shared()
        self.emit(f"constexpr int af_MT = {self.MT};  // m16 tiles per warp: warp w owns rows [w * {16 * self.MT}, (w + 1) * {16 * self.MT})")
        self.emit(f"constexpr int af_NT = {self.warps * 32};  // threads")
        for c, v in self.facts.constants.items():
            self.emit(f"constexpr int {self.name(c, self.k)} = {v};")
        self.emit(f"constexpr int D = {self.D}, Dv = {self.Dv}; (void)D; (void)Dv;")
        self.emit("extern __shared__ __align__(128) unsigned char af_smem[];")
        self.emit("const int af_tid = threadIdx.x, af_warp = af_tid >> 5, af_lane = af_tid & 31;")
        self.emit("const int af_g = af_lane >> 2, af_t = af_lane & 3;  // fragment row group (0..7) and thread in the group (0..3)")
        self.emit("(void)af_warp; (void)af_g; (void)af_t;")
        grid = self._grid()
        self.block(self.k.body)
        return KernelCode(self.k.name, self.lines, self.warps * 32, smem, self.facts.tensors, {t: self.facts.ranks[t] for t in self.facts.tensors},
                          self.facts.formats, self.facts.scalars, grid, self.waits, self.notes, dict(self.facts.params))

    def _grid(self) -> list[str]:
        k = self.k
        hctx = exprs.ExprContext({**{s: s for s in SIZE_ARGS}, "D": str(self.D), "Dv": str(self.Dv),
                                  **{p: str(v) for p, v in self.facts.params.items()}}, file=self.file)
        if not k.grid:
            self.emit("// TL grid: one block")
            return []
        grid_names = {g.name for g in k.grid}
        self.emit(f"// TL grid: {', '.join(f'{g.name} : {tl_expr(g.extent)}' for g in k.grid)} (flattened onto blockIdx.x, {k.grid[-1].name} fastest)")
        self.emit("long long af_pid = blockIdx.x;")
        host = []
        for i, g in enumerate(reversed(k.grid)):
            if n.expr_names(g.extent) & grid_names:
                self.fail(g, f"grid extent of {g.name} depends on another grid axis")
            name = self.name(g.name, g)
            extent = self.dev(g.extent)
            if i == len(k.grid) - 1:
                self.emit(f"const int {name} = (int)af_pid;")
            else:
                self.emit(f"const int {name} = (int)(af_pid % {extent}); af_pid /= {extent};")
            host.append(exprs.host(g.extent, hctx))
            self.scope.names[g.name] = name
        self.emit()
        return list(reversed(host))

    def block(self, body: tuple[n.Stmt, ...]) -> None:
        for s in body:
            fn = getattr(self, "s_" + type(s).__name__, None)
            if fn is None:
                self.fail(s, f"{type(s).__name__} statements have no CUDA translation", "--backend triton translates every TL statement")
            fn(s)

    # ------------------------------------------------------------------ fragment loops
    def frag_loops(self, t: RTile, body: list[str], need_cols: bool = True) -> None:
        """``body`` once per fragment element of ``t``: af_mt, af_nt, af_e; af_qi / af_ki its global row / column."""
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt) {")
        self.depth += 1
        if t.kind == "rows":
            self.emit("#pragma unroll")
            self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
            self.depth += 1
            self.emit(f"const int af_qi = {t.rows or 0} + af_warp * (af_MT * 16) + af_mt * 16 + af_g + af_r * 8; (void)af_qi;")
        else:
            self.emit("#pragma unroll")
            self.emit(f"for (int af_nt = 0; af_nt < {t.ncols // 8}; ++af_nt) {{")
            self.depth += 1
            self.emit("#pragma unroll")
            self.emit("for (int af_e = 0; af_e < 4; ++af_e) {")
            self.depth += 1
            self.emit(f"const int af_qi = {t.rows or 0} + af_warp * (af_MT * 16) + af_mt * 16 + af_g + (af_e >> 1) * 8; (void)af_qi;")
            if need_cols:
                self.emit(f"const int af_ki = {t.cols or 0} + af_nt * 8 + af_t * 2 + (af_e & 1); (void)af_ki;")
        for line in body:
            self.emit(line)
        closes = 2 if t.kind == "rows" else 3
        for _ in range(closes):
            self.depth -= 1
            self.emit("}")

    @staticmethod
    def elem(t: RTile) -> str:
        return f"{t.cname}[af_mt][af_r]" if t.kind == "rows" else f"{t.cname}[af_mt][af_nt][af_e]"

    def declare(self, t: RTile, init: str | None) -> None:
        shape = "[af_MT][2]" if t.kind == "rows" else f"[af_MT][{t.ncols // 8}][4]"
        self.emit(f"float {t.cname}{shape};")
        if init is not None:
            self.frag_loops(t, [f"{self.elem(t)} = {init};"], need_cols=False)

    # ------------------------------------------------------------------ memory
    def s_Allocate(self, s: n.Allocate) -> None:
        self.comment_tl(s)
        name = self.name(s.name, s)
        if s.level == "global":
            if s.tensor not in self.facts.ranks:
                self.fail(s, f"{s.tensor!r} is not a tensor argument")
            if s.pack is not None:  # rows that are (head, position) pairs: not written here, so refused, never ignored
                self.fail(s, "packed-GQA views (Allocate ... pack G) are not translated to CUDA yet", "use --backend triton for packed programs")
            rank = self.facts.ranks[s.tensor]
            if len(s.offset) + len(s.shape) != rank:
                self.fail(s, f"{s.tensor} has {rank} dimensions; offset {len(s.offset)} + shape {len(s.shape)} do not add up")
            ctype = CTYPE[self.facts.formats[s.tensor]]
            const = "const " if s.tensor in ("q", "k", "v", "alibi_slopes") else ""
            terms = "".join(f" + (long long)({self.dev(e)}) * stride_{s.tensor}{i}" for i, e in enumerate(s.offset))
            self.emit(f"{const}{ctype}* {name} = {s.tensor}_ptr{terms};")
            self.scope.views[s.name] = View(s.tensor, s.shape, s.offset, self.facts.formats[s.tensor])
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
        guard = "" if chunks % nt == 0 else f"if (af_c < {chunks}) "
        return [
            "{",
            f"{INDENT}const int af_row0 = {row0}, af_rows = {extent} - af_row0;",
            f"{INDENT}const af_elem* af_src = {s.src} + (long long)af_row0 * {row_stride};",
            f"{INDENT}af_elem* af_dst = {s.dst} + ({slot}) * {sh.slot_elems};",
            "#pragma unroll",
            f"{INDENT}for (int af_i = 0; af_i < {trips}; ++af_i) {{",
            f"{INDENT * 2}const int af_c = af_tid + af_i * af_NT;",
            f"{INDENT * 2}{guard}{{",
            f"{INDENT * 3}const int af_r = af_c / {per_row}, af_col = (af_c % {per_row}) * 8;",
            f"{INDENT * 3}const bool af_in = af_r < af_rows && af_col < {sh.cols};",
            f"{INDENT * 3}af_copy16(af_dst + af_r * {sh.pitch} + af_col, af_in ? af_src + (long long)af_r * {row_stride} + af_col : {s.src}, af_in);",
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
            self.scope.tiles[s.dst].rows = self.dev(n.Binary("*", s.coord[0], s.tile[0]))
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
        self.scope.tiles[s.dst].rows = self.dev(n.Binary("*", s.coord[0], s.tile[0]))

    def _role(self, name: str) -> str | None:
        """'a' or 'b': how the GEMMs of the kernel read register tile ``name``."""
        for g in n.walk(self.k.body):
            if isinstance(g, n.Gemm):
                if g.a == name:
                    return "a"
                if g.b == name:
                    return "b"
        return None

    def _slot_base(self, t: RTile) -> str:
        sh = t.shared
        if sh.slots > 1 and self.pipe is not None:
            return f"({sh.name} + {self.pipe.slot_expr} * {sh.slot_elems})"
        return sh.name

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
            if self.MT * kt * 4 <= Q_REGISTER_BUDGET:
                self.emit(f"// ldmatrix.x4: A fragments of this warp's {16 * self.MT} rows, {kt} k slices of 16, kept in registers")
                self.emit(f"uint32_t {name}[af_MT][{kt}][4];")
                self.emit("#pragma unroll")
                self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
                self.emit("#pragma unroll")
                self.emit(f"for (int af_k = 0; af_k < {kt}; ++af_k)")
                self.emit(f"{INDENT}af_ldsm_x4({name}[af_mt][af_k], {self._slot_base(src)} + (af_warp * af_MT * 16 + af_mt * 16 + (af_lane & 15)) * {sh.pitch} + af_k * 16 + (af_lane >> 4) * 8);")
                self.scope.tiles[s.dst] = RTile("a_regs", name, sh.fmt, ncols=sh.cols_pad, true_cols=sh.cols, rows=src.rows, shared=sh)
            else:
                self.emit(f"// ({self.MT * kt * 4} registers of A fragments would crowd the accumulators: the GEMM reads {s.dst} from {s.src} by ldmatrix per k slice)")
                self.scope.tiles[s.dst] = RTile("a_shared", name, sh.fmt, ncols=sh.cols_pad, true_cols=sh.cols, rows=src.rows, shared=sh)
        elif role == "b":
            self.emit(f"// (ldmatrix per 16-wide k slice inside the GEMM that reads {s.dst}: B fragments never all live in registers)")
            self.scope.tiles[s.dst] = RTile("b_shared", name, sh.fmt, ncols=sh.cols_pad, true_cols=sh.cols, rows=src.rows, shared=sh)
        else:
            self.fail(s, f"{s.dst} is not read by a GEMM: the CUDA backend loads shared tiles into registers only as MMA operands")

    def _store(self, s: n.Copy) -> None:
        view = self.view(s.dst, s)
        src = self.tile(s.src, s)
        rank = self.facts.ranks[view.tensor]
        if s.tile is None or s.coord is None or len(s.tile) != len(view.extents):
            self.fail(s, "a register->global Copy takes one tile size and coordinate per view dimension")
        if self.int_value(s.tile[0], s, "tile dimension") != self.M:
            self.fail(s, f"the stored tile has {tl_expr(s.tile[0])} rows, not the block's {self.M}")
        row0 = self.dev(n.Binary("*", s.coord[0], s.tile[0]))
        extent = self.dev(view.extents[0])
        row = f"{row0} + af_warp * (af_MT * 16) + af_mt * 16 + af_g + af_r * 8"
        if src.kind == "rows" and len(s.tile) == 1:
            self.emit("// lanes with af_t == 0 hold each fragment row's value")
            self.emit("if (af_t == 0) {")
            self.depth += 1
            self.emit("#pragma unroll")
            self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
            self.emit("#pragma unroll")
            self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
            self.emit(f"{INDENT}const int af_row = {row};")
            self.emit(f"{INDENT}if (af_row < {extent}) {s.dst}[(long long)af_row * stride_{view.tensor}{rank - 1}] = {src.cname}[af_mt][af_r];")
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
        self.emit(f"{INDENT * 2}af_store2({s.dst} + (long long)af_row * stride_{view.tensor}{rank - 2} + af_col, {src.cname}[af_mt][af_nt][2 * af_r], {src.cname}[af_mt][af_nt][2 * af_r + 1]);")
        self.emit("}")

    # ------------------------------------------------------------------ compute
    def s_Gemm(self, s: n.Gemm) -> None:
        self.comment_tl(s)
        a, b = self.tile(s.a, s), self.tile(s.b, s)
        if s.a_trans:
            self.fail(s, "a transposed A operand has no mma.sync translation here", "write GEMM A, B^T with A row-major")
        if a.kind not in ("a_regs", "a_shared", "afrag"):
            self.fail(s, f"{s.a} is not an A operand: load it from shared memory to registers, or Reshape it from mma_c to mma_a")
        if b.kind != "b_shared":
            self.fail(s, f"{s.b} is not a B operand loaded from a shared tile")
        bsh = b.shared
        # B^T: b stored (n, k) -> plain ldmatrix; B: stored (k, n) -> ldmatrix.trans
        n_extent = bsh.rows if s.b_trans else bsh.cols_pad
        k_extent = bsh.cols_pad if s.b_trans else bsh.rows
        if a.ncols != k_extent:
            self.fail(s, f"the GEMM's k extents differ: {s.a} has {a.ncols} (padded) columns, {s.b} {k_extent}")
        if n_extent % 16:
            self.fail(s, f"the GEMM's n extent {n_extent} is not a multiple of 16 (ldmatrix.x4 loads two n8 tiles)")
        out_cols = bsh.rows if s.b_trans else bsh.cols
        if s.accumulate:
            acc = self.tile(s.out, s)
            if acc.kind != "acc" or acc.ncols != n_extent:
                self.fail(s, f"{s.out} is not a fragment tile of {n_extent} columns")
            if acc.rows is None:
                acc.rows = a.rows
        else:
            acc = RTile("acc", self.name(s.out, s), "fp32", ncols=n_extent, true_cols=out_cols, rows=a.rows, cols=b.rows if s.b_trans else None)
            self.declare(acc, "0.0f")
            self.scope.tiles[s.out] = acc
        base = self._slot_base(b)
        kt = k_extent // 16
        self.emit("#pragma unroll")
        self.emit(f"for (int af_k = 0; af_k < {kt}; ++af_k) {{")
        self.depth += 1
        if a.kind == "a_shared":
            ash = a.shared
            self.emit("uint32_t af_a[af_MT][4];")
            self.emit("#pragma unroll")
            self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
            self.emit(f"{INDENT}af_ldsm_x4(af_a[af_mt], {self._slot_base(a)} + (af_warp * af_MT * 16 + af_mt * 16 + (af_lane & 15)) * {ash.pitch} + af_k * 16 + (af_lane >> 4) * 8);")
            a_frag = "af_a[af_mt]"
        else:
            a_frag = f"{a.cname}[af_mt][af_k]"
        self.emit("#pragma unroll")
        self.emit(f"for (int af_n = 0; af_n < {n_extent // 16}; ++af_n) {{")
        self.depth += 1
        self.emit("uint32_t af_b[4];")
        if s.b_trans:
            self.emit(f"af_ldsm_x4(af_b, {base} + (af_n * 16 + (af_lane & 7) + (af_lane >> 4) * 8) * {bsh.pitch} + af_k * 16 + ((af_lane >> 3) & 1) * 8);")
        else:
            self.emit(f"af_ldsm_x4_trans(af_b, {base} + (af_k * 16 + (af_lane & 7) + ((af_lane >> 3) & 1) * 8) * {bsh.pitch} + af_n * 16 + (af_lane >> 4) * 8);")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt) {")
        self.emit(f"{INDENT}af_mma({acc.cname}[af_mt][2 * af_n], {a_frag}, af_b[0], af_b[1]);")
        self.emit(f"{INDENT}af_mma({acc.cname}[af_mt][2 * af_n + 1], {a_frag}, af_b[2], af_b[3]);")
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def _names_for(self, t: RTile, expr: n.Expr) -> dict[str, str]:
        wide = multiplies_indices(expr, self.floats)
        w = (lambda x: f"((long long){x})") if wide else (lambda x: x)
        names = {"q_idx": w("af_qi")}
        if t.kind != "rows":
            names["kv_idx"] = w("af_ki")
        if wide:
            for g in ("b", "h"):
                if g in self.scope.names:
                    names[g] = f"((long long){self.scope.names[g]})"
        return names

    def _rounded(self, t: RTile, value: str) -> str:
        return value if t.fmt == "fp32" else f"af_round({value})"

    def s_Elementwise(self, s: n.Elementwise) -> None:
        self.comment_tl(s)
        if s.op not in _ELEMENTWISE:
            self.fail(s, f"Compute {s.op} has no CUDA translation here", "RowMax/RowSum live inside OnlineSoftmax in this backend")
        tiles = [self.scope.tiles[a.id] for a in s.args if isinstance(a, n.Name) and a.id in self.scope.tiles]
        if not tiles:
            self.fail(s, f"Compute {s.op} needs a tile operand")
        first = tiles[0]
        if first.kind not in ("acc", "rows"):
            self.fail(s, f"Compute {s.op} works on fp32 fragment tiles here")
        ops = []
        for a in s.args:
            if isinstance(a, n.Name) and a.id in self.scope.tiles:
                t = self.scope.tiles[a.id]
                if t.kind == first.kind and (t.kind == "rows" or t.ncols == first.ncols):
                    ops.append(self.elem(t))
                elif t.kind == "rows" and first.kind == "acc":
                    ops.append(f"{t.cname}[af_mt][af_e >> 1]")
                else:
                    self.fail(s, f"{a.id} and {first.cname} have different fragment layouts")
            else:
                ops.append(self.dev(a))
        target = s.out if s.out is not None else s.args[0].id
        name = self.name(target, s)
        value = self._rounded(first, _ELEMENTWISE[s.op].format(*ops))
        if target not in self.scope.tiles:
            out = RTile(first.kind, name, first.fmt, ncols=first.ncols, true_cols=first.true_cols, rows=first.rows, cols=first.cols)
            self.declare(out, None)
            self.scope.tiles[target] = out
        out = self.scope.tiles[target]
        self.frag_loops(first, [f"{self.elem(out)} = {value};"], need_cols=False)

    def s_Cast(self, s: n.Cast) -> None:
        self.comment_tl(s)
        src = self.tile(s.src, s)
        fmt = self.k.dtype_map().get(s.dtype, s.dtype)
        if fmt not in ("fp16", "bf16", "fp32"):
            self.fail(s, f"Cast to {fmt} has no CUDA translation here")
        target = s.out or s.src
        name = self.name(target, s)
        if src.kind not in ("acc",) or target != s.src:
            self.fail(s, "Cast works in place on a fragment tile here (Compute Cast P to qkv)")
        self.emit(f"// ({name} becomes {fmt}: the values are rounded where they are packed into MMA operand registers, at the Reshape)")
        src.fmt = fmt

    def s_ScoreMod(self, s: n.ScoreMod) -> None:
        self.comment_tl(s)
        t = self.tile(s.target, s)
        if t.kind != "acc":
            self.fail(s, "ScoreMod works on a score tile of fragments")
        extra = self._names_for(t, s.expr)
        extra["score"] = "af_score"
        value = self.dev(s.expr, extra)
        self.frag_loops(t, [f"const float af_score = {self.elem(t)}; (void)af_score;", f"{self.elem(t)} = {self._rounded(t, f'(float)({value})')};"])

    def s_Mask(self, s: n.Mask) -> None:
        self.comment_tl(s)
        t = self.tile(s.target, s)
        if t.kind != "acc" or t.cols is None:
            self.fail(s, "Mask works on a score tile whose columns are keys (from GEMM Q, K^T)")
        keep = self.dev(s.keep, self._names_for(t, s.keep))
        self.frag_loops(t, [f"if (!({keep})) {self.elem(t)} = -INFINITY;"])

    def s_OnlineSoftmax(self, s: n.OnlineSoftmax) -> None:
        self.comment_tl(s)
        S = self.tile(s.scores, s)
        m, l = self.tile(s.row_max, s), self.tile(s.row_sum, s)
        if S.kind != "acc" or m.kind != "rows" or l.kind != "rows":
            self.fail(s, "OnlineSoftmax takes a 2-d score tile of fragments and two row vectors here", "split-KV combine programs: --backend triton")
        resc = [self.tile(r, s) for r in s.rescale]
        for r, rn in zip(resc, s.rescale):
            if r.kind != "acc":
                self.fail(s, f"{rn} is not a fragment tile")
        out = self.name(s.out, s)
        P = RTile("acc", out, "fp32", ncols=S.ncols, true_cols=S.true_cols, rows=S.rows, cols=S.cols)
        if s.out != s.scores:
            self.emit(f"float {out}[af_MT][{S.ncols // 8}][4];")
        nt = S.ncols // 8
        self.emit("// per fragment row: the row max over this thread's columns, then over the quad (shuffles xor 1, 2)")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
        self.emit("#pragma unroll")
        self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
        self.depth += 1
        self.emit(f"float af_mx = {m.cname}[af_mt][af_r];")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_nt = 0; af_nt < {nt}; ++af_nt)")
        self.emit(f"{INDENT}af_mx = fmaxf(af_mx, fmaxf({S.cname}[af_mt][af_nt][2 * af_r], {S.cname}[af_mt][af_nt][2 * af_r + 1]));")
        self.emit("af_mx = af_quad_max(af_mx);")
        self.emit("const float af_safe = af_mx == -INFINITY ? 0.0f : af_mx;  // nothing visible yet: weights stay 0")
        self.emit(f"const float af_alpha = af_exp({m.cname}[af_mt][af_r] - af_safe);")
        self.emit("float af_sum = 0.0f;")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_nt = 0; af_nt < {nt}; ++af_nt)")
        self.emit("#pragma unroll")
        self.emit("for (int af_c = 0; af_c < 2; ++af_c) {")
        self.emit(f"{INDENT}const float af_p = af_exp({S.cname}[af_mt][af_nt][2 * af_r + af_c] - af_safe);")
        self.emit(f"{INDENT}{out}[af_mt][af_nt][2 * af_r + af_c] = af_p;")
        self.emit(f"{INDENT}af_sum += af_p;")
        self.emit("}")
        if l.partial_sum or True:
            self.emit(f"{l.cname}[af_mt][af_r] = {l.cname}[af_mt][af_r] * af_alpha + af_sum;  // this thread's columns only: quad-reduced where it is read")
            l.partial_sum = True
        for r in resc:
            self.emit("#pragma unroll")
            self.emit(f"for (int af_nt = 0; af_nt < {r.ncols // 8}; ++af_nt) {{ {r.cname}[af_mt][af_nt][2 * af_r] *= af_alpha; {r.cname}[af_mt][af_nt][2 * af_r + 1] *= af_alpha; }}")
        self.emit(f"{m.cname}[af_mt][af_r] = af_mx;")
        self.depth -= 1
        self.emit("}")
        self.scope.tiles[s.out] = P

    def _full_sum(self, l: RTile) -> None:
        if l.partial_sum:
            self.emit(f"// {l.cname}: add up the quad's partial row sums")
            self.emit("#pragma unroll")
            self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
            self.emit("#pragma unroll")
            self.emit(f"for (int af_r = 0; af_r < 2; ++af_r) {l.cname}[af_mt][af_r] = af_quad_sum({l.cname}[af_mt][af_r]);")
            l.partial_sum = False

    def s_Normalize(self, s: n.Normalize) -> None:
        self.comment_tl(s)
        acc, l = self.tile(s.acc, s), self.tile(s.row_sum, s)
        if acc.kind != "acc" or l.kind != "rows":
            self.fail(s, "Normalize takes a fragment tile and a row vector")
        self._full_sum(l)
        out = RTile("acc", self.name(s.out, s), "fp32", ncols=acc.ncols, true_cols=acc.true_cols, rows=acc.rows, cols=acc.cols)
        self.declare(out, None)
        self.frag_loops(acc, [f"const float af_l = {l.cname}[af_mt][af_e >> 1];",
                              f"{self.elem(out)} = af_l > 0.0f ? {self.elem(acc)} / af_l : 0.0f;  // a row that saw nothing gives O = 0"], need_cols=False)
        self.scope.tiles[s.out] = out

    def s_LogSumExp(self, s: n.LogSumExp) -> None:
        self.comment_tl(s)
        m, l = self.tile(s.row_max, s), self.tile(s.row_sum, s)
        if m.kind != "rows" or l.kind != "rows":
            self.fail(s, "LogSumExp takes two row vectors")
        self._full_sum(l)
        out = RTile("rows", self.name(s.out, s), "fp32", rows=m.rows)
        self.declare(out, None)
        self.frag_loops(out, [f"{self.elem(out)} = {l.cname}[af_mt][af_r] > 0.0f ? {m.cname}[af_mt][af_r] + logf({l.cname}[af_mt][af_r]) : -INFINITY;"])
        self.scope.tiles[s.out] = out

    def s_Reshape(self, s: n.Reshape) -> None:
        self.comment_tl(s)
        t = self.tile(s.name, s)
        if (s.src_layout, s.dst_layout) != ("mma_c", "mma_a") or t.kind != "acc":
            self.fail(s, f"Reshape {s.src_layout} -> {s.dst_layout} of {s.name}: only an accumulator tile to the A-operand layout (mma_c -> mma_a) is translated")
        if t.fmt not in ("fp16", "bf16"):
            self.fail(s, f"{s.name} is {t.fmt}: Cast it to the operand format (qkv) before the Reshape")
        if t.fmt != self.fmt_qkv:
            self.fail(s, f"{s.name} is {t.fmt} but the MMAs of this kernel take {self.fmt_qkv}")
        kt = t.ncols // 16
        name = f"af_{t.cname}_a"
        self.emit(f"// C fragments of n8 tiles 2k, 2k+1 are the A fragment of k slice k: rows g / g+8, columns 2t, 2t+1 (+8)")
        self.emit(f"uint32_t {name}[af_MT][{kt}][4];")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_k = 0; af_k < {kt}; ++af_k) {{")
        self.emit(f"{INDENT}{name}[af_mt][af_k][0] = af_pack({t.cname}[af_mt][2 * af_k][0], {t.cname}[af_mt][2 * af_k][1]);")
        self.emit(f"{INDENT}{name}[af_mt][af_k][1] = af_pack({t.cname}[af_mt][2 * af_k][2], {t.cname}[af_mt][2 * af_k][3]);")
        self.emit(f"{INDENT}{name}[af_mt][af_k][2] = af_pack({t.cname}[af_mt][2 * af_k + 1][0], {t.cname}[af_mt][2 * af_k + 1][1]);")
        self.emit(f"{INDENT}{name}[af_mt][af_k][3] = af_pack({t.cname}[af_mt][2 * af_k + 1][2], {t.cname}[af_mt][2 * af_k + 1][3]);")
        self.emit("}")
        self.scope.tiles[s.name] = RTile("afrag", name, t.fmt, ncols=t.ncols, true_cols=t.true_cols, rows=t.rows, cols=t.cols)

    def s_Softmax(self, s: n.Softmax) -> None:
        self.fail(s, "a one-pass Softmax has no CUDA translation here", "use the OnlineSoftmax form the planner writes, or --backend triton")

    # ------------------------------------------------------------------ control
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


def signature(code: KernelCode, scalar_kinds: dict[str, str]) -> list[str]:
    """The kernel's parameters: tensor pointers, their strides (int64), sizes, scalars."""
    params = []
    for t in code.tensors:
        const = "const " if t in ("q", "k", "v", "alibi_slopes") else ""
        params.append(f"{const}{CTYPE[code.formats[t]]}* __restrict__ {t}_ptr")
    for t in code.tensors:
        params += [f"long long stride_{t}{i}" for i in range(code.ranks[t])]
    params += [f"int {s}" for s in SIZE_ARGS]
    params += [f"{'int' if scalar_kinds.get(s) == 'int' else 'float'} {s}" for s in code.scalars]
    return params
