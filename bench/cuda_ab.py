"""Versions of the CUDA backend's prefill kernels side by side on the local GPU: for each row, one
generated file per version (built on the CPU from each version's source tree), each checked against
SDPA's math backend in fp32 and timed as a CUDA graph of one call (the kernel alone, no host work)
beside SDPA's flash (FlashAttention-2) and cuDNN backends, graphed alike, in rounds taken in turns,
each round in a fresh order (seeded). The first version is also timed a second time, as ``LABEL@again``
(another graph of the same kernel): its distance from the first is how far two times of one kernel
land apart here, the least difference between versions that means anything. In a fixed order a kernel
timed right after cuDNN ran 3-7% slower than the same kernel elsewhere in the round (bench/RESULTS.md,
2026-12-04 run 19, call 6): that order made the D = 256 versions of run 11 (call 4) and run 19 (calls 1
and 5) look 4-5% faster than the kernel they were measured against.

    # on the CPU, once per version (PYTHONPATH picks the version's source tree):
    PYTHONPATH=OLD/src python3 bench/cuda_ab.py build --out AB --label old
    PYTHONPATH=src python3 bench/cuda_ab.py build --out AB --label new [--cand 128,64,4,2,0 --label new-4w]
    # on the GPU machine:
    PYTHONPATH=src:.gpu_deps python3 bench/cuda_ab.py time AB [--rows ...]

``build`` writes AB/LABEL/ROW.cu: the first plan of the backend whose kernel compiles without spills
(as ``attnforge.backends.cuda.gpucheck`` builds), or the candidate given (BM, BN, warps, stages, keep
Q in registers; spills allowed, noted). ``time`` prints one line per (row, version) and writes
AB/cuda_ab.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_tiles import ROWS as TILE_ROWS, row_case  # noqa: E402  (bench/: the script's own directory)

ROWS = {  # name: (B, Hq, Hkv, S, D, causal, dtype)
    **TILE_ROWS,
    "d64-s1k": (16, 32, 32, 1024, 64, False, "bf16"), "d64-s16k-causal": (1, 32, 32, 16384, 64, True, "bf16"),
    "d128-s16k": (1, 16, 16, 16384, 128, False, "bf16"), "d256-s1k-fp16": (16, 8, 8, 1024, 256, False, "fp16"),
    "d256-s1k-causal": (16, 8, 8, 1024, 256, True, "bf16"), "d256-s16k": (1, 8, 8, 16384, 256, False, "bf16"),
    "d128-s1k-causal": (16, 16, 16, 1024, 128, True, "bf16"),
    # the rest of the bench's D = 256 rows
    "d256-s1k": (16, 8, 8, 1024, 256, False, "bf16"), "d256-s1k-causal-fp16": (16, 8, 8, 1024, 256, True, "fp16"),
    "d256-s4k-fp16": (4, 8, 8, 4096, 256, False, "fp16"), "d256-s4k-causal-fp16": (4, 8, 8, 4096, 256, True, "fp16"),
    "d256-s16k-fp16": (1, 8, 8, 16384, 256, False, "fp16"), "d256-s16k-causal": (1, 8, 8, 16384, 256, True, "bf16"),
    "d256-s16k-causal-fp16": (1, 8, 8, 16384, 256, True, "fp16"),
}


def build(args: argparse.Namespace) -> None:
    from attnforge.backends.cuda.gpucheck import build as first_plan
    from attnforge.spec import AttentionSpec

    out = Path(args.out) / args.label
    out.mkdir(parents=True, exist_ok=True)
    for r in args.rows:
        B, Hq, Hkv, S, D, causal, dtype = ROWS[r]
        if args.cand:
            import cuda_tiles

            cand = tuple(int(x) for x in args.cand.split(","))
            path = Path(cuda_tiles.build(ROWS[r], cand, out)["path"])
            path.rename(out / f"{r}.cu")
        else:
            spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, head_dim=D, dtype=dtype, causal=causal, seqlen_q=S)
            path, params, _ = first_plan(spec, "h200", out, r)
            Path(path).rename(out / f"{r}.cu")
        print(f"{args.label}/{r}.cu", flush=True)


def time_versions(args: argparse.Namespace) -> None:
    import torch
    from triton.testing import do_bench

    from attnforge.backends.cuda.kernel import CudaKernel
    from cuda_decode_tiles import captured

    root = Path(args.dir)
    labels = sorted(p.name for p in root.iterdir() if p.is_dir())
    results = []
    for r in args.rows:
        q, k, v, scale, ref, flops, calls = row_case(ROWS[r])
        errs = {}
        for label in labels:
            path = root / label / f"{r}.cu"
            if not path.exists():
                continue
            kern = CudaKernel(str(path))
            o, _ = kern(q, k, v, scale=scale)
            torch.cuda.synchronize()
            errs[label] = float((o.float() - ref).abs().max())
            calls[label] = lambda kern=kern: kern(q, k, v, scale=scale)
        if errs:  # the control: the first version again, its own graph
            first = next(iter(errs))
            calls[f"{first}@again"], errs[f"{first}@again"] = calls[first], errs[first]
        graphs = {name: captured(f) for name, f in calls.items()}
        times = {name: [] for name in calls}
        order, shuffle = list(graphs), random.Random(0).shuffle
        for _ in range(args.rounds):  # a drift of the machine touches every version alike; none is always timed after cuDNN
            shuffle(order)
            for name in order:
                times[name].append(do_bench(graphs[name].replay, warmup=10, rep=args.rep_ms))
        med = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        print(f"{r}: flash {med['flash']:.3f} ms ({flops / med['flash'] / 1e9:.0f} TF/s), cudnn {med['cudnn']:.3f} ms "
              f"({flops / med['cudnn'] / 1e9:.0f} TF/s)", flush=True)
        for label in errs:
            e = {"row": r, "version": label, "ms": med[label], "rounds_ms": times[label], "tflops": flops / med[label] / 1e9, "err": errs[label],
                 "vs_flash": med["flash"] / med[label], "vs_cudnn": med["cudnn"] / med[label]}
            results.append(e)
            print(f"  {label:14s} err {e['err']:.1e} {e['ms']:.3f} ms {e['tflops']:5.0f} TF/s  {e['vs_flash']:.3f}x flash  "
                  f"{e['vs_cudnn']:.3f}x cudnn", flush=True)
        (root / "cuda_ab.json").write_text(json.dumps(results, indent=1))
        del ref
        torch.cuda.empty_cache()
    print("\ngeomean vs flash by version:")
    for label in dict.fromkeys(e["version"] for e in results):  # the versions, then the control, in their first row's order
        xs = [e["vs_flash"] for e in results if e["version"] == label]
        print(f"  {label:14s} {math.exp(sum(map(math.log, xs)) / len(xs)):.3f}x over {len(xs)} rows "
              f"(worst {min(xs):.3f}, best {max(xs):.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write OUT/LABEL/ROW.cu for each row (CPU)")
    b.add_argument("--out", required=True)
    b.add_argument("--label", required=True)
    b.add_argument("--rows", nargs="*", default=list(ROWS))
    b.add_argument("--cand", help="BM,BN,warps,stages,keepQ (default: the backend's first plan without spills)")
    t = sub.add_parser("time", help="verify and time every version of each row (GPU)")
    t.add_argument("dir")
    t.add_argument("--rows", nargs="*", default=list(ROWS))
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--rep-ms", type=int, default=40)
    args = ap.parse_args()
    build(args) if args.cmd == "build" else time_versions(args)


if __name__ == "__main__":
    main()
