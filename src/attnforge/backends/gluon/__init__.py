"""The Gluon backend (Hopper, Blackwell): TL in the Hopper form -> one Gluon module whose kernel
streams K/V by TMA into an mbarrier-guarded shared-memory ring from a load warp, while compute
warpgroups issue asynchronous wgmma GEMMs (in ping-pong, with the softmax under the next GEMM when
the TL's schedule parameters say so); on sm_100 the same statements become tcgen05 MMAs into
tensor memory (``tcgen05``). Compiled for sm_90a / sm_100a without a GPU; run natively. Decode is the
split-KV pair (docs/TL.md section 11.7): the partial kernel in the Hopper form, one wgmma warpgroup over
the (packed GQA) rows, and a Triton combine kernel in the same module; sm_90 only.

Modules: ``shape`` (the Hopper-form kernel taken apart), ``emit`` (the module source: kernel frame,
load role, launch), ``compute`` (the compute role: scores, the scheduled tile loop, the epilogue),
``tcgen05`` (the compute role for sm_100), ``writer`` (what they share), ``compile``
(ahead-of-time compile and report), ``kernel`` (load and call), ``runtime`` (TMA descriptors), ``gpucheck`` (the GPU check: mutants, A/B timing).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ...compile_report import CompileReport
from ..base import Backend, Capabilities, Kernel, Translation
from .emit import GluonModule, translate

if TYPE_CHECKING:
    from ...spec import AttentionSpec
    from ...targets import Target
    from ...tl import nodes as n

DTYPES = ("fp16", "bf16")


class GluonBackend(Backend):
    name = "gluon"
    source_file = "kernel_gluon.py"
    tl_form = "hopper"  # the planner writes the Hopper form (roles, rings, barriers) for this backend

    def capabilities(self) -> Capabilities:
        return Capabilities(
            language="Gluon (triton.experimental.gluon 3.6): TMA, mbarrier, wgmma / tcgen05, warp specialisation",
            targets="sm_90 (H100, H200, GH200); sm_100 (B200, GB200: tcgen05 into tensor memory, compiled on the CPU, never run yet)",
            dtypes=DTYPES,
            features=("MHA/GQA/MQA", "causal (both alignments)", "sliding window", "ALiBi", "softcap", "score_mod", "mask_mod",
                      "head dims 16..256 in powers of two (verified on the H200: 64, 128, 256)", "BHSD and BSHD strides (TMA-readable)", "log-sum-exp"),
            notes=("no CPU interpreter: kernels are verified natively on a GPU of their family (sm_90, sm_100); elsewhere generate with --no-verify",
                   "decode: split-KV (the split count chosen per call), packed GQA for Sq <= 16; the partial kernel streams K/V through "
                   "a TMA ring into one wgmma warpgroup (sm_90 only), a Triton kernel in the same module merges the splits",
                   "sm_100: the same TL statements become tcgen05 MMAs into tensor memory, P in tensor memory over S; pingpong and "
                   "overlap are not mapped to it; compiled for sm_100a on the CPU, not yet run or timed on a Blackwell GPU"),
        )

    def unsupported(self, spec: AttentionSpec, target: Target) -> str | None:
        if target.cc[0] not in (9, 10):
            return (f"{target.name} ({target.sm}): the gluon backend writes kernels for sm_90 (wgmma) and sm_100 (tcgen05, compile-checked "
                    "only); use --backend triton")
        if spec.dtype not in DTYPES:
            return f"dtype {spec.dtype} (wgmma kernels here take {', '.join(DTYPES)})"
        from ...plan.builtin import packs_gqa

        if target.cc[0] == 10 and (spec.is_decode or packs_gqa(spec)):
            return ("decode (split-KV, packed GQA when Sq <= 16) on sm_100: its partial kernel is written for wgmma (sm_90) only, "
                    "not mapped to tcgen05 yet; use --backend triton")
        for d in (spec.head_dim, spec.head_dim_v):
            if d < 16 or d > 256 or d & (d - 1):
                return f"head dim {d}: the gluon backend takes powers of two from 16 to 256 (Gluon tensors need power-of-two shapes)"
        if spec.allow_tf32:
            return "allow_tf32 (fp32 GEMM inputs): the gluon backend's wgmma kernels take fp16/bf16"
        return None

    def refused_strategies(self, target: Target) -> dict[str, str]:
        from ...analysis import STRATEGY_PARAMS

        why = "the gluon backend's kernels always load by TMA, in warp-specialised roles the TL states itself"
        refused = {s: why for s in STRATEGY_PARAMS if s != "persistent"}
        if target.cc[0] != 9:  # (a Hopper-form schedule parameter: docs/TL.md section 11.5)
            refused["persistent"] = f"{target.sm}: the gluon backend walks work tiles persistently in its sm_90 (wgmma) prefill kernel only"
        return refused

    def translate(self, program: n.Program, *, head_dim: int, head_dim_v: int, file: str | None = None) -> Translation:
        module = translate(program, head_dim=head_dim, head_dim_v=head_dim_v, file=file)
        return Translation(module.source, module.kernels, module)

    def compile(self, translation: Translation, source_path: Path, target: Target, build_dir: Path) -> list[CompileReport]:
        from .compile import compile_for_target

        module = _import(source_path)
        reports = [compile_for_target(module, target, build_dir)]
        combine = translation.detail.combine
        if combine is not None:  # a split-KV pair's combine kernel: plain Triton, compiled as the Triton backend compiles its kernels
            from ..triton.compile import compile_for_target as compile_triton

            sig, const = combine.signature()
            report, _ = compile_triton(getattr(module, combine.name), sig, const, target, combine.num_warps, combine.num_stages, keep_dir=build_dir,
                                       divisible=combine.divisible_strides((module.HEAD_DIM, module.HEAD_DIM_V)))
            reports.append(report)
        return reports

    def load(self, source_path: Path, *, interpret: bool | None = None) -> Kernel:
        from .kernel import GluonKernel

        return GluonKernel(source_path, interpret=interpret)

    def versions(self) -> dict[str, str]:
        import triton

        return {"triton": triton.__version__, "gluon_backend": "1"}


def _import(path: Path):
    """The generated module, imported for compiling (no GPU is touched at import)."""
    import hashlib

    name = "attnforge_gluon_" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


__all__ = ["GluonBackend", "GluonModule", "translate"]
