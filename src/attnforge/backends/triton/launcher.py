"""The host side of a generated module: ``launch(q, k, v, o, lse, *, scalars...)``.

It reads the sizes off the tensors, checks every argument (``runtime.check_arguments``),
computes the launch-time values (a split-KV program's split count, by ``splits.split_count`` for
these sizes and the device's SM count), allocates scratch, builds TMA descriptors where the
kernels read through them, and launches each kernel of the program in order on its flattened grid.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...abi import ARG_SHAPES, HEAD_DIM_NAMES, INT_SCALARS, SIZE_ARGS
from ...dtypes import TORCH_NAMES
from ...errors import Position, TranslateError
from ...tl import nodes as n
from ...plan.builtin import one_split_axis
from . import exprs
from .emit import INDENT, stride_names
from .formats import SIGNATURE_TYPE


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
    launch: tuple[str, ...] = ()  # launch-time values (a split count): i32 arguments after the scalars

    def signature(self, stride_one: bool = True) -> tuple[dict[str, str], dict[str, object]]:
        """Triton compile signature and constants: (arg -> type, constexpr arg -> value).

        With ``stride_one`` the innermost stride of every tensor is specialised to 1, as Triton
        does at run time for contiguous rows, so an ahead-of-time compile matches the real one."""
        sig: dict[str, str] = {f"{t}_ptr": "*" + SIGNATURE_TYPE[self.tensor_dtypes[t]] for t in self.tensors}
        for name, tensor, block in self.descriptors:
            sig[name] = f"tensordesc<{SIGNATURE_TYPE[self.tensor_dtypes[tensor]]}[{', '.join(map(str, block))}]>"
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
        sig.update({name: "i32" for name in self.launch})
        for name, value in self.constexprs.items():
            sig[name] = "constexpr"
            const[name] = value
        return sig, const

    def divisible_strides(self, head_dims: tuple[int, ...]) -> frozenset[str]:
        """Strides Triton's JIT will see as multiples of 16 for contiguous tensors of these head
        dims (every stride but the innermost is a multiple of the head dim)."""
        if any(d % 16 for d in head_dims):
            return frozenset()
        return frozenset(name for t in self.tensors for name in stride_names(t, self.ranks[t])[:-1]) - self.unspecialised

    @property
    def unspecialised(self) -> frozenset[str]:
        """Arguments the JIT must not specialise on (``do_not_specialize``): the sizes, window
        lengths and launch-time values (a split count), which change from call to call, and the
        outer strides of the LSE (B, Hq, Sq), which follow Sq. Specialising on them (a value of 1,
        a multiple of 16) would compile a new kernel for new lengths or split counts; the LSE is
        stored one value per row, so knowing its strides are multiples of 16 buys nothing."""
        lse = stride_names("lse", self.ranks["lse"])[:-1] if "lse" in self.tensors else []
        return (frozenset(SIZE_ARGS) | frozenset(s for s in self.scalars if s in INT_SCALARS) | frozenset(lse)
                | frozenset(self.launch))


def launcher(program: n.Program, infos: list[KernelInfo], file: str | None) -> list[str]:
    """``launch()``: the arguments checked, the launch-time values and scratch, each kernel launched in
    turn. A split-KV pair whose second kernel is the planner's merge (``plan.builtin.one_split_axis``)
    launched with one split runs the partial kernel alone, storing into views of o and lse."""
    tensors = [t for t in ARG_SHAPES if any(t in i.tensors for i in infos)]
    scalars: list[str] = []
    for i in infos:
        scalars += [s for s in i.scalars if s not in scalars]
    sig = ", ".join(t for t in ("q", "k", "v", "o", "lse") if t in tensors)
    kw = "".join(f", {s}" for s in scalars) + (", alibi_slopes" if "alibi_slopes" in tensors else "")
    lines = [
        f"def launch({sig}, *{kw}, checked: bool = False, slots: list | None = None) -> None:",
        f'{INDENT}"""Run the program on BHSD-indexed tensors (any strides; BSHD is q.transpose(1, 2)).',
        "",
        f"{INDENT}Writes O into ``o`` (B, Hq, Sq, Dv) and the natural-log log-sum-exp into ``lse`` (B, Hq, Sq, fp32).",
        f"{INDENT}``checked``: the caller has checked these arguments' shapes, dtypes and devices already;",
        f"{INDENT}``slots``: the compiled kernels of earlier calls that specialise alike (``runtime.launch_kernel``).",
        f'{INDENT}"""',
        f"{INDENT}B, Hq, Sq, D = q.shape",
        f"{INDENT}Hkv, Sk = k.shape[1], k.shape[2]",
        f"{INDENT}Dv = v.shape[3]",
        f"{INDENT}if not checked:",
        f"{INDENT * 2}check_arguments(dict({', '.join(f'{t}={t}' for t in tensors)}), HEAD_DIM, HEAD_DIM_V, TENSOR_DTYPES)",
    ]
    for name in ("window_left", "window_right"):
        if name in scalars:
            lines.append(f'{INDENT}{name} = window_bound("{name}", {name}, Sq, Sk)')
    allocated: set[str] = set()
    computed: set[str] = set()
    one_split = one_split_axis(program)  # the second kernel is the planner's merge: one split needs none
    for index, info in enumerate(infos):
        kernel = next(k for k in program.kernels if k.name == info.name)
        names = {**{s: s for s in SIZE_ARGS + HEAD_DIM_NAMES + tuple(info.scalars)}, **{p: str(v) for p, v in info.params.items()}}
        ctx = exprs.ExprContext(names, file=file)
        for v in kernel.launch:
            if v.name not in computed:  # kernels that share a value compute it alike (the checker's TL110): once per call
                computed.add(v.name)
                check_host_name(v, kernel, {k.name for k in program.kernels} | {sc.name for k in program.kernels for sc in k.scratch}, file)
                lines.append(f"{INDENT}# {v.name}: the split count for these sizes on this device, chosen per call (attnforge.splits)")
                lines.append(f"{INDENT}{v.name} = split_count({exprs.host(v.programs, ctx)}, {exprs.host(v.tiles, ctx)}, program_slots(q.device), {v.per_sm})")
        ctx.names.update({name: name for name in computed})
        fresh = [sc for sc in kernel.scratch if sc.name in info.tensors and sc.name not in allocated]
        indent = INDENT
        if fresh and one_split is not None:
            o_part, lse_part = (next(sc.name for sc in kernel.scratch if len(sc.shape) == rank) for rank in (5, 4))
            (nsplit,) = kernel.launch_names()
            lines.append(f"{INDENT}one = {nsplit} == 1  # one split: its partial result is the merge's (plan.builtin.one_split_axis)")
            lines.append(f"{INDENT}if one:  # the partial kernel stores into o and lse (its O store casts to o's format); no merge runs")
            lines.append(f"{INDENT * 2}{o_part}, {lse_part} = o.unsqueeze({one_split}), lse.unsqueeze({one_split})")
            lines.append(f"{INDENT}else:")
            indent = INDENT * 2
        for sc in fresh:
            allocated.add(sc.name)
            shape = ", ".join(exprs.host(e, ctx) for e in sc.shape) + ("," if len(sc.shape) == 1 else "")
            fmt = dict(kernel.dtypes).get(sc.dtype, sc.dtype)
            lines.append(f"{indent}{sc.name} = scratch(torch.empty(({shape}), device=q.device, dtype=torch.{TORCH_NAMES[fmt]}))")
        grid = " * ".join(exprs.host(g.extent, ctx) for g in kernel.grid) or "1"
        if info.persistent:
            lines.append(f"{INDENT}points = {grid}")
            grid = "min(points, program_slots(q.device))"
        for name, tensor, block in info.descriptors:
            lines.append(f"{INDENT}{name} = tma_descriptor({tensor}, \"{tensor}\", {list(block)}, checked=checked)")
        groups = [
            ", ".join(list(info.tensors) + [d[0] for d in info.descriptors]),
            ", ".join(f"*{t}.stride()" for t in info.tensors),
            ", ".join(SIZE_ARGS + info.scalars + info.launch),
        ]
        split_pair = one_split is not None and len(infos) == 2
        if split_pair and index == 1:
            lines.append(f"{INDENT}if not one:")
        at = INDENT * 2 if split_pair and index == 1 else INDENT
        slot = "2 if one else 0" if split_pair and index == 0 else str(index)  # (a kernel storing into o: o's format, its own slot)
        lines.append(f"{at}launch_kernel({info.name}, ({grid},), (")
        lines += [f"{at}{INDENT}{g}," for g in groups if g]
        lines.append(f"{at}), dict({', '.join(f'{c}={v}' for c, v in info.constexprs.items())}),")
        lines.append(f"{at}{INDENT}num_warps={info.num_warps}, num_stages={info.num_stages}, slots=slots, index={slot})")
    return lines


# Names ``launch()`` already binds: a launch-time value of one of these names would overwrite it.
_HOST_NAMES = frozenset({*ARG_SHAPES, *SIZE_ARGS, *HEAD_DIM_NAMES, "checked", "slots", "points", "torch", "triton", "tl",
                         "HEAD_DIM", "HEAD_DIM_V", "TENSOR_DTYPES", "TL_SOURCE", "check_arguments", "launch_kernel",
                         "program_slots", "scratch", "split_count", "tma_descriptor", "window_bound", "window_left", "window_right"})


def check_host_name(v: n.Launch, kernel: n.Kernel, taken: set[str], file: str | None) -> None:
    """A launch-time value is a local of ``launch()``: refuse a name that clashes with another one
    (``taken``: the program's kernel and scratch names; TMA descriptors end in ``_desc``)."""
    if v.name in _HOST_NAMES or v.name in taken or v.name.endswith("_desc"):
        raise TranslateError(f"{kernel.name}: the launch-time value {v.name!r} clashes with a name of the generated launcher",
                             where=Position(v.line, v.col, file), hint="rename it in the TL program (NSPLIT, say)")
