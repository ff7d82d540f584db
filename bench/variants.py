"""Time translator/planner strategies side by side with cuDNN, each variant verified natively first.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=$PWD/src:$PWD/.gpu_deps python3 bench/variants.py --out $OUT
Variants are TL programs from the built-in planner with explicit parameter edits: the K/V loop
split (off-diagonal tiles without the mask), TMA descriptors, persistent programs, tile sizes.
"""

from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnforge import AttentionSpec, get_target
from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.plan.builtin import candidates, prefill_source
from attnforge.tl.parser import parse
from attnforge.backends.triton import translate
from attnforge.verify import CaseShape, verify

CASES = [  # (dtype, D, causal, B, Hq, Hkv, S)
    ("fp16", 64, False, 4, 32, 32, 4096),
    ("fp16", 64, True, 4, 32, 32, 4096),
    ("bf16", 128, False, 4, 16, 16, 4096),
    ("bf16", 128, True, 4, 16, 16, 4096),
    ("bf16", 128, True, 4, 32, 8, 4096),
    ("bf16", 256, False, 4, 8, 8, 4096),
]
# name -> (split, parameter edits applied on top of the planner's first candidate)
VARIANTS = {
    "nosplit": (False, {}),
    "split": (True, {}),
    "split+tma": (True, {"tma": 1}),
    "split+tma+persist": (True, {"tma": 1, "persistent": 1}),
    "split+tma+BN128": (True, {"tma": 1, "BN": 128, "stages": 2}),
    "split+tma+st2": (True, {"tma": 1, "stages": 2}),
    "split+tma+w4": (True, {"tma": 1, "warps": 4}),
}
DT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ns = ap.parse_args()
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    target = get_target("auto")
    rows = []
    for dtype, d, causal, B, Hq, Hkv, S in CASES:
        spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=S, head_dim=d, dtype=dtype, causal=causal)
        case = f"{dtype} D{d} {'causal' if causal else 'full'} {B}x{Hq}/{Hkv}x{S}"
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, Hq, S, d, device="cuda", dtype=DT[dtype], generator=g)
        k = torch.randn(B, Hkv, S, d, device="cuda", dtype=DT[dtype], generator=g)
        v = torch.randn(B, Hkv, S, d, device="cuda", dtype=DT[dtype], generator=g)
        o = torch.empty_like(q)
        lse = torch.empty(B, Hq, S, device="cuda", dtype=torch.float32)
        flops = 4 * B * Hq * S * S * d / (2 if causal else 1)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cudnn = ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv))
        row = {"case": case, "cudnn_tflops": flops / cudnn / 1e9}
        base = candidates(spec, target)[1][0].params
        for name, (split, edits) in VARIANTS.items():
            params = {**base, **edits}
            try:
                module = translate(parse(prefill_source(spec, target, params, split=split)), head_dim=d)
                path = out / f"{case.replace(' ', '_').replace('/', '-')}_{name}.py"
                path.write_text(module.source)
                kernel = GeneratedKernel(path, interpret=False)
                rec = verify(kernel, spec, params, shapes=[CaseShape(1, 2 * (Hq // Hkv), 2, 1000, 1037), CaseShape(1, 4, 4, 777, 1999, "bshd")])
                if not rec.passed:
                    row[name] = f"FAIL {[(c.err_o, c.err_lse, c.error) for c in rec.cases]}"
                    continue
                t = ms(lambda: kernel.launch(q, k, v, o, lse, scale=spec.scale))
                row[name] = flops / t / 1e9
            except Exception:
                row[name] = "ERROR " + traceback.format_exc()[-300:]
        rows.append(row)
        print(json.dumps(row, default=str)[:600], flush=True)
    (out / "variants.json").write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows), indent=1))
    names = list(VARIANTS)
    print(f"\n{'case':34s} {'cuDNN':>6s} " + " ".join(f"{n[:17]:>17s}" for n in names))
    for r in rows:
        cells = [f"{r[n]:8.0f} ({r[n] / r['cudnn_tflops']:.2f})" if isinstance(r.get(n), float) else f"{str(r.get(n))[:17]:>17s}" for n in names]
        print(f"{r['case']:34s} {r['cudnn_tflops']:6.0f} " + " ".join(f"{c:>17s}" for c in cells))


if __name__ == "__main__":
    main()
