"""On a GPU: does folding the score scale into exp2 pay off? Times generated prefill kernels as
written (``tl.exp`` of scaled scores) beside two hand-edited variants of the same module:

  exp2   -- S * (scale * log2 e) once, the online softmax in base 2 (exp2), the LSE converted back;
            right for any sign of the scale
  fold   -- the scale not applied to S at all: max(S) * c and exp2(S * c - m) (one FFMA per
            score, as Triton's tutorial and FlashAttention do); right only for a positive scale

    python bench/softmax_variants.py DIR...   (directories written by `attnforge generate`)

Prints each kernel's time per variant (triton.testing.do_bench, median) and the largest
difference of O and LSE from the unedited kernel.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import torch
import triton.testing

LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453


def variant(src: str, kind: str) -> str:
    if kind == "as-is":
        return src
    if kind == "exp2":
        src = src.replace("S = S * scale\n", f"S = S * (scale * {LOG2E})\n")
    else:  # fold
        src = src.replace("        S = S * scale\n", "")
        src = re.sub(r"tl\.maximum\(m_i, tl\.max\(S, axis=1\)\)", f"tl.maximum(m_i, tl.max(S, axis=1) * (scale * {LOG2E}))", src)
        src = src.replace("P = tl.exp(S - m_i_safe[:, None])", f"P = tl.math.exp2(S * (scale * {LOG2E}) - m_i_safe[:, None])")
    src = src.replace("m_i_alpha = tl.exp(m_i - m_i_safe)", "m_i_alpha = tl.math.exp2(m_i - m_i_safe)")
    src = src.replace("P = tl.exp(S - m_i_safe[:, None])", "P = tl.math.exp2(S - m_i_safe[:, None])")
    src = src.replace("m_i + tl.log(l_i)", f"m_i * {LN2} + tl.log(l_i)")
    return src


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    rows = []
    for d in map(Path, sys.argv[1:]):
        report = json.loads((d / "report.json").read_text())
        s = report["spec"]
        B, Hq, Hkv, Sq, Sk, D = s["batch"], s["heads"], s["kv_heads"], s["seqlen_q"], s["seqlen_k"], s["head_dim"]
        dtype = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[s["dtype"]])
        q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        src = (d / "kernel_triton.py").read_text()
        base = None
        row = {"kernel": d.name}
        for kind in ("as-is", "exp2", "fold"):
            path = Path(f"/tmp/{d.name}_{kind}.py")
            path.write_text(variant(src, kind))
            module = load(path, f"{d.name}_{kind}".replace("-", "_"))
            o = torch.empty(B, Hq, Sq, D, device="cuda", dtype=dtype)
            lse = torch.empty(B, Hq, Sq, device="cuda", dtype=torch.float32)
            run = lambda: module.launch(q, k, v, o, lse, scale=D ** -0.5)  # noqa: E731
            run()
            torch.cuda.synchronize()
            if base is None:
                base = (o.clone(), lse.clone())
            row[kind] = triton.testing.do_bench(run, warmup=50, rep=300)
            row[f"{kind}_diff"] = (float((o.float() - base[0].float()).abs().max()), float((lse - base[1]).abs().max()))
        rows.append(row)
        print(f"{row['kernel']:28} as-is {row['as-is'] * 1e3:8.1f} us  exp2 {row['exp2'] * 1e3:8.1f} us ({row['as-is'] / row['exp2']:.3f}x)  "
              f"fold {row['fold'] * 1e3:8.1f} us ({row['as-is'] / row['fold']:.3f}x)  max|dO| {row['fold_diff'][0]:.1e} {row['exp2_diff'][0]:.1e}", flush=True)


if __name__ == "__main__":
    main()
