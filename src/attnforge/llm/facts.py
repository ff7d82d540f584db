"""What a model must know about the GPU and the request, as plain text for prompts.

``target_facts`` is the hardware context the paper gives its LLM (memory levels, tensor-core
instructions and data types); ``spec_facts`` and ``module_contract`` say what to build and what
the Python module a model writes must look like.
"""

from __future__ import annotations

import json

from ..abi import ARG_SHAPES, RUNTIME_SCALARS, scalar_values
from ..dtypes import KERNEL_DTYPES
from ..errors import TargetError
from ..spec import AttentionSpec
from ..targets import GiB, KiB, MiB, Target, get_target

_TORCH_DTYPE = {"fp16": "torch.float16", "bf16": "torch.bfloat16", "fp32": "torch.float32",
                "fp8e4m3": "torch.float8_e4m3fn", "fp8e5m2": "torch.float8_e5m2"}


def _kib(n: int) -> str:
    return f"{n / KiB:g} KiB"


def target_facts(target: Target | str) -> str:
    """The target's memory levels, limits, peak rates and tensor-core instructions, one fact a line."""
    t = get_target(target) if isinstance(target, str) else target
    lines = [
        f"Target {t.name}: {t.product} ({t.arch}, compute capability {t.cc[0]}.{t.cc[1]}, {t.sm}; "
        f"compile for {t.ptx_arch}); {t.sm_count} SMs" + (f", boost clock {t.boost_clock_mhz} MHz" if t.boost_clock_mhz else ""),
        "Memory levels (slowest to fastest):",
        f"- global: {t.mem_bytes / GiB:g} GiB at {t.mem_bandwidth_gbs:g} GB/s; L2 cache {t.l2_bytes / MiB:g} MiB",
        f"- shared: at most {_kib(t.smem_per_block_optin)} per block (opt-in; {_kib(t.smem_per_block_default)} without), "
        f"{_kib(t.smem_per_sm)} per SM; pipelined buffers count once per stage",
        f"- register: {t.regs_per_sm} 32-bit registers per SM, at most {t.regs_per_thread_max} per thread; "
        f"at most {t.max_threads_per_block} threads per block and {t.max_warps_per_sm} warps per SM",
        "Asynchronous copies: " + ", ".join([
            f"cp.async {'yes' if t.has_cp_async else 'no'}", f"TMA {'yes' if t.has_tma else 'no'}"]),
        "Dense peak TFLOPS: " + ", ".join(f"{k} {v:g}" for k, v in t.peak_tflops.items())
        + " (fp32 is the FMA pipes, the rest tensor cores)",
        "Tensor-core instructions (M x N x K; operand types -> accumulator types):",
    ]
    for i in t.mma:
        m, n, k = i.shape
        note = f"; {i.note}" if i.note else ""
        lines.append(f"- {i.family} m{m}n{n}k{k}: {'/'.join(i.operand_dtypes)} -> {'/'.join(i.acc_dtypes)}{note}")
    operands = sorted(t.mma_operand_dtypes())
    lines.append("Tensor-core operand types: " + ", ".join(operands))
    lines.append(f"Tile granules for GEMM dimensions (mma.sync): M multiple of {t.mma_m_granule()}, N multiple of {t.mma_n_granule()}, "
                 "K multiple of " + ", ".join(f"{_k(t, d)} for {d}" for d in KERNEL_DTYPES))
    missing = [d for d in KERNEL_DTYPES if t.tensor_core_dtype(d, allow_tf32=True) is None]
    if missing:
        lines.append(f"No tensor cores for: {', '.join(missing)} (GEMMs on such operands run on the FMA pipes; TL501 refuses them)")
    return "\n".join(lines)


def _k(t: Target, dtype: str) -> str:
    try:
        return str(t.mma_k_granule(dtype))
    except TargetError:
        return "- (none)"


def spec_facts(spec: AttentionSpec) -> str:
    """The request: the spec's one-line description, its fields as JSON and the scalars a kernel takes."""
    scalars = ", ".join(f"{k} = {v!r}" for k, v in scalar_values(spec).items())
    return "\n".join([
        f"Attention to build: {spec.describe()}",
        "Fields (AttentionSpec.to_dict()):",
        json.dumps(spec.to_dict(), sort_keys=True),
        f"Runtime scalars the kernel receives: {scalars}",
    ])


def module_contract(spec: AttentionSpec) -> str:
    """What a model-written Triton module must define to be loaded, verified and called."""
    scalars = [name for name in scalar_values(spec)]
    kw = ", ".join(scalars) + (", alibi_slopes" if spec.alibi_slopes is not None else "")
    dtype = _TORCH_DTYPE[spec.dtype]
    shapes = "; ".join(f"{name} ({', '.join(dims)})" for name, dims in ARG_SHAPES.items()
                       if name != "alibi_slopes" or spec.alibi_slopes is not None)
    meanings = "; ".join(f"{s} is the {RUNTIME_SCALARS[s].meaning} ({RUNTIME_SCALARS[s].kind})" for s in scalars)
    return "\n".join([
        "The module must define, at top level:",
        f"- HEAD_DIM = {spec.head_dim} and HEAD_DIM_V = {spec.head_dim_v}",
        f'- TENSOR_DTYPES = {{"q": {dtype}, "k": {dtype}, "v": {dtype}, "o": {dtype}, "lse": torch.float32}}',
        f"- def launch(q, k, v, o, lse, *, {kw}) -> None: runs the kernel and writes its results into o and lse.",
        f"Tensor shapes, BHSD-indexed with any strides (BSHD tensors arrive as transposed views): {shapes}.",
        "o is the attention output, lse the natural-log log-sum-exp of each query row's scaled, modified scores "
        "(fp32). A query row that sees no key gets o = 0 and lse = -inf.",
        f"Runtime scalars: {meanings}.",
        "Imports allowed: torch, triton, triton.language (as tl), math, and "
        "`from triton.tools.tensor_descriptor import TensorDescriptor`. Nothing else: no os, sys, files, "
        "subprocesses, network, eval/exec, or names that start with two underscores.",
    ])


def semantics() -> str:
    """attnforge's attention conventions, which every kernel is verified against."""
    return "\n".join([
        "O = softmax(mods(scale * Q K^T)) V per (batch, query head); query head h reads key/value head h // (Hq // Hkv).",
        "A score is modified in this order: scale; softcap (softcap * tanh(s / softcap)); ALiBi "
        "(- slope[h] * |i + Sk - Sq - j|); score_mod; then keys are dropped by the causal mask, the window and mask_mod.",
        "Causal bottom_right: query i sees keys j <= i + Sk - Sq (FlashAttention's convention); top_left: j <= i.",
        "Window (left, right): query i sees keys j with i + Sk - Sq - left <= j <= i + Sk - Sq + right (a missing side is unbounded).",
        "Softmax and both GEMMs accumulate in fp32. A query row that sees no key outputs O = 0 and LSE = -inf.",
    ])
