"""The TL abstract syntax tree: frozen dataclasses, compared without their source positions.

A program is a list of kernels; a kernel is a header (target, data types, parameters, launch-time
values, runtime scalars, launch grid, scratch tensors) and a body of statements. Expressions are shared with
AttentionSpec's score and mask modifiers. ``line``/``col`` are excluded from equality so that
``parse(print(ast)) == ast`` holds whatever the layout of the original text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..errors import Position
from ..splits import DEFAULT_PER_SM

# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Node:
    line: int = field(default=0, compare=False, repr=False, kw_only=True)
    col: int = field(default=0, compare=False, repr=False, kw_only=True)

    def pos(self, file: str | None = None) -> Position:
        return Position(self.line, self.col, file)


@dataclass(frozen=True)
class Num(Node):
    value: int | float


@dataclass(frozen=True)
class Name(Node):
    id: str


@dataclass(frozen=True)
class Unary(Node):
    op: str  # "-" or "not"
    operand: "Expr"


@dataclass(frozen=True)
class Binary(Node):
    op: str  # + - * / // % < <= > >= == != and or
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Call(Node):
    func: str
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class Index(Node):
    """``name[i, j]``: an element of a global tensor (e.g. ``alibi_slopes[h]``)."""

    name: str
    args: tuple["Expr", ...]


Expr = Union[Num, Name, Unary, Binary, Call, Index]

# ---------------------------------------------------------------- header


@dataclass(frozen=True)
class Param(Node):
    """A tuning parameter; ``value is None`` marks it open (a sketch)."""

    name: str
    value: int | None


@dataclass(frozen=True)
class Launch(Node):
    """``launch NAME = splits(PROGRAMS, TILES[, PER_SM])``: an integer the host computes when the kernel is
    launched, by the split-KV rule (``attnforge.splits.split_count``) from the number of programs
    per split, the K/V tiles, the device's SM count and the programs per SM it aims at (default 2).
    Not known when the kernel is compiled."""

    name: str
    programs: "Expr"
    tiles: "Expr"
    per_sm: int = DEFAULT_PER_SM


@dataclass(frozen=True)
class Feature(Node):
    """What the kernel computes, for verification: ``causal = top_left``, ``softcap``, ``mask_mod = (expr)``."""

    name: str
    value: str | Expr | None = None


@dataclass(frozen=True)
class GridAxis(Node):
    name: str
    extent: Expr


@dataclass(frozen=True)
class Scratch(Node):
    """A global tensor the kernels of one program share (e.g. split-KV partial results)."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str


# ---------------------------------------------------------------- statements

LEVELS = ("global", "shared", "register")
LAYOUTS = ("mma_a", "mma_b", "mma_c")
BARRIER = "barrier"  # the level of ``Allocate NAME in barrier``: mbarriers in shared memory (Hopper form)


@dataclass(frozen=True)
class Allocate(Node):
    """A tensor at a memory level. Global ones are views ``tensor[lead...]`` with ``shape`` trailing dims."""

    name: str
    level: str
    shape: tuple[Expr, ...]
    dtype: str | None = None  # shared and register
    tensor: str | None = None  # global: the kernel argument viewed
    offset: tuple[Expr, ...] = ()  # global: indices of the leading dimensions
    init: Expr | None = None  # register: initial value of every element
    pack: Expr | None = None  # global: packs P slices of the last offset's dimension into the first view dimension (row r: slice r % P, row r // P)
    ring: Expr | None = None  # shared: a ring of this many tiles of ``shape``, named NAME[i] (Hopper form)
    count: Expr | None = None  # barrier: arrivals that complete a phase (None: 1); ``shape`` is () or (slots,)


@dataclass(frozen=True)
class BarrierRef(Node):
    """``name`` or ``name[index]``: one mbarrier of a barrier allocation (Hopper form)."""

    name: str
    index: Expr | None = None


@dataclass(frozen=True)
class Copy(Node):
    """Move a tile between levels. ``tile``/``coord`` select the tile of the global side, in tile units."""

    src: str
    src_level: str
    dst_level: str
    dst: str
    tile: tuple[Expr, ...] | None = None
    coord: tuple[Expr, ...] | None = None
    src_index: Expr | None = None  # ``src`` is a ring: the stage read
    dst_index: Expr | None = None  # ``dst`` is a ring: the stage written
    signal: BarrierRef | None = None  # ``async BARRIER``: a TMA copy that arrives on the barrier once it has landed


@dataclass(frozen=True)
class Gemm(Node):
    a: str
    b: str
    out: str
    accumulate: bool
    a_trans: bool = False
    b_trans: bool = False
    is_async: bool = False  # ``... async``: issued, its result may be read only after ``Wait GEMM out``
    a_index: Expr | None = None  # ``a`` is a ring: the stage read
    b_index: Expr | None = None  # ``b`` is a ring: the stage read


@dataclass(frozen=True)
class Elementwise(Node):
    """``Compute Op x, y [and get z]``; without ``get`` the result replaces the first argument."""

    op: str
    args: tuple[Expr, ...]
    out: str | None = None


@dataclass(frozen=True)
class Cast(Node):
    src: str
    dtype: str
    out: str | None = None


@dataclass(frozen=True)
class ScoreMod(Node):
    """Replace every element of a score tile by ``expr`` over (score, b, h, q_idx, kv_idx, ...)."""

    target: str
    expr: Expr


@dataclass(frozen=True)
class Mask(Node):
    """Set elements where ``keep`` is false to -inf."""

    target: str
    keep: Expr


@dataclass(frozen=True)
class Softmax(Node):
    """Whole-row softmax of a tile, in place (the tile must span every key)."""

    target: str


@dataclass(frozen=True)
class OnlineSoftmax(Node):
    """Online-softmax step: update running max/sum, rescale accumulators, get P = exp(S - m_new)."""

    scores: str
    row_max: str
    row_sum: str
    rescale: tuple[str, ...]
    out: str


@dataclass(frozen=True)
class Normalize(Node):
    """``out = acc / row_sum`` per row; rows whose sum is 0 (fully masked) give 0."""

    acc: str
    row_sum: str
    out: str


@dataclass(frozen=True)
class LogSumExp(Node):
    """``out = row_max + log(row_sum)``; rows whose sum is 0 give -inf."""

    row_max: str
    row_sum: str
    out: str


@dataclass(frozen=True)
class Reshape(Node):
    """Change a register tile's layout, e.g. from the MMA accumulator (C) to the A-operand layout."""

    name: str
    src_layout: str
    dst_layout: str


@dataclass(frozen=True)
class Loop(Node):
    var: str
    start: Expr
    stop: Expr
    stages: Expr | None
    body: tuple["Stmt", ...]


# ---------------------------------------------------------------- the Hopper form (docs/TL.md, section 11)


@dataclass(frozen=True)
class Wait(Node):
    """``Wait BARRIER phase P``: block while the barrier's completed phases % 2 == P (mbarrier try_wait.parity)."""

    barrier: BarrierRef
    phase: Expr


@dataclass(frozen=True)
class Arrive(Node):
    """``Arrive BARRIER``: one arrival on the barrier."""

    barrier: BarrierRef


@dataclass(frozen=True)
class WaitGemm(Node):
    """``Wait GEMM NAME``: the asynchronous GEMM that writes ``name`` has finished."""

    name: str


@dataclass(frozen=True)
class Role(Node):
    """``role NAME warps START : STOP [regs R]``: a warp-specialised partition of the kernel's warps
    (half-open range), with its register budget per thread (setmaxnreg) when given."""

    name: str
    warp_start: Expr
    warp_stop: Expr
    regs: int | None
    body: tuple["Stmt", ...]


Stmt = Union[Allocate, Copy, Gemm, Elementwise, Cast, ScoreMod, Mask, Softmax, OnlineSoftmax, Normalize, LogSumExp, Reshape, Loop,
             Wait, Arrive, WaitGemm, Role]
# Statements only the Hopper form has (besides the Hopper fields of Allocate, Copy and Gemm).
HOPPER_STATEMENTS = (Role, Wait, Arrive, WaitGemm)


@dataclass(frozen=True)
class Kernel(Node):
    name: str
    target: str | None = None
    computes: tuple[Feature, ...] = ()
    dtypes: tuple[tuple[str, str], ...] = ()
    params: tuple[Param, ...] = ()
    scalars: tuple[str, ...] = ()
    grid: tuple[GridAxis, ...] = ()
    scratch: tuple[Scratch, ...] = ()
    body: tuple[Stmt, ...] = ()
    launch: tuple[Launch, ...] = ()  # values the host computes at launch (after ``body``: positional construction stays as it was)

    def dtype_map(self) -> dict[str, str]:
        return dict(self.dtypes)

    def param_map(self) -> dict[str, int | None]:
        return {p.name: p.value for p in self.params}

    def feature_map(self) -> dict[str, str | Expr | None]:
        return {f.name: f.value for f in self.computes}

    def open_params(self) -> list[Param]:
        return [p for p in self.params if p.value is None]

    def launch_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.launch)

    def declares(self, name: str) -> bool:
        """Whether ``name`` is a parameter or a launch-time value of this kernel."""
        return name in self.param_map() or name in self.launch_names()


@dataclass(frozen=True)
class Program(Node):
    kernels: tuple[Kernel, ...]
    doc: str = ""  # the leading comment block, without the '# ' markers

    def declares(self, name: str) -> bool:
        """Whether some kernel declares ``name`` as a parameter or a launch-time value (a split-KV
        program declares NSPLIT, whichever it is)."""
        return any(k.declares(name) for k in self.kernels)


def walk(body: tuple[Stmt, ...]):
    """Every statement of a body, loops and roles included, in program order."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (Loop, Role)):
            yield from walk(stmt.body)


def roles(kernel: Kernel) -> list[Role]:
    """The kernel's roles (top level only), in declaration order; empty for a kernel without roles."""
    return [s for s in kernel.body if isinstance(s, Role)]


def hopper_statement(kernel: Kernel) -> Node | None:
    """The first statement of the Hopper form in ``kernel`` (role, barrier, ring, async copy or
    GEMM, Wait, Arrive), or None: what only a translator for Hopper-native code can express."""
    for s in walk(kernel.body):
        if isinstance(s, HOPPER_STATEMENTS):
            return s
        if isinstance(s, Allocate) and (s.level == BARRIER or s.ring is not None):
            return s
        if isinstance(s, Copy) and (s.signal is not None or s.src_index is not None or s.dst_index is not None):
            return s
        if isinstance(s, Gemm) and (s.is_async or s.a_index is not None or s.b_index is not None):
            return s
    return None


def substitute(e: Expr, name: str, by: Expr) -> Expr:
    """``e`` with every free ``name`` replaced by ``by`` (function names and indexed tensors stay)."""
    if isinstance(e, Name):
        return by if e.id == name else e
    if isinstance(e, Unary):
        return Unary(e.op, substitute(e.operand, name, by))
    if isinstance(e, Binary):
        return Binary(e.op, substitute(e.left, name, by), substitute(e.right, name, by))
    if isinstance(e, Call):
        return Call(e.func, tuple(substitute(a, name, by) for a in e.args))
    if isinstance(e, Index):
        return Index(e.name, tuple(substitute(a, name, by) for a in e.args))
    return e


def expr_names(expr: Expr) -> set[str]:
    """The free names an expression reads (function names excluded; indexed tensors included)."""
    if isinstance(expr, Name):
        return {expr.id}
    if isinstance(expr, Num):
        return set()
    if isinstance(expr, Unary):
        return expr_names(expr.operand)
    if isinstance(expr, Binary):
        return expr_names(expr.left) | expr_names(expr.right)
    if isinstance(expr, (Call, Index)):
        names = {expr.name} if isinstance(expr, Index) else set()
        for a in expr.args:
            names |= expr_names(a)
        return names
    raise TypeError(f"not an expression: {expr!r}")


def indexes(expr: Expr) -> list[Index]:
    """Every ``name[...]`` element read inside an expression, outermost first."""
    if isinstance(expr, Index):
        return [expr] + [i for a in expr.args for i in indexes(a)]
    if isinstance(expr, Unary):
        return indexes(expr.operand)
    if isinstance(expr, Binary):
        return indexes(expr.left) + indexes(expr.right)
    if isinstance(expr, Call):
        return [i for a in expr.args for i in indexes(a)]
    return []
