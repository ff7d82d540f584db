"""Compile a generated Triton kernel for a table target, without a GPU.

Triton compiles all the way to a cubin on a CPU-only machine when it is handed an explicit
``GPUTarget``; nothing needs a driver until the kernel is loaded. The report is read off the
PTX and cubin by ``attnforge.compile_report``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ...compile_report import FIT_HINT, CompileReport, keep, report_for, shared_error
from ...errors import CompileError, DoesNotFitError, TargetError
from ...targets import Target


def _full_signature(fn: Any, signature: dict[str, str], constexprs: dict[str, Any]) -> dict[str, str]:
    """Triton wants every argument in order; constexpr ones may be left out by the caller."""
    names = list(fn.arg_names)
    unknown = sorted((set(signature) | set(constexprs)) - set(names))
    missing = [n for n in names if n not in signature and n not in constexprs]
    if unknown or missing:
        raise TargetError(f"signature does not match kernel {fn.__name__}({', '.join(names)})",
                          where=f"compile {fn.__name__}",
                          hint=(f"unknown: {', '.join(unknown)}; " if unknown else "")
                          + (f"missing: {', '.join(missing)}" if missing else ""))
    return {n: "constexpr" if n in constexprs else signature[n] for n in names}


def _alignment_attrs(signature: dict[str, str], divisible: frozenset[str] = frozenset()) -> dict[tuple[int, ...], list[list[Any]]]:
    """Mark pointers 16-byte aligned and the ``divisible`` integers multiples of 16, as Triton's
    JIT does at launch for torch tensors and such values; without it the loads cannot be
    vectorised and cp.async/TMA pipelining is not emitted."""
    return {(i,): [["tt.divisibility", 16]] for i, (name, ty) in enumerate(signature.items())
            if ty.startswith("*") or (name in divisible and ty == "i32")}


def compile_for_target(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], target: Target,
                       num_warps: int, num_stages: int, keep_dir: Path | None = None, *,
                       aligned_pointers: bool = True, divisible: frozenset[str] = frozenset()) -> tuple[CompileReport, object]:
    """Compile `fn` (an @triton.jit function) for `target`; return the report and Triton's
    CompiledKernel. `signature` maps argument names to Triton types ("*bf16", "i32", "fp32";
    constexpr arguments may be omitted); `constexprs` maps names to values; `divisible` names
    integer arguments to compile as multiples of 16 (the specialisation Triton's JIT makes for
    such values at launch, e.g. row strides of contiguous tensors). With keep_dir the
    PTX and cubin are written there as <kernel>.<target>.ptx/.cubin."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    sig = _full_signature(fn, signature, constexprs)
    attrs = _alignment_attrs(sig, divisible) if aligned_pointers else None
    src = ASTSource(fn, sig, dict(constexprs), attrs)
    # Triton picks the "a" arch (sm_90a, sm_100a) itself for cc >= 90.
    gpu = GPUTarget("cuda", target.cc[0] * 10 + target.cc[1], 32)
    start = time.perf_counter()
    try:
        kernel = triton.compile(src, target=gpu, options={"num_warps": num_warps, "num_stages": num_stages})
    except (OutOfResources, CompilationError) as e:
        oor = e if isinstance(e, OutOfResources) else e.__cause__
        if isinstance(oor, OutOfResources) and oor.name == "shared memory":
            # Some Triton versions reject shared memory at compile time: report it as check_fits does.
            raise DoesNotFitError(shared_error(fn.__name__, int(oor.required), target),
                              where=f"compile {fn.__name__} for {target.name}", hint=FIT_HINT) from e
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise CompileError(f"Triton cannot compile {fn.__name__} for {target.sm}: {first}", where=f"compile {fn.__name__} for {target.name}",
                           hint="the full compiler message is in the exception's __cause__; report a translator bug if the TL is valid") from e
    seconds = time.perf_counter() - start
    ptx: str = kernel.asm["ptx"]
    cubin: bytes = kernel.asm["cubin"]
    name: str = kernel.metadata.name
    if keep_dir is not None:
        keep(Path(keep_dir), name, target, ptx, cubin)
    has_dot = re.search(r"\btt\.dot\b", kernel.asm["ttir"]) is not None
    report = report_for(name, target, ptx, cubin, has_dot=has_dot, num_warps=num_warps, num_stages=num_stages,
                        shared_bytes=int(kernel.metadata.shared), compile_seconds=seconds)
    return report, kernel
