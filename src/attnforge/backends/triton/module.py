"""Stage 2 for Triton: a checked TL program -> one Triton module (kernels plus a launcher).

Memory model of the generated code:
- a global view (``Allocate X in global (...) at t[i, j]``) is a base pointer whose offset is
  computed in int64 once per program, so batch and head strides never overflow; offsets inside a
  view are int32, which the launcher guarantees by checking every view's span;
- tiles are padded to powers of two (Triton's block shapes): head dims D/Dv become D_PAD/DV_PAD
  and the padding is masked on load and store, so callers never pad;
- elements outside a view read as 0 (as in the TL interpreter) and are never written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import __version__
from ...abi import ARG_SHAPES, SIZE_ARGS
from ...analysis import kernel_facts, scratch_ranks
from ...dtypes import TORCH_NAMES
from ...errors import TranslateError
from ...sizes import HEAD_DIM_MAX, HEAD_DIM_MIN, next_pow2
from ...targets import get_target
from ...tl import nodes as n
from ...tl.printer import kernel as print_kernel
from ...tl.printer import print_program
from ..base import refuse_hopper_form
from . import exprs
from .emit import INDENT, KernelEmitter, stride_names
from .launcher import KernelInfo, launcher
from .rules import refusal

RUNTIME_IMPORTS = "check_arguments", "split_count", "window_bound"
LAUNCH_IMPORTS = "launch_kernel", "program_slots", "scratch", "tma_descriptor"


@dataclass
class TritonModule:
    """The generated source and what the caller needs to know about each kernel in it."""

    source: str
    kernels: list[KernelInfo]


def check_rules(program: n.Program, file: str | None = None) -> None:
    """Refuse a strategy the kernel's target cannot have with this Triton (``rules.RULES``)."""
    for kernel in program.kernels:
        if kernel.target is None:
            continue
        target = get_target(kernel.target)
        params = {p.name: p.value for p in kernel.params}
        for strategy, value in params.items():
            rule = refusal(strategy, target) if value else None
            if rule is not None:
                raise TranslateError(f"{kernel.name}: {rule.reason}; this kernel targets {target.sm}", where=kernel.pos(file), hint=rule.hint)


def translate_kernel(kernel: n.Kernel, scratch: dict[str, int], head_dim: int, head_dim_v: int, file: str | None) -> tuple[list[str], KernelInfo, set[str]]:
    """One TL kernel as a @triton.jit function: its lines, what its launcher needs, and the helper
    functions it calls (the Gluon backend uses it for a split-KV pair's combine kernel too)."""
    facts = kernel_facts(kernel, scratch, file)
    em = KernelEmitter(kernel, facts, head_dim, head_dim_v, file)
    body = em.run()
    constexprs = {"D": head_dim, "Dv": head_dim_v, "D_PAD": next_pow2(head_dim), "DV_PAD": next_pow2(head_dim_v), **facts.constants}
    args = [f"{t}_ptr" for t in facts.tensors] + list(em.descriptors.values())
    for t in facts.tensors:
        args += stride_names(t, facts.ranks[t])
    launch = tuple(v.name for v in facts.launch)
    args += list(SIZE_ARGS) + list(kernel.scalars) + list(launch) + [f"{c}: tl.constexpr" for c in constexprs]
    tl_lines = print_kernel(kernel)
    tl_lines = tl_lines[: tl_lines.index("")] if "" in tl_lines else tl_lines
    doc = [INDENT + '"""TL kernel ' + kernel.name + ':', ""] + [INDENT + line for line in tl_lines] + [INDENT + '"""']
    info = KernelInfo(
        name=kernel.name, tensors=facts.tensors, ranks={t: facts.ranks[t] for t in facts.tensors},
        tensor_dtypes=dict(facts.formats), scalars=facts.scalars, params=dict(facts.params), constexprs=constexprs,
        num_warps=facts.num_warps, num_stages=facts.num_stages,
        descriptors=tuple((name, tensor, (1,) * (facts.ranks[tensor] - len(dims)) + tuple(em.block_value(d) for d in dims))
                          for (tensor, dims), name in em.descriptors.items()),
        persistent=em.persistent, launch=launch,
    )
    unspecialised = ", ".join(f'"{a}"' for a in args if a in info.unspecialised)  # the ahead-of-time compile agrees
    header = [f"@triton.jit(do_not_specialize=({unspecialised}))", f"def {kernel.name}("] + [INDENT + a + "," for a in args] + ["):"]
    return header + doc + body, info, em.helpers


def translate(program: n.Program, *, head_dim: int, head_dim_v: int | None = None, file: str | None = None) -> TritonModule:
    """Triton source for a fully parameterised TL ``program`` specialised to the head dims.

    The program should have passed ``tl.check`` for its target; the translator still refuses
    what Triton cannot express (non-power-of-two tiles, grid extents that depend on other axes,
    strategies ``rules.RULES`` keep off the target) with a TranslateError at the offending statement."""
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    for name, value in (("head_dim", head_dim), ("head_dim_v", head_dim_v)):
        if not HEAD_DIM_MIN <= value <= HEAD_DIM_MAX:
            raise TranslateError(f"{name} = {value} is outside {HEAD_DIM_MIN}..{HEAD_DIM_MAX}", where=file, hint="the head dims an AttentionSpec allows")
    refuse_hopper_form(program, "the Triton backend", file)
    check_rules(program, file)
    scratch = scratch_ranks(program)
    bodies: list[str] = []
    infos: list[KernelInfo] = []
    helpers: set[str] = set()
    for kernel in program.kernels:
        lines, info, used = translate_kernel(kernel, scratch, head_dim, head_dim_v, file)
        bodies += lines + ["", ""]
        infos.append(info)
        helpers |= used
    dtypes = {t: fmt for info in infos for t, fmt in info.tensor_dtypes.items() if t in ARG_SHAPES}
    for t, fmt in dtypes.items():
        if fmt not in TORCH_NAMES:
            raise TranslateError(f"tensor {t} has format {fmt}, which torch has no dtype for", where=file)
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
        "",
        f"from attnforge.backends.triton.launching import {', '.join(LAUNCH_IMPORTS)}",
        f"from attnforge.backends.triton.runtime import {', '.join(RUNTIME_IMPORTS)}",
        "",
        f"HEAD_DIM = {head_dim}",
        f"HEAD_DIM_V = {head_dim_v}",
        "TENSOR_DTYPES = {" + ", ".join(f'"{t}": torch.{TORCH_NAMES[f]}' for t, f in dtypes.items()) + "}",
        "TL_SOURCE = '''\\",
        print_program(program).replace("\\", "\\\\").replace("'''", "\\'\\'\\'") + "'''",
        "",
    ]
    for h in ("floordiv", "floormod", "tanh"):
        if h in helpers:
            src += ["", exprs.HELPER_SOURCE[h]]
    src += ["", *bodies]
    src += launcher(program, infos, file)
    return TritonModule("\n".join(src) + "\n", infos)
