"""Split-KV decode sweep for the CUDA backend on the local GPU: for the bench's decode rows (bf16,
GQA 32/8, D=128, Sq=1), each candidate (BN, stages) of the planner's packed-GQA decode program
translated by the CUDA backend, compiled in parallel, launched with NSPLIT from the split rule at
several occupancy targets (programs per SM), checked against SDPA's math backend in fp32, and timed
in GB/s of Q, K and V beside SDPA's cuDNN and flash backends and attnforge's Triton decode, in the
same run: each call captured in a CUDA graph and the replays timed (do_bench median, rounds in
turns), so the kernels are timed, not the host's work to issue them (a direct CudaKernel call
takes about 0.3 ms of host time, as long as the kernels). An exploration tool like bench/cuda_tiles.py.

    PYTHONPATH=src:.gpu_deps python3 bench/cuda_decode_tiles.py --out OUT [--jobs 12]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROWS = {"decode-b64-sk4k": (64, 32, 8, 4096), "decode-b8-sk32k": (8, 32, 8, 32768)}
CANDIDATES = [(64, 2), (64, 3), (64, 4), (32, 2), (32, 3), (32, 4), (128, 2)]  # (BN, stages); BM = 16: the 4 packed rows
PER_SM = (2, 4, 8)  # programs per SM the split count aims at (the shipped rule: 2)


def build(B: int, Hq: int, Hkv: int, Sk: int, bn: int, stages: int, workdir: Path) -> Path:
    from attnforge.backends.cuda import CudaBackend
    from attnforge.plan.builtin import source_for
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.tl import parse

    spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, head_dim=128, dtype="bf16", seqlen_q=1, seqlen_k=Sk)
    text = source_for(spec, get_target("h200"), "decode", dict(BM=16, BN=bn, warps=4, stages=stages))
    path = workdir / f"dec_{bn}_{stages}.cu"
    path.write_text(CudaBackend().translate(parse(text), head_dim=128, head_dim_v=128).source)
    return path


def row_inputs(B: int, Hq: int, Hkv: int, Sk: int):
    """A decode row's q, k, v (bf16, D = 128, Sq = 1, seeded), its scale, its GB of Q, K and V, and the fp32
    reference from SDPA's math backend."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q = torch.randn(B, Hq, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, Sk, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, Sk, 128, device="cuda", dtype=torch.bfloat16)
    scale = 1 / math.sqrt(128)
    gbytes = (q.numel() + k.numel() + v.numel()) * 2 / 1e9
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale, enable_gqa=True)
    return q, k, v, scale, gbytes, ref


def captured(f):
    """One call of ``f`` in a CUDA graph (after two warm-up calls on a side stream)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        f()
        f()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        f()
    return graph


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--rep-ms", type=int, default=40)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    import attnforge
    from attnforge.backends.cuda import kernel as cuda_kernel
    from attnforge.backends.cuda.compile import compile_cubin
    from attnforge.backends.cuda.kernel import CudaKernel

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cuda_decode_"))
    paths = {c: build(*ROWS["decode-b64-sk4k"], *c, work) for c in CANDIDATES}  # one source serves every B and Sk
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda p: compile_cubin(p.read_text(), "sm_90"), paths.values()))
    shipped_rule = cuda_kernel.split_count
    results = []
    for r, (B, Hq, Hkv, Sk) in ROWS.items():
        q, k, v, scale, gbytes, ref = row_inputs(B, Hq, Hkv, Sk)

        def sdpa(backend):
            def f():
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
            return f
        provs = {"cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "flash": sdpa(SDPBackend.FLASH_ATTENTION),
                 "triton": lambda: attnforge.attention(q, k, v, backend="triton")}
        rules = {}
        for c, path in paths.items():
            kern = CudaKernel(path)
            for per_sm in PER_SM:
                name = f"BN{c[0]}-st{c[1]}-x{per_sm}"

                def rule(programs, tiles, sm, per_sm=per_sm):
                    wanted = math.ceil(per_sm * max(1, sm) / max(1, programs))
                    return 1 << (max(1, min(tiles, wanted, 64)) - 1).bit_length()
                rules[name] = rule
                cuda_kernel.split_count = rule
                o, _ = kern(q, k, v, scale=scale)
                torch.cuda.synchronize()
                results.append({"row": r, "cand": name, "err": float((o.float() - ref).abs().max())})

                def call(kern=kern, rule=rule):
                    cuda_kernel.split_count = rule
                    return kern(q, k, v, scale=scale)
                provs[name] = call
        graphs = {p: captured(f) for p, f in provs.items()}
        times = {p: [] for p in provs}
        for _ in range(2):
            for p, g in graphs.items():
                times[p].append(do_bench(g.replay, warmup=10, rep=args.rep_ms))
        cuda_kernel.split_count = shipped_rule
        med = {p: sorted(t)[len(t) // 2] for p, t in times.items()}
        print(f"{r}: cudnn {gbytes / med['cudnn'] * 1e3:.0f} GB/s, flash {gbytes / med['flash'] * 1e3:.0f}, "
              f"attnforge-triton {gbytes / med['triton'] * 1e3:.0f}", flush=True)
        for e in results:
            if e["row"] == r:
                e["ms"] = med[e["cand"]]
                e["gbps"] = gbytes / e["ms"] * 1e3
                e["vs_cudnn"] = med["cudnn"] / e["ms"]
                print(f"  {e['cand']:16s} err {e['err']:.1e} {e['gbps']:6.0f} GB/s {e['vs_cudnn']:.2f}x cudnn", flush=True)
        results.append({"row": r, "baselines_ms": med})
        (out / "cuda_decode_tiles.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
