"""The CUDA translation manual: how TL maps onto this backend's CUDA C++, for a model asked to
translate a TL program (the paper's stage 2 by an LLM), made from the backend's own parts so it
cannot drift from them: the translation table (``table.TRANSLATION_TABLE``), the prelude's device
helpers (``prelude.PRELUDE``), the kernel ABI (``emit.signature``, ``abi``) and the target's
mma.sync instructions (``targets``).

``attnforge backends --manual cuda [--target T]`` prints it; ``generate --llm ... --translate llm
--backend cuda`` puts it in the model's prompt (``llm.prompts.translate_cuda_prompt``), where the
model writes the kernels only and attnforge the file's head (``llm.cuda_gate``).
"""

from __future__ import annotations

import re

from ...abi import RUNTIME_SCALARS, SIZE_ARGS
from ...targets import Target
from .table import TRANSLATION_TABLE
from .module import KERNEL_MARK, META_PREFIX
from .prelude import PRELUDE

_HELPER = re.compile(r"^(?P<tmpl>template <[^>]*> )?__device__ __forceinline__ (?P<sig>[^{]*?\b(?P<name>af_\w+)\(.*\))\s*\{(?P<rest>.*)$")


def helpers() -> list[tuple[str, str, str]]:
    """(name, signature, what it does) of each device helper in the prelude, in its order; the
    description is the comment on its line or the comment lines just above it."""
    lines = PRELUDE.splitlines()
    out: list[tuple[str, str, str]] = []
    for i, line in enumerate(lines):
        m = _HELPER.match(line)
        if m is None:
            continue
        note = m["rest"].split("//", 1)[1].strip() if "//" in m["rest"] else ""
        j = i - 1
        above: list[str] = []
        while not note and j >= 0 and lines[j].startswith("//"):
            above.insert(0, lines[j][2:].strip())
            j -= 1
        out.append((m["name"], (m["tmpl"] or "") + " ".join(m["sig"].split()), note or " ".join(above)))
    return out


def _path(target: Target | None) -> list[str]:
    if target is None:
        return ["- sm_75 (Turing): `mma.sync.m16n8k8` (two per 16-wide k slice), 16-byte vector loads instead of cp.async, fp16 "
                "only (a bf16 spec is refused: Turing has no bf16 MMA).",
                "- sm_80 and newer (sm_90 included: this backend writes no wgmma): `mma.sync.m16n8k16`, `cp.async` with the TL "
                "pipeline's stages, fp16 and bf16."]
    sync = [i for i in target.mma if i.family == "mma.sync" and set(i.operand_dtypes) & {"fp16", "bf16"}]
    turing = target.cc < (8, 0)
    lines = [f"- {target.name} ({target.product}, {target.sm}): compile with `nvcc -cubin -arch={target.sm} -O3 -std=c++17`; "
             + ("the Turing path (`AF_SM75`): two `mma.sync.m16n8k8` per 16-wide k slice, 16-byte vector loads instead of "
                "cp.async, fp16 only." if turing else
                "`mma.sync.m16n8k16` and `cp.async` with the TL pipeline's stages, fp16 and bf16"
                + (" (no wgmma: this backend writes the sm_80 code)." if target.has_wgmma else "."))]
    lines += [f"- {i.name}: {'/'.join(i.operand_dtypes)} -> {'/'.join(i.acc_dtypes)}" for i in sync]
    lines.append(f"- shared memory: at most {target.smem_per_block_optin} bytes per block (opt-in), "
                 f"{target.regs_per_thread_max} registers per thread; a kernel that spills is refused")
    return lines


def translation_manual(target: Target | None = None) -> str:
    """The manual, in Markdown: the instructions of ``target`` (or of every target), the table, the
    helpers and the ABI a translated kernel must keep."""
    scalars = ", ".join(f"`{s}` ({r.kind}: {r.meaning})" for s, r in RUNTIME_SCALARS.items())
    lines = ["# How TL maps onto CUDA C++ (attnforge's CUDA backend)", "",
             "Made from the backend itself (`attnforge.backends.cuda`: the translation table in `table.py`, the helpers in "
             "`prelude.py`, the ABI in `emit.signature`). A translation keeps the TL program's tiling, masking and arithmetic "
             "and puts each TL statement as a `// TL: ...` comment above the code it became.", "",
             "## The target", "", *_path(target), "",
             "## The translation table", "", "| TL | CUDA C++ |", "|---|---|"]
    lines += [f"| `{tl}` | {cuda} |" for _kind, tl, cuda in TRANSLATION_TABLE]
    lines += ["", "Anything else is refused with a TranslateError naming the statement (e.g. a one-pass Softmax, or a "
              "strategy tma/persistent/ws = 1: use the Triton backend).", "",
              "## The prelude", "",
              "Every file starts with these device helpers (inline PTX wrappers and TL's arithmetic); a kernel body calls them "
              "rather than writing its own PTX. `af_elem` is the operand type (`__half`, or `__nv_bfloat16` under `AF_BF16`).", ""]
    lines += [f"- `{sig}`" + (f": {note}" if note else "") for _name, sig, note in helpers()]
    lines += ["", "## The kernel ABI", "",
              f"- The file's first lines hold `{META_PREFIX.strip()} {{json}}`: the launch facts the loader reads (per kernel: name, "
              "threads, dynamic shared memory bytes, tensors with ranks and formats, scalars, grid extents, the cp.async waits "
              "of each pipelined loop for the static lint), then the prelude; attnforge writes both in front of kernels a model writes.",
              f"- One `extern \"C\" __global__ void __launch_bounds__(THREADS) NAME(...)` per TL kernel, after a `{KERNEL_MARK}NAME` "
              "line; no host code.",
              "- Parameters in this order: each tensor's pointer (`const T* __restrict__ q_ptr` for inputs, `T* __restrict__` "
              "for outputs), then each tensor's strides in elements (`long long stride_q0`, ...), then the sizes "
              + ", ".join(f"`int {s}`" for s in SIZE_ARGS) + ", then the runtime scalars the kernel uses: " + scalars
              + ", then its launch-time values (`int NSPLIT`: a split count the loader computes per call). Scratch tensors "
              "(split-KV partial results) come after the argument tensors, as pointers and strides like them; the loader "
              "allocates them per call and launches a program's kernels in order on one stream.",
              "- The TL grid is flattened onto `blockIdx.x`, its last axis fastest; `threadIdx.x` runs over the `warps` x 32 "
              "threads of the block.",
              "- Offsets of batches and heads are int64; the K/V head of query head h is h // (Hq // Hkv).", ""]
    return "\n".join(lines)
