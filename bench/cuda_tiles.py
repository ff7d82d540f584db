"""Tile sweep for the CUDA backend on the local GPU: for each bench row and each candidate
(BM, BN, warps, stages, Q kept in registers or re-read from shared memory), the planner's TL
program translated by the CUDA backend, compiled (nvcc, in parallel), checked against SDPA's math
backend in fp32 on the row's own shape, and timed beside SDPA's flash and cuDNN backends in the
same run (do_bench median, rounds in turns). An exploration tool: the gate (attnforge.verify) is
what a kernel has to pass before attnforge hands it out; this finds which tiles to offer it.

    PYTHONPATH=src:.gpu_deps python3 bench/cuda_tiles.py --out OUT [--rows d128-s4k ...] [--jobs 12]

Prints one line per (row, candidate): registers, spills, shared memory, max |O - ref|, ms and
the ratio to flash; writes OUT/cuda_tiles.json.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROWS = {  # name: (B, Hq, Hkv, S, D, causal, dtype)
    "d64-s4k": (4, 32, 32, 4096, 64, False, "bf16"), "d64-s4k-causal": (4, 32, 32, 4096, 64, True, "bf16"),
    "d128-s4k": (4, 16, 16, 4096, 128, False, "bf16"), "d128-s4k-causal": (4, 16, 16, 4096, 128, True, "bf16"),
    "d128-s1k": (16, 16, 16, 1024, 128, False, "bf16"), "d128-s4k-fp16": (4, 16, 16, 4096, 128, False, "fp16"),
    "d256-s4k": (4, 8, 8, 4096, 256, False, "bf16"), "d256-s4k-causal": (4, 8, 8, 4096, 256, True, "bf16"),
    "gqa-s4k-causal": (4, 32, 8, 4096, 128, True, "bf16"),
}
# (BM, BN, warps, stages, keep Q in registers)
CANDIDATES = {
    64: [(128, 64, 8, 3, 1), (128, 64, 4, 3, 1), (128, 32, 4, 3, 1), (128, 64, 4, 2, 0), (64, 64, 4, 3, 1), (128, 128, 4, 2, 0)],
    128: [(128, 64, 8, 3, 1), (128, 64, 8, 2, 1), (64, 64, 4, 2, 1), (128, 64, 4, 2, 0), (128, 32, 4, 3, 0), (64, 32, 4, 3, 1), (128, 64, 8, 3, 0)],
    256: [(128, 16, 8, 2, 1), (128, 64, 8, 2, 0), (128, 32, 8, 2, 0), (64, 64, 4, 2, 0), (64, 32, 4, 2, 0)],
}


def build(row: tuple, cand: tuple, workdir: Path) -> dict:
    from attnforge.backends.cuda import CudaBackend
    from attnforge.backends.cuda import memory
    from attnforge.plan.builtin import source_for
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.tl import parse

    B, Hq, Hkv, S, D, causal, dtype = row
    BM, BN, W, ST, keep_q = cand
    spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, head_dim=D, dtype=dtype, causal=causal, seqlen_q=S)
    text = source_for(spec, get_target("h200"), "prefill", dict(BM=BM, BN=BN, warps=W, stages=ST))
    memory.Q_REGISTER_BUDGET = 10**6 if keep_q else 0  # translate() runs in the caller's thread, one at a time
    src = CudaBackend().translate(parse(text), head_dim=D, head_dim_v=D).source
    path = workdir / f"k_{D}_{int(causal)}_{dtype}_{BM}_{BN}_{W}_{ST}_{keep_q}.cu"
    path.write_text(src)
    return {"path": str(path)}


def resources(path: str) -> dict:
    from attnforge.backends.cuda.compile import compile_cubin
    from attnforge.compile_report import find_cuobjdump
    import re

    cubin, _, secs, _ = compile_cubin(Path(path).read_text(), "sm_90")
    tmp = Path(path).with_suffix(".cubin")
    tmp.write_bytes(cubin)
    out = subprocess.run([find_cuobjdump(), "--dump-resource-usage", str(tmp)], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+).*?SHARED:(\d+)", out)
    return {"regs": int(m[1]), "stack": int(m[2]), "compile_s": round(secs, 1)}


def row_case(row: tuple) -> tuple:
    """A row's inputs on the GPU (seed 0), its scale, SDPA's math-backend output in fp32, its FLOPs, and SDPA's flash and cuDNN
    backends as calls: (q, k, v, scale, ref, flops, {"flash": f, "cudnn": f})."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, Hq, Hkv, S, D, causal, dtype = row
    dt = torch.bfloat16 if dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=dt)
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=dt)
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=dt)
    scale = 1 / math.sqrt(D)
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=scale, enable_gqa=Hq != Hkv)
    flops = 4 * B * Hq * S * S * D / (2 if causal else 1)

    def sdpa(backend):
        def f():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=Hq != Hkv)
        return f
    return q, k, v, scale, ref, flops, {"flash": sdpa(SDPBackend.FLASH_ATTENTION), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", nargs="*", default=list(ROWS))
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--rep-ms", type=int, default=60)
    ap.add_argument("--cands", nargs="*", help="candidates BM,BN,warps,stages,keepQ (default: CANDIDATES for the row's head dim)")
    args = ap.parse_args()
    given = [tuple(int(x) for x in c.split(",")) for c in args.cands or []]
    import torch
    from triton.testing import do_bench

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cuda_tiles_"))
    jobs = []
    for r in args.rows:
        row = ROWS[r]
        for cand in given or CANDIDATES[row[4]]:
            jobs.append((r, row, cand, build(row, cand, work)))
    with ThreadPoolExecutor(args.jobs) as pool:
        res = list(pool.map(lambda j: resources(j[3]["path"]), jobs))
    from attnforge.backends.cuda.kernel import CudaKernel

    results = []
    for r in args.rows:
        q, k, v, scale, ref, flops, provs = row_case(ROWS[r])
        names = []
        for (rr, row, cand, b), rs in zip(jobs, res):
            if rr != r:
                continue
            name = "BM{}-BN{}-w{}-st{}-q{}".format(*cand)
            entry = {"row": r, "cand": name, **rs}
            if rs["stack"]:
                entry["note"] = "spills"
            kern = CudaKernel(b["path"])
            o, _ = kern(q, k, v, scale=scale)
            torch.cuda.synchronize()
            entry["err"] = float((o.float() - ref).abs().max())
            provs[name] = lambda kern=kern: kern(q, k, v, scale=scale)
            names.append(name)
            results.append(entry)
        times = {p: [] for p in provs}
        for _ in range(2):  # rounds in turns
            for p, f in provs.items():
                try:
                    times[p].append(do_bench(f, warmup=10, rep=args.rep_ms))
                except Exception as err:  # a baseline that cannot run this row
                    times[p].append(float("nan"))
                    print(r, p, "failed:", err)
        med = {p: sorted(t)[len(t) // 2] for p, t in times.items()}
        for e in results:
            if e["row"] == r:
                e["ms"] = med[e["cand"]]
                e["tflops"] = flops / e["ms"] / 1e9
                e["vs_flash"] = med["flash"] / e["ms"]
                e["vs_cudnn"] = med["cudnn"] / e["ms"]
        print(f"{r}: flash {med['flash']:.3f} ms ({flops / med['flash'] / 1e9:.0f} TF/s), cudnn {med['cudnn']:.3f} ms", flush=True)
        for e in results:
            if e["row"] == r:
                print(f"  {e['cand']:24s} regs {e['regs']:3d} stack {e['stack']:4d} err {e['err']:.1e} {e['ms']:.3f} ms "
                      f"{e['tflops']:5.0f} TF/s  {e['vs_flash']:.2f}x flash  {e['vs_cudnn']:.2f}x cudnn", flush=True)
        (out / "cuda_tiles.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
