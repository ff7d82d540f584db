"""The CUDA C++ backend: TL -> one .cu file of mma.sync kernels (inline PTX for mma.sync,
ldmatrix and cp.async), compiled by nvcc to a cubin for a table target's exact architecture
without a GPU, loaded and launched on torch tensors through CuPy or the CUDA driver API. Split-KV
decode programs (packed GQA, scratch, a split count chosen per call, the combine kernel) too.

Modules: ``emit`` (kernel bodies, the translation table), ``exprs`` (TL expressions as C++),
``prelude`` (the PTX wrappers), ``module`` (assembly and the launch facts), ``compile`` (nvcc,
cache, SASS report, pipeline lint), ``kernel`` (load and launch).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...compile_report import CompileReport
from ..base import Backend, Capabilities, Kernel, Translation
from .module import CudaModule, translate

if TYPE_CHECKING:
    from ...spec import AttentionSpec
    from ...targets import Target
    from ...tl import nodes as n

DTYPES = ("fp16", "bf16")
# The widest V head dim of a packed-GQA (split-KV) program whose kernels compile without spills.
PACKED_MAX_DV = 192


def target_refusal(target: Target) -> str | None:
    if target.cc < (7, 5):
        return f"{target.name} ({target.sm}): nvcc 13 does not compile for it and it has no ldmatrix/mma.sync m16n8; use --backend triton"
    return None


class CudaBackend(Backend):
    name = "cuda"
    source_file = "kernel_cuda.cu"
    mma = "mma_sync"  # on sm_90 too: tiles for mma.sync, not the wgmma rules

    def capabilities(self) -> Capabilities:
        return Capabilities(
            language="CUDA C++ (inline PTX: mma.sync, ldmatrix, cp.async), nvcc -> cubin",
            targets="sm_75 (T4, RTX 8000: mma.sync m16n8k8) to sm_90 (mma.sync m16n8k16; no wgmma)",
            dtypes=DTYPES,
            features=("MHA/GQA/MQA", "causal (both alignments)", "sliding window", "ALiBi", "softcap", "score_mod", "mask_mod",
                      "head dims 8..256 in multiples of 8", "BHSD and BSHD strides", "log-sum-exp",
                      "decode: split-KV (split count per call) with packed GQA"),
            notes=("bf16 needs sm_80+ (Turing tensor cores take fp16): a bf16 spec for sm_75 is refused",
                   "no CPU interpreter: kernels are verified natively on a GPU; on a CPU machine generate with --no-verify",
                   "strategies tma, persistent and ws are refused (mma.sync path only)",
                   "generate --llm --translate llm: the model writes the kernels (llm/cuda_gate gates them), verified on a local GPU"),
        )

    def unsupported(self, spec: AttentionSpec, target: Target) -> str | None:
        if (why := target_refusal(target)) is not None:
            return why
        if spec.dtype not in DTYPES:
            return f"dtype {spec.dtype} (the CUDA backend's MMAs take {', '.join(DTYPES)})"
        if spec.dtype == "bf16" and target.cc < (8, 0):
            return (f"bf16 on {target.name} ({target.sm}): Turing tensor cores have no bf16 MMA; generate with --dtype fp16 "
                    "(the fp16 kernel uses mma.sync m16n8k8 there)")
        for d in (spec.head_dim, spec.head_dim_v):
            if d % 8 or d > 256:
                return f"head dim {d}: the CUDA backend takes multiples of 8 up to 256 (16-byte row copies)"
        from ...plan.builtin import packs_gqa  # the planner's rule for when query heads share a tile

        if packs_gqa(spec) and spec.head_dim_v > PACKED_MAX_DV:
            return (f"packed-GQA decode with head dim V {spec.head_dim_v}: the split-KV combine keeps its accumulator and a split's "
                    f"partial output in registers and spills past {PACKED_MAX_DV} (measured with nvcc 13 for sm_80); use --backend triton")
        return None

    def refused_strategies(self, target: Target) -> dict[str, str]:
        why = "the CUDA backend writes mma.sync kernels with cp.async pointer loads"
        return {"tma": why + " (no TMA descriptors)", "persistent": why + " (one block per grid point)", "ws": why + " (no warp specialisation)"}

    def translate(self, program: n.Program, *, head_dim: int, head_dim_v: int, file: str | None = None) -> Translation:
        module = translate(program, head_dim=head_dim, head_dim_v=head_dim_v, file=file)
        return Translation(module.source, tuple(k.name for k in module.kernels), module)

    def compile(self, translation: Translation, source_path: Path, target: Target, build_dir: Path) -> list[CompileReport]:
        from .compile import compile_for_target

        return compile_for_target(source_path.read_text(), target, build_dir)

    def load(self, source_path: Path, *, interpret: bool | None = None) -> Kernel:
        from .kernel import CudaKernel

        return CudaKernel(source_path, interpret=interpret)

    def versions(self) -> dict[str, str]:
        from .compile import nvcc_version

        # cuda_backend: bumped when the tiles or the emitted code change, so cached kernels are rebuilt
        return {"nvcc": nvcc_version(), "cuda_backend": "3"}


__all__ = ["CudaBackend", "CudaModule", "translate"]
