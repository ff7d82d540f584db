"""GPU check of generated kernels: native verification over a grid of specs, then first timings
beside PyTorch SDPA (cuDNN and FlashAttention-2 backends) in the same run.

Usage (on the H200 machine, from the repository root):
    PYTHONPATH=src:.gpu_deps python3 bench/gpu_check.py --out $OUT
Prints a short pass/fail table and a timing table last; writes every record as JSON under --out.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from pathlib import Path

import torch

from attnforge import AttentionSpec, get_target
from attnforge.generate import generate
from attnforge.backends.triton.kernel import GeneratedKernel

# (name, spec fields) of the verification grid; each runs in fp16 and bf16.
VARIANTS = [
    ("mha", dict(heads=16)),
    ("gqa", dict(heads=32, kv_heads=8)),
    ("mqa", dict(heads=16, kv_heads=1)),
    ("gqa-causal", dict(heads=32, kv_heads=8, causal=True)),
    ("mha-causal-topleft", dict(heads=16, causal=True, causal_align="top_left")),
    ("swa-causal", dict(heads=16, kv_heads=4, causal=True, window_left=200)),
    ("window-2sided", dict(heads=8, window_left=100, window_right=50)),
    ("alibi-causal", dict(heads=16, causal=True, alibi_slopes="auto")),
    ("softcap-causal", dict(heads=16, kv_heads=8, causal=True, softcap=30.0)),
    ("mods", dict(heads=8, score_mod="score - 0.01 * abs(q_idx - kv_idx)", mask_mod="kv_idx % 5 != 1")),
    ("decode", dict(batch=8, heads=32, kv_heads=8, seqlen_q=1, seqlen_k=8192)),
]
HEAD_DIMS = (64, 128)
EXTRA_HEAD_DIMS = (32, 40, 48, 80, 96, 192, 256)  # on gqa-causal only

# Timing cases from ../shared/ANCHORS.md: (name, dtype, D, causal, B, Hq, Hkv, Sq, Sk)
TIMING = [
    ("mha", "fp16", 64, False, 4, 32, 32, 4096, 4096),
    ("mha", "fp16", 64, True, 4, 32, 32, 4096, 4096),
    ("mha", "fp16", 128, False, 4, 16, 16, 4096, 4096),
    ("mha", "fp16", 128, True, 4, 16, 16, 4096, 4096),
    ("mha", "bf16", 128, False, 4, 16, 16, 4096, 4096),
    ("mha", "bf16", 128, True, 4, 16, 16, 4096, 4096),
    ("mha", "bf16", 256, False, 4, 8, 8, 4096, 4096),
    ("gqa", "bf16", 128, False, 4, 32, 8, 4096, 4096),
    ("gqa", "bf16", 128, True, 4, 32, 8, 4096, 4096),
    ("decode", "bf16", 128, False, 64, 32, 8, 1, 4096),
]
DT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _verify_one(job: tuple) -> dict:
    name, fields, d, dtype, out, target_name = job
    spec = AttentionSpec(head_dim=d, dtype=dtype, **fields)
    tag = f"{name}-d{d}-{dtype}"
    t0 = time.perf_counter()
    try:
        r = generate(spec, get_target(target_name), Path(out) / "gen" / tag)
        v = r.verification
        row = dict(case=tag, ok=r.ok, failed_step=r.failed_step, error=(r.error or "")[:300],
                   params=r.plan.params if r.plan else None,
                   cases=len(v.cases) if v else 0, passed=sum(c.passed for c in v.cases) if v else 0,
                   max_err_o=v.max_err_o if v else math.nan, max_err_lse=v.max_err_lse if v else math.nan,
                   max_o_ratio=max((c.o_ratio for c in v.cases), default=math.nan) if v else math.nan, status=r.status,
                   worst=[c.worst for c in v.cases] if v else [],
                   regs=[c.registers for c in r.compile_reports], spills=[c.spill_bytes for c in r.compile_reports],
                   instructions=[list(c.instructions) for c in r.compile_reports])
    except Exception:
        row = dict(case=tag, ok=False, failed_step="exception", error=traceback.format_exc()[-600:])
    row["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{tag:32s} {'PASS' if row['ok'] else 'FAIL'} {row.get('passed', 0)}/{row.get('cases', 0)} "
          f"errO={row.get('max_err_o', math.nan):.2e} errLSE={row.get('max_err_lse', math.nan):.2e} O/bound={row.get('max_o_ratio', math.nan):.2f} {row['seconds']}s "
          f"{row.get('failed_step') or ''} {row.get('error', '')[:200] if not row['ok'] else ''}", flush=True)
    return row


def verification_grid(out: Path, target, jobs: int = 1) -> list[dict]:
    """Generate and natively verify every (variant, head dim, dtype); ``jobs`` processes share the GPU."""
    work = [(name, fields, d) for name, fields in VARIANTS for d in HEAD_DIMS]
    work += [("gqa-causal", dict(heads=32, kv_heads=8, causal=True), d) for d in EXTRA_HEAD_DIMS]
    items = [(name, fields, d, dtype, str(out), target.name) for name, fields, d in work for dtype in ("fp16", "bf16")]
    if jobs <= 1:
        return [_verify_one(i) for i in items]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(_verify_one, items))


def bench(fn, rotate: int = 1) -> float:
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def timings(out: Path, target) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    rows = []
    for name, dtype, d, causal, B, Hq, Hkv, Sq, Sk in TIMING:
        spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=d, dtype=dtype, causal=causal)
        tag = f"{name}-{dtype}-d{d}-{'causal' if causal else 'full'}-{B}x{Hq}/{Hkv}x{Sq}x{Sk}"
        r = generate(spec, target, out / "timing" / tag, run_verification=False)
        row = dict(case=tag, params=r.plan.params if r.plan else None)
        if not r.ok:
            row["error"] = r.error
            rows.append(row)
            print(tag, "generate failed", r.error, flush=True)
            continue
        kernel = GeneratedKernel(out / "timing" / tag / "kernel_triton.py", interpret=False)
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, Hq, Sq, d, device="cuda", dtype=DT[dtype], generator=g)
        k = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=DT[dtype], generator=g)
        v = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=DT[dtype], generator=g)
        o = torch.empty(B, Hq, Sq, d, device="cuda", dtype=DT[dtype])
        lse = torch.empty(B, Hq, Sq, device="cuda", dtype=torch.float32)
        flops = 4 * B * Hq * Sq * Sk * d / (2 if causal else 1)
        bytes_moved = (q.numel() + k.numel() + v.numel() + o.numel()) * q.element_size()
        ms = bench(lambda: kernel.launch(q, k, v, o, lse, scale=spec.scale))
        row["attnforge_ms"] = ms
        # the baselines, in the same run; SDPA's is_causal is top-left, equal to bottom-right when Sq == Sk
        for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal and Sq == Sk, enable_gqa=Hq != Hkv)
                    row[f"{label}_ms"] = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal and Sq == Sk, enable_gqa=Hq != Hkv))
                row[f"{label}_vs_attnforge_err"] = float(((ref.float() - o.float()).norm() / ref.float().norm()).item())
            except Exception as err:
                row[f"{label}_ms"] = None
                row[f"{label}_error"] = str(err)[:200]
        unit, scale = ("GB/s", bytes_moved / 1e6) if Sq == 1 else ("TFLOP/s", flops / 1e9)
        row["unit"] = unit
        for key in ("attnforge", "cudnn", "flash2"):
            ms_k = row.get(f"{key}_ms")
            row[f"{key}_rate"] = scale / ms_k if ms_k else None
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the verification grid (they share the GPU)")
    ns = ap.parse_args()
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    target = get_target("auto")
    import triton
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), target=target.name)
    print(meta, flush=True)
    grid = [] if ns.skip_grid else verification_grid(out, target, ns.jobs)
    (out / "verify_grid.json").write_text(json.dumps(dict(meta=meta, rows=grid), indent=1, default=str))
    times = [] if ns.skip_timing else timings(out, target)
    (out / "timings.json").write_text(json.dumps(dict(meta=meta, rows=times), indent=1, default=str))
    if grid:
        print(f"\nworst row of O against its bound (numerics.o_row_bound): {max((r.get('max_o_ratio', 0) for r in grid if r['ok']), default=math.nan):.3f} of it")
        print(f"\nverification: {sum(r['ok'] for r in grid)}/{len(grid)} specs pass; "
              f"max err(O) fp16 {max((r.get('max_err_o', 0) for r in grid if r['case'].endswith('fp16') and r['ok']), default=math.nan):.2e}, "
              f"bf16 {max((r.get('max_err_o', 0) for r in grid if r['case'].endswith('bf16') and r['ok']), default=math.nan):.2e}")
        for r in grid:
            if not r["ok"]:
                print("FAIL", r["case"], r.get("failed_step"), r.get("error", "")[:300])
    if times:
        print(f"\n{'case':46s} {'unit':8s} {'attnforge':>9s} {'cuDNN':>7s} {'FA2':>7s} {'vs cuDNN':>8s}")
        for r in times:
            a, c, f = r.get("attnforge_rate"), r.get("cudnn_rate"), r.get("flash2_rate")
            fmt = lambda x: f"{x:7.0f}" if x else "      -"
            print(f"{r['case']:46s} {r.get('unit', ''):8s} {fmt(a):>9s} {fmt(c)} {fmt(f)} {(a / c if a and c else math.nan):8.2f}")


if __name__ == "__main__":
    main()
