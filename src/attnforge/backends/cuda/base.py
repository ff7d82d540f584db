"""What every statement emitter of the CUDA backend shares: the tile records (shared regions,
register fragments, the pipelined loop), the emitter's state and line writer, names and
expressions as C++, the dispatch of a statement block, and the fragment map (``frag_loops``:
which thread holds which row and column of an mma.sync tile).

``memory.MemoryEmitter`` and ``compute.ComputeEmitter`` add the statements on top of
``EmitterBase``; ``emit.KernelEmitter`` joins them with the kernel-level setup. What the
translator cannot express is refused with a ``TranslateError`` naming the statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from ...abi import INT_SCALARS, SIZE_ARGS
from ...analysis import KernelFacts, Scope, View, base2_softmax
from ...errors import Position, TranslateError
from ...tl import nodes as n
from ...tl.printer import expr as tl_expr
from ...tl.printer import stmt as tl_stmt
from . import exprs

INDENT = "    "
CTYPE = {"fp16": "__half", "bf16": "__nv_bfloat16", "fp32": "float"}
_CPP_KEYWORDS = frozenset("""auto bool break case char const continue default do double else enum extern float for goto if int long
register return short signed sizeof static struct switch typedef union unsigned void volatile while class delete new private
protected public template this throw try catch namespace using virtual friend inline operator typename asm true false nullptr
constexpr decltype static_assert alignas alignof noexcept thread_local""".split())


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


@dataclass(frozen=True)
class Rows:
    """Which global rows a tile holds: tile row i is view row ``first + i`` (C++). In a packed view
    (``Allocate ... pack G``) view row r is head ``head0 + r % G`` (h_idx) at position ``r // G``
    (q_idx): ``pos``/``head`` are those two as C++ templates of the view row ``{r}``."""

    first: str
    pos: str | None = None
    head: str | None = None

    def position(self, row: str) -> str:
        return self.pos.format(r=row) if self.pos else row


@dataclass
class RTile:
    """A register tile, or a register name for a shared tile (an operand ldmatrix reads)."""

    kind: str  # "rows" (BM,) fp32 per row; "acc" (BM, N) mma C fragments; "afrag" mma A fragments;
    #            "a_shared"/"b_shared" an operand read from shared memory by the GEMM; "a_regs" A fragments loaded once
    cname: str
    fmt: str
    ncols: int = 0  # padded columns (acc/afrag), or the k extent
    true_cols: int = 0
    rows: Rows | None = None  # the tile's global rows (q_idx, and h_idx for a packed view)
    cols: str | None = None  # ... of its first global column (kv_idx)
    shared: Shared | None = None
    partial_sum: bool = False  # a row sum each thread holds for its own columns only (quad-reduce before use)
    whole_sum: bool = False  # a row sum every lane of the quad holds whole (a 1-d OnlineSoftmax's): never quad-reduced
    factor: str | None = None  # a folded scale (C++ name of c = scale * log2(e)): the tile holds raw scores where c > 0
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


class EmitterBase:
    """The state of one kernel's translation and the helpers every statement emitter uses."""

    # set by the kernel-level setup (emit.KernelEmitter._check_header)
    fmt_qkv: str
    warps: int
    warps_asked: int

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
        # launch-time values (a split count): int kernel arguments the host computes per call, >= 1
        self.launch = tuple(v.name for v in facts.launch)
        names.update({v: v for v in self.launch})
        self.scope = Scope(names, set(SIZE_ARGS) | {"D", "Dv"} | set(facts.params) | set(self.launch) | {g.name for g in kernel.grid})
        self.floats = frozenset({s for s in kernel.scalars if s not in INT_SCALARS} | {"score"})
        # which online softmaxes run in base 2 with the scale folded into their exp2's FFMA
        self.base2 = base2_softmax(kernel, frozenset(kernel.scalars) | frozenset(facts.params) | frozenset(SIZE_ARGS) | {"D", "Dv"} | set(self.launch))
        self.shared: dict[str, Shared] = {}
        self.pipe: Pipe | None = None
        self.loop_count = 0
        self.rows_param: str | None = None
        self.M = 0

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
        # an element read's indices see the names of the expression around it (h_idx, q_idx)
        ctx = exprs.ExprContext({**self.scope.names, **(extra or {})}, set(self.scope.nonneg), lambda i: self._index(i, extra), self.file, set(self.floats))
        return exprs.device(e, ctx)

    def _index(self, e: n.Index, extra: dict[str, str] | None = None) -> str:
        if e.name not in self.facts.tensors:
            self.fail(e, f"{e.name}[...] reads a tensor this kernel does not take")
        rank = self.facts.ranks[e.name]
        if len(e.args) != rank:
            self.fail(e, f"{e.name} has {rank} dimensions; {e.name}[...] gives {len(e.args)} index(es)")
        terms = " + ".join(f"(long long)({self.dev(a, extra)}) * stride_{e.name}{i}" for i, a in enumerate(e.args))
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

    def block(self, body: tuple[n.Stmt, ...]) -> None:
        for s in body:
            fn = getattr(self, "s_" + type(s).__name__, None)
            if fn is None:
                self.fail(s, f"{type(s).__name__} statements have no CUDA translation", "--backend triton translates every TL statement")
            fn(s)

    # ------------------------------------------------------------------ fragment loops
    def frag_loops(self, t: RTile, body: list[str], need_cols: bool = True) -> None:
        """``body`` once per fragment element of ``t``: af_mt, af_nt, af_e; af_qi / af_ki its global
        row / column, and af_hi the head of a packed row (h_idx)."""
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt) {")
        self.depth += 1
        if t.kind == "rows":
            self.emit("#pragma unroll")
            self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
            self.depth += 1
            self._row_indices(t, "af_r")
        else:
            self.emit("#pragma unroll")
            self.emit(f"for (int af_nt = 0; af_nt < {t.ncols // 8}; ++af_nt) {{")
            self.depth += 1
            self.emit("#pragma unroll")
            self.emit("for (int af_e = 0; af_e < 4; ++af_e) {")
            self.depth += 1
            self._row_indices(t, "(af_e >> 1)")
            if need_cols:
                self.emit(f"const int af_ki = {t.cols or 0} + af_nt * 8 + af_t * 2 + (af_e & 1); (void)af_ki;")
        for line in body:
            self.emit(line)
        closes = 2 if t.kind == "rows" else 3
        for _ in range(closes):
            self.depth -= 1
            self.emit("}")

    def _row_indices(self, t: RTile, half: str) -> None:
        """af_qi (and af_hi for a packed tile) of the fragment row this thread holds: rows g and g + 8."""
        first = t.rows.first if t.rows else "0"
        row = f"{first} + af_warp * (af_MT * 16) + af_mt * 16 + af_g + {half} * 8"
        if t.rows is None or t.rows.pos is None:
            self.emit(f"const int af_qi = {row}; (void)af_qi;")
            return
        self.emit(f"const int af_vr = {row};  // the packed view's row: (head, position) of the group")
        self.emit(f"const int af_qi = {t.rows.position('af_vr')}; (void)af_qi;")
        self.emit(f"const int af_hi = {t.rows.head.format(r='af_vr')}; (void)af_hi;")

    @staticmethod
    def elem(t: RTile) -> str:
        return f"{t.cname}[af_mt][af_r]" if t.kind == "rows" else f"{t.cname}[af_mt][af_nt][af_e]"

    def declare(self, t: RTile, init: str | None) -> None:
        shape = "[af_MT][2]" if t.kind == "rows" else f"[af_MT][{t.ncols // 8}][4]"
        self.emit(f"float {t.cname}{shape};")
        if init is not None:
            self.frag_loops(t, [f"{self.elem(t)} = {init};"], need_cols=False)

    def _slot_base(self, t: RTile) -> str:
        sh = t.shared
        if sh.slots > 1 and self.pipe is not None:
            return f"({sh.name} + {self.pipe.slot_expr} * {sh.slot_elems})"
        return sh.name
