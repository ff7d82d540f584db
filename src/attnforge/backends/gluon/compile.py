"""Compile a generated Gluon module for a table target without a GPU (an explicit ``GPUTarget``
takes Triton to a cubin on a CPU machine), and report what the kernel became: registers and spills
per partition, shared memory, and the Hopper instructions that must be there (wgmma, TMA bulk
tensor copies, mbarrier waits, setmaxnreg for the roles' register budgets)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ...compile_report import FIT_HINT, CompileReport, keep, report_for, shared_error
from ...errors import CompileError, DoesNotFitError, TargetError
from ...targets import Target

# What a Hopper-form kernel's PTX must contain, per the GPU family it is written for (the module's
# ARCH): without them it is not the kernel the TL describes.
_COMMON_PTX = {"tma": r"\bcp\.async\.bulk\.tensor\b", "mbarrier": r"\bmbarrier\.try_wait\b", "setmaxnreg": r"\bsetmaxnreg\b"}
REQUIRED_PTX = {
    "sm_90": {"wgmma": r"\bwgmma\.mma_async\b", **_COMMON_PTX},
    "sm_100": {"tcgen05.mma": r"\btcgen05\.mma\b", "tcgen05.ld": r"\btcgen05\.ld\b", "tcgen05.commit": r"\btcgen05\.commit\b", **_COMMON_PTX},
}
ARCH_MAJOR = {"sm_90": 9, "sm_100": 10}


def _signature(module: ModuleType, target_dtype: Any, scale_positive: bool) -> tuple[dict[str, str], dict[str, Any]]:
    """Triton types for the kernel's arguments, from descriptors built on CPU tensors (a
    descriptor's type carries its block and layout; no GPU is touched)."""
    import torch
    from triton.runtime.jit import mangle_type

    fn = getattr(module, module.KERNEL)
    sig: dict[str, str] = {}
    for name in fn.arg_names:
        if name.endswith("_desc"):
            t = name[: -len("_desc")]
            block = module.DESC_BLOCKS[t]
            probe = torch.empty((1, 1, max(block[2], 16), block[3]), dtype=target_dtype)
            from .runtime import tma_descriptor

            sig[name] = mangle_type(tma_descriptor(probe, t, block))
        elif name in ("q", "o"):  # (q: where the compute role copies Q by pointer loads)
            sig[name] = {"torch.float16": "*fp16", "torch.bfloat16": "*bf16"}[str(target_dtype)]
        elif name in ("lse", "alibi_slopes", *getattr(module, "SCRATCH", ())):
            sig[name] = "*fp32"
        elif name == "counters":  # a split-KV kernel that merges its own splits (gluon/merge.py)
            sig[name] = "*i32"
        elif name in module.FLOAT_ARGS:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    # the softmax scale's sign is a specialisation (the launch passes scale > 0): compile the usual one
    sig["SCALE_POSITIVE"] = "constexpr"
    const = {"SCALE_POSITIVE": scale_positive}
    if "MERGE" in fn.arg_names:  # the launch of several splits, whose last merges them (one split: without the merge)
        sig["MERGE"] = "constexpr"
        const["MERGE"] = True
    return sig, const


def compile_for_target(module: ModuleType, target: Target, keep_dir: Path | None = None, *, scale_positive: bool = True) -> CompileReport:
    """Compile the module's kernel for ``target`` (sm_90: sm_90a); the report says what it became.
    ``scale_positive``: which specialisation of the scale's sign (the launch picks it per call)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.errors import CompilationError
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.errors import OutOfResources

    arch = getattr(module, "ARCH", "sm_90")
    if target.cc[0] != ARCH_MAJOR[arch]:
        raise TargetError(f"{module.KERNEL} is written for {arch} (its TL says target {arch}); {target.name} is {target.sm}",
                          where=f"compile {module.KERNEL} for {target.name}", hint=f"plan for {target.name}: attnforge generate --target {target.name} --backend gluon")
    fn = getattr(module, module.KERNEL)
    sig, const = _signature(module, module.TENSOR_DTYPES["q"], scale_positive)
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, ty) in enumerate(sig.items()) if ty.startswith("*")}
    src = GluonASTSource(fn, sig, const, attrs)
    gpu = GPUTarget("cuda", target.cc[0] * 10 + target.cc[1], 32)
    start = time.perf_counter()
    try:
        nreg = getattr(module, "MAXNREG", None)  # the TL's occupancy: the launch's maxnreg, compiled alike
        kernel = triton.compile(src, target=gpu, options={"num_warps": int(module.WG_WARPS), **({"maxnreg": nreg} if nreg else {})})
    except (OutOfResources, CompilationError, RuntimeError) as e:  # (layout verifiers raise RuntimeError)
        oor = e if isinstance(e, OutOfResources) else e.__cause__
        if isinstance(oor, OutOfResources) and oor.name == "shared memory":
            raise DoesNotFitError(shared_error(module.KERNEL, int(oor.required), target), where=f"compile {module.KERNEL} for {target.name}",
                                  hint=FIT_HINT) from e
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise CompileError(f"Gluon cannot compile {module.KERNEL} for {target.sm}: {first}", where=f"compile {module.KERNEL} for {target.name}",
                           hint="the full compiler message is in the exception's __cause__; report a translator bug if the TL is valid") from e
    seconds = time.perf_counter() - start
    ptx: str = kernel.asm["ptx"]
    missing = [tag for tag, pat in REQUIRED_PTX[arch].items() if not re.search(pat, ptx)]
    if missing:
        raise TargetError(f"the compiled {module.KERNEL} has no {', '.join(missing)} instructions: it is not the {arch} kernel its TL describes",
                          where=f"compile {module.KERNEL} for {target.name}", hint="report a translator bug with the TL")
    name: str = kernel.metadata.name
    if keep_dir is not None:
        keep(Path(keep_dir), name, target, ptx, kernel.asm["cubin"])
    return report_for(name, target, ptx, kernel.asm["cubin"], has_dot=True, num_warps=int(module.WG_WARPS), num_stages=int(module.stages),
                      shared_bytes=int(kernel.metadata.shared), compile_seconds=seconds)
