"""The Triton backend: TL -> one Triton module (kernels and a host launcher), compiled ahead of
time for any table target, run by Triton's JIT on a GPU or by its interpreter on a CPU.

Modules: ``emit`` (kernel bodies), ``exprs`` (TL expressions as Triton), ``launcher`` (the host
side), ``module`` (assembly), ``rules`` (what Triton cannot do where), ``compile`` (ahead-of-time
compile), ``kernel`` (load and call), ``runtime`` (what generated modules call at launch),
``interpreter`` (Triton's CPU interpreter, fixed for bf16).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...analysis import STRATEGY_PARAMS
from ...compile_report import CompileReport
from ...dtypes import KERNEL_DTYPES
from ..base import Backend, Capabilities, Kernel, Translation
from .launcher import KernelInfo
from .module import TritonModule, translate
from .rules import refusal

if TYPE_CHECKING:
    from ...spec import AttentionSpec
    from ...targets import Target
    from ...tl import nodes as n


class TritonBackend(Backend):
    name = "triton"
    source_file = "kernel_triton.py"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            language="Triton 3.6 (Python)",
            targets="every table target (sm_70 .. sm_100); tensor cores from sm_80 on",
            dtypes=KERNEL_DTYPES,
            features=("MHA/GQA/MQA", "causal (both alignments)", "sliding window", "ALiBi", "softcap", "score_mod", "mask_mod",
                      "decode (split-KV)", "any head dim 16..512", "BHSD and BSHD strides", "log-sum-exp"),
            notes=("Triton emits no tensor-core instructions on sm_75 (T4, RTX 8000): GEMMs run on FMA pipes there",
                   "strategies: " + ", ".join(STRATEGY_PARAMS) + " (tma needs sm_90+; ws does not compile on sm_90 with Triton 3.6)"),
        )

    def unsupported(self, spec: AttentionSpec, target: Target) -> str | None:
        if spec.dtype not in KERNEL_DTYPES:
            return f"dtype {spec.dtype} (Triton kernels take {', '.join(KERNEL_DTYPES)})"
        return None

    def refused_strategies(self, target: Target) -> dict[str, str]:
        return {s: rule.reason for s in STRATEGY_PARAMS if (rule := refusal(s, target)) is not None}

    def translate(self, program: n.Program, *, head_dim: int, head_dim_v: int, file: str | None = None) -> Translation:
        module = translate(program, head_dim=head_dim, head_dim_v=head_dim_v, file=file)
        return Translation(module.source, tuple(i.name for i in module.kernels), module)

    def compile(self, translation: Translation, source_path: Path, target: Target, build_dir: Path) -> list[CompileReport]:
        from .compile import compile_for_target
        from .kernel import GeneratedKernel

        module: TritonModule = translation.detail
        loaded = GeneratedKernel(source_path, interpret=False)
        head_dims = (loaded.head_dim, loaded.head_dim_v)
        reports = []
        for info in module.kernels:
            sig, const = info.signature()
            report, _ = compile_for_target(getattr(loaded.module, info.name), sig, const, target, info.num_warps, info.num_stages,
                                           keep_dir=build_dir, divisible=info.divisible_strides(head_dims))
            reports.append(report)
        return reports

    def load(self, source_path: Path, *, interpret: bool | None = None) -> Kernel:
        from .kernel import GeneratedKernel

        return GeneratedKernel(source_path, interpret=interpret)

    def versions(self) -> dict[str, str]:
        import triton

        return {"triton": triton.__version__}


__all__ = ["TritonBackend", "KernelInfo", "TritonModule", "translate"]
