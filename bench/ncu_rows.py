"""Where a row's time goes, by Nsight Compute: attnforge's kernel (``attention(backend=...)``) and cuDNN's (SDPA) on the
same bench rows, each launched once inside a profiler range after a warm-up (so that ncu profiles those launches only).

Usage (on the GPU machine, repository root, .gpu_deps carried):
    ncu --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \\
        --section MemoryWorkloadAnalysis -o $OUT/prof -f python3 bench/ncu_rows.py mha-fp16-d64-s1k-full ...
    ncu --import $OUT/prof.ncu-rep --page details > $OUT/prof.txt

Rows are bench matrix names (``attnforge.bench.matrix.full_matrix``, as in the bench's tables); ``--backend`` picks attnforge's backend (default gluon).
Without ncu it runs the same launches and prints nothing but the rows (a dry run of the script).
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import attnforge
    from attnforge.bench.matrix import full_matrix

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", help="bench matrix row names")
    ap.add_argument("--backend", default="gluon")
    args = ap.parse_args()
    by_name = {r.name: r for r in full_matrix()}
    unknown = [r for r in args.rows if r not in by_name]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; known: {', '.join(sorted(by_name))}")
    calls = []
    for name in args.rows:
        row = by_name[name]
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[row.dtype]
        q = torch.randn(row.batch, row.heads, row.seqlen_q, row.head_dim, device="cuda", dtype=dt)
        k, v = (torch.randn(row.batch, row.kv_heads, row.seqlen_k, row.head_dim, device="cuda", dtype=dt) for _ in range(2))
        gqa = row.heads != row.kv_heads

        def ours(q=q, k=k, v=v, row=row):
            attnforge.attention(q, k, v, causal=row.causal, backend=args.backend)

        def cudnn(q=q, k=k, v=v, row=row, gqa=gqa):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q, k, v, is_causal=row.causal, enable_gqa=gqa)

        for fn in (ours, cudnn):  # built, compiled and past the dispatch cache's first (checked) call
            fn(), fn(), fn()
        calls += [(name, "attnforge", ours), (name, "cudnn", cudnn)]
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, who, fn in calls:
        torch.cuda.nvtx.range_push(f"{name}:{who}")
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled, in order:", ", ".join(f"{name}:{who}" for name, who, _ in calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
