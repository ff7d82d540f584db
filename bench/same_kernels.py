"""Time the kernels of two attnforge versions side by side, in one process and one run.

A refactor must not change speed. ``gen`` writes the timing cases' kernels with whichever
attnforge is on PYTHONPATH (it uses only API every version has); ``time`` loads two such
directories and times each case's two kernels alternately (A, B, A, B, ...), next to SDPA's
cuDNN backend, and prints B / A per case.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=.gpu_old/src:.gpu_deps python3 bench/same_kernels.py gen /tmp/a
    PYTHONPATH=src:.gpu_deps python3 bench/same_kernels.py gen /tmp/b
    PYTHONPATH=src:.gpu_deps python3 bench/same_kernels.py time /tmp/a /tmp/b --out $OUT/same_kernels.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

# (name, dtype, D, causal, B, Hq, Hkv, Sq, Sk): the 1k rows are host-bound, the 4k ones kernel-bound.
CASES = [
    ("mha", "fp16", 64, False, 4, 32, 32, 4096, 4096),
    ("mha", "fp16", 128, True, 4, 16, 16, 4096, 4096),
    ("mha", "bf16", 128, False, 4, 16, 16, 4096, 4096),
    ("mha", "bf16", 128, True, 16, 16, 16, 1024, 1024),
    ("mha", "bf16", 256, False, 4, 8, 8, 4096, 4096),
    ("gqa", "bf16", 128, True, 4, 32, 8, 4096, 4096),
    ("decode", "bf16", 128, False, 64, 32, 8, 1, 4096),
]
ROUNDS = 3


def tag(case: tuple) -> str:
    name, dtype, d, causal, B, Hq, Hkv, Sq, Sk = case
    return f"{name}-{dtype}-d{d}-{'causal' if causal else 'full'}-{B}x{Hq}-{Hkv}x{Sq}x{Sk}"


def gen(out: Path) -> None:
    from attnforge import AttentionSpec, get_target
    from attnforge.generate import generate

    target = get_target("auto")
    for case in CASES:
        name, dtype, d, causal, B, Hq, Hkv, Sq, Sk = case
        spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=d, dtype=dtype, causal=causal)
        result = generate(spec, target, out / tag(case), run_verification=False)
        print(tag(case), "ok" if result.ok else f"FAILED: {result.error}", flush=True)
        if not result.ok:
            sys.exit(1)


def time_both(a: Path, b: Path, out: Path | None) -> None:
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnforge.backends.triton.kernel import GeneratedKernel

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    rows = []
    for case in CASES:
        name, dtype, d, causal, B, Hq, Hkv, Sq, Sk = case
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        kernels = [GeneratedKernel(root / tag(case) / "kernel_triton.py", interpret=False) for root in (a, b)]
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, Hq, Sq, d, device="cuda", dtype=dt, generator=g)
        k = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=dt, generator=g)
        v = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=dt, generator=g)
        outs = [(torch.empty(B, Hq, Sq, d, device="cuda", dtype=dt), torch.empty(B, Hq, Sq, device="cuda", dtype=torch.float32)) for _ in kernels]
        scale = d ** -0.5
        times: list[list[float]] = [[], []]
        for _ in range(ROUNDS):
            for i, kernel in enumerate(kernels):
                o, lse = outs[i]
                times[i].append(bench(lambda: kernel.launch(q, k, v, o, lse, scale=scale)))
        same = bool(torch.equal(outs[0][0], outs[1][0]))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cudnn = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal and Sq == Sk, enable_gqa=Hq != Hkv))
        ta, tb = statistics.median(times[0]), statistics.median(times[1])
        row = dict(case=tag(case), a_ms=times[0], b_ms=times[1], cudnn_ms=cudnn, b_over_a=tb / ta,
                   a_vs_cudnn=cudnn / ta, b_vs_cudnn=cudnn / tb, identical_output=same)
        rows.append(row)
        print(f"{tag(case):40s} A {ta:8.4f} ms  B {tb:8.4f} ms  B/A {tb / ta:5.3f}  cuDNN/A {cudnn / ta:5.2f}  cuDNN/B {cudnn / tb:5.2f}  "
              f"spread A {max(times[0]) / min(times[0]) - 1:4.1%} B {max(times[1]) / min(times[1]) - 1:4.1%}  same O: {same}", flush=True)
    geo = math.exp(statistics.mean(math.log(r["b_over_a"]) for r in rows))
    print(f"geomean B/A (time) {geo:.3f}")
    if out is not None:
        meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, a=str(a), b=str(b), rounds=ROUNDS)
        out.write_text(json.dumps(dict(meta=meta, rows=rows, geomean_b_over_a=geo), indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("out", type=Path)
    t = sub.add_parser("time")
    t.add_argument("a", type=Path)
    t.add_argument("b", type=Path)
    t.add_argument("--out", type=Path)
    ns = ap.parse_args()
    if ns.cmd == "gen":
        gen(ns.out)
    else:
        time_both(ns.a, ns.b, ns.out)


if __name__ == "__main__":
    main()
