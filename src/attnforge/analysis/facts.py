"""What one TL kernel needs from its launcher and its translator, read off the program.

Which tensors it touches (kernel arguments first, in ABI order, then scratch), their ranks and
formats, its runtime scalars, its launch-time values (``launch NSPLIT = splits(...)``: integers the
host computes per launch, runtime arguments like the sizes), and its parameters split by meaning:
launch options (``warps``, ``stages``), strategy switches (``tma``, ``persistent``, ``ws``: how a
backend writes the kernel, 0 or 1) and compile-time constants (tile sizes, a fixed ``NSPLIT``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from ..abi import ARG_DTYPE, ARG_SHAPES, arg_format
from ..errors import Position, TranslateError
from ..tl import nodes as n

# Parameters that are launch options rather than kernel constants, with their defaults.
LAUNCH_PARAMS = {"warps": 4, "stages": 2}
# Parameters that choose how a backend writes the kernel (0 off, 1 on), not kernel constants:
#   tma:        read q/k/v tiles through TMA tensor descriptors (sm_90+) instead of pointer loads
#   persistent: one program per SM walks the TL grid, instead of one program per grid point
#   ws:         warp-specialise the pipelined K/V loops (producer and consumer warps)
STRATEGY_PARAMS = ("tma", "persistent", "ws")


@dataclass(frozen=True)
class KernelFacts:
    name: str
    tensors: tuple[str, ...]  # every tensor the kernel reads or writes, arguments first
    ranks: dict[str, int]  # of every tensor the program knows (arguments and all scratch)
    formats: dict[str, str]  # of the tensors in ``tensors``
    scalars: tuple[str, ...]
    params: dict[str, int]
    num_warps: int
    num_stages: int
    strategies: dict[str, bool]
    constants: dict[str, int]  # parameters that are compile-time constants
    launch: tuple[n.Launch, ...] = ()  # values the host computes at launch: runtime integer arguments


def fail(node: n.Node, kernel: str, message: str, hint: str | None = None, file: str | None = None) -> NoReturn:
    raise TranslateError(f"{kernel}: {message}", where=Position(node.line, node.col, file), hint=hint)


def scratch_ranks(program: n.Program) -> dict[str, int]:
    """Scratch tensors are shared by the kernels of a program: their ranks, by name."""
    return {sc.name: len(sc.shape) for k in program.kernels for sc in k.scratch}


def stmt_exprs(s: n.Stmt) -> list[n.Expr]:
    """The expressions a statement evaluates (not those of its body)."""
    if isinstance(s, n.Allocate):
        return list(s.shape) + list(s.offset) + ([s.init] if s.init is not None else []) + ([s.pack] if s.pack is not None else [])
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


def kernel_facts(kernel: n.Kernel, scratch: dict[str, int], file: str | None = None) -> KernelFacts:
    """The facts of a fully parameterised kernel; an open parameter, a strategy switch that is
    not 0 or 1, or a tensor that is neither an argument nor scratch is a TranslateError."""
    params = {p.name: p.value for p in kernel.params}
    for p, v in params.items():
        if v is None:
            fail(kernel, kernel.name, f"parameter {p} is open", "a sketch cannot be translated: give every parameter a value", file)
    for name in STRATEGY_PARAMS:
        if params.get(name, 0) not in (0, 1):
            fail(kernel, kernel.name, f"parameter {name} = {params[name]} is not 0 or 1", f"{name} = 1 turns the strategy on, 0 off", file)
    used: set[str] = set()
    for s in n.walk(kernel.body):
        if isinstance(s, n.Allocate) and s.level == "global":
            used.add(s.tensor)
        for e in stmt_exprs(s):
            used |= {i.name for i in n.indexes(e)}
    order = [a for a in ARG_SHAPES if a in used] + [sc.name for sc in kernel.scratch if sc.name in used]
    for t in sorted(used - set(order)):
        fail(kernel, kernel.name, f"tensor {t!r} is neither a kernel argument nor declared scratch", "arguments: " + ", ".join(ARG_SHAPES), file)
    dtypes = kernel.dtype_map()
    own_scratch = {sc.name: sc for sc in kernel.scratch}
    formats = {t: arg_format(t, dtypes) if t in ARG_DTYPE else dtypes.get(own_scratch[t].dtype, own_scratch[t].dtype) for t in order}
    return KernelFacts(
        name=kernel.name, tensors=tuple(order), ranks={**{a: len(s) for a, s in ARG_SHAPES.items()}, **scratch},
        formats=formats, scalars=tuple(kernel.scalars), params=params,
        num_warps=int(params.get("warps") or LAUNCH_PARAMS["warps"]), num_stages=int(params.get("stages") or LAUNCH_PARAMS["stages"]),
        strategies={s: bool(params.get(s, 0)) for s in STRATEGY_PARAMS},
        constants={p: v for p, v in params.items() if p not in LAUNCH_PARAMS and p not in STRATEGY_PARAMS},
        launch=kernel.launch,
    )
