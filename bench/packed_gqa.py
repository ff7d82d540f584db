"""Packed GQA on the GPU (issue 11, item 3): the planner's packed split-KV kernels against the same
planner with packing off (one query head per program, K/V re-read G times) and SDPA's cuDNN and
flash backends, in one run.

Per case: both kernels are planned and translated here, verified natively with the gate's
verification (``attnforge.verify``, judged against the float64 reference of the spec, on the
interpreter-sized verification shapes), checked against SDPA on the timed shape, and timed
(median of ``triton.testing.do_bench``, 25 ms warm-up, 100 ms of repeats, providers interleaved,
ROUNDS rounds). Rates are GB/s of Q, K, V and O read or written once.

``--sweep`` instead times the packed kernel of SWEEP_CASES over SWEEP_PARAMS (NSPLIT, BN, stages),
each variant checked against fp32 math on the timed shape: what the planner's choice leaves.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=$PWD/src:$PWD/.gpu_deps python3 bench/packed_gqa.py --out $OUT
    PYTHONPATH=$PWD/src:$PWD/.gpu_deps python3 bench/packed_gqa.py --out $OUT --sweep
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

# (name, dtype, D, causal, B, Hq, Hkv, Sq, Sk)
CASES = [
    ("decode", "bf16", 128, False, 64, 32, 8, 1, 4096),
    ("decode", "bf16", 128, False, 8, 32, 8, 1, 32768),
    ("decode", "bf16", 128, False, 16, 64, 8, 1, 8192),
    ("decode", "fp16", 64, False, 32, 32, 4, 1, 8192),
    ("spec-verify", "bf16", 128, True, 8, 32, 8, 4, 8192),
    ("spec-verify", "bf16", 128, True, 8, 32, 8, 16, 4096),
]
ROUNDS = 2
SWEEP_CASES = [CASES[2], CASES[3], CASES[0], CASES[4]]
SWEEP_PARAMS = [dict(NSPLIT=ns, BN=bn, stages=st) for ns in (1, 2, 4, 8, 16) for bn, st in ((64, 2), (64, 3), (128, 2))]



def fp32_reference(q, k, v, scale: float, causal: bool):
    """fp32 attention on upcast inputs, bottom-right causal: the check on the timed shape (the
    float64 reference would not fit these shapes in host memory)."""
    import torch

    Hq, Sq, Sk = q.shape[1], q.shape[2], k.shape[2]
    kx, vx = (t.float().repeat_interleave(Hq // k.shape[1], dim=1) for t in (k, v))
    scores = (q.float() @ kx.transpose(-1, -2)) * scale
    if causal:
        keep = torch.arange(Sk, device=q.device)[None, :] <= torch.arange(Sq, device=q.device)[:, None] + Sk - Sq
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1) @ vx

def tag(case: tuple) -> str:
    name, dtype, d, causal, B, Hq, Hkv, Sq, Sk = case
    return f"{name}-{dtype}-d{d}-{'causal' if causal else 'full'}-{B}x{Hq}/{Hkv}x{Sq}x{Sk}"


def build(spec, target, packed: bool, root: Path):
    """The planner's kernel for ``spec``, packed or with packing turned off."""
    from attnforge.backends.triton import translate
    from attnforge.backends.triton.kernel import GeneratedKernel
    from attnforge.plan import builtin

    keep = builtin.packs_gqa
    if not packed:
        builtin.packs_gqa = lambda spec: False
    try:
        pl = builtin.plan(spec, target)
    finally:
        builtin.packs_gqa = keep
    path = root / f"{'packed' if packed else 'unpacked'}.py"
    path.write_text(translate(pl.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source)
    return GeneratedKernel(path, interpret=False), pl


def sweep(out: Path) -> None:
    import torch
    import triton
    import triton.testing

    from attnforge.backends.triton import translate
    from attnforge.backends.triton.kernel import GeneratedKernel
    from attnforge.plan import builtin
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.tl.harness import specialize

    target = get_target("auto")
    DT = {"fp16": torch.float16, "bf16": torch.bfloat16}
    rows, start = [], time.perf_counter()
    for case in SWEEP_CASES:
        name, dtype, d, causal, B, Hq, Hkv, Sq, Sk = case
        spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=d, dtype=dtype, causal=causal)
        pl = builtin.plan(spec, target)
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, Hq, Sq, d, device="cuda", dtype=DT[dtype], generator=g)
        k = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=DT[dtype], generator=g)
        v = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=DT[dtype], generator=g)
        ref = fp32_reference(q, k, v, spec.scale, causal)
        moved = (2 * q.numel() + k.numel() + v.numel()) * q.element_size()
        root = Path(tempfile.mkdtemp(prefix="sweep-"))
        for i, params in enumerate(SWEEP_PARAMS):
            if params["BN"] == 128 and d > 64:
                continue
            path = root / f"v{i}.py"
            path.write_text(translate(specialize(pl.program, params=params), head_dim=d).source)
            kernel = GeneratedKernel(path, interpret=False)
            o = torch.full((B, Hq, Sq, d), float("nan"), device="cuda", dtype=DT[dtype])
            lse = torch.empty(B, Hq, Sq, device="cuda", dtype=torch.float32)
            kernel.launch(q, k, v, o, lse, scale=spec.scale)
            err = float(((o.float() - ref).norm() / ref.norm()).item())
            ms = triton.testing.do_bench(lambda: kernel.launch(q, k, v, o, lse, scale=spec.scale), warmup=25, rep=100, return_mode="median")
            row = dict(case=tag(case), planned=pl.params, params=params, ms=ms, GBps=moved / ms / 1e6, err_vs_fp32=err)
            rows.append(row)
            print(f"{tag(case):42s} {params}  {row['GBps']:6.0f} GB/s  err {err:.1e}  {'(planned)' if all(pl.params.get(k) == v for k, v in params.items()) else ''} "
                  f"[{time.perf_counter() - start:.0f}s]", flush=True)
            (out / "sweep.json").write_text(json.dumps(dict(meta=dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                                                                      command="PYTHONPATH=$PWD/src:$PWD/.gpu_deps python3 bench/packed_gqa.py --out $OUT --sweep"),
                                                            rows=rows), indent=1))


def main() -> None:
    import torch
    import torch.nn.functional as F
    import triton
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.verify import verification_shapes, verify

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", type=int, default=len(CASES))
    ap.add_argument("--sweep", action="store_true")
    ns = ap.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.sweep:
        return sweep(ns.out)
    target = get_target("auto")
    DT = {"fp16": torch.float16, "bf16": torch.bfloat16}

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    rows = []
    start = time.perf_counter()
    for case in CASES[: ns.cases]:
        name, dtype, d, causal, B, Hq, Hkv, Sq, Sk = case
        spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=d, dtype=dtype, causal=causal)
        row: dict = dict(case=tag(case))
        root = Path(tempfile.mkdtemp(prefix="packed-"))
        kernels = {}
        for packed in (True, False):
            kernel, pl = build(spec, target, packed, root)
            label = "packed" if packed else "unpacked"
            kernels[label] = kernel
            row[f"{label}_kind"], row[f"{label}_params"] = pl.kind, pl.params
            t0 = time.perf_counter()
            record = verify(kernel, spec, pl.params, target=target, shapes=verification_shapes(spec, pl.params, native=False))
            row[f"{label}_verified"] = record.passed
            row[f"{label}_verify"] = dict(cases=len(record.cases), max_err_o=record.max_err_o, max_err_lse=record.max_err_lse, ran=record.ran,
                                          seconds=round(time.perf_counter() - t0, 1))
            if not record.passed:
                row[f"{label}_verify_failures"] = [f"{c.shape}: {c.error or ''} err(O)={c.err_o:.3e}" for c in record.cases if not c.passed][:3]
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, Hq, Sq, d, device="cuda", dtype=DT[dtype], generator=g)
        k = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=DT[dtype], generator=g)
        v = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=DT[dtype], generator=g)
        outs = {label: (torch.full((B, Hq, Sq, d), float("nan"), device="cuda", dtype=DT[dtype]),
                        torch.full((B, Hq, Sq), float("nan"), device="cuda", dtype=torch.float32)) for label in kernels}
        ref = fp32_reference(q, k, v, spec.scale, causal)
        for label, kernel in kernels.items():
            o, lse = outs[label]
            kernel.launch(q, k, v, o, lse, scale=spec.scale)
            torch.cuda.synchronize()
            row[f"{label}_err_vs_fp32"] = float(((o.float() - ref).norm() / ref.norm()).item())
        row["packed_equals_unpacked"] = bool(torch.equal(outs["packed"][0], outs["unpacked"][0]))
        providers = {label: (lambda kernel=kernel, o=outs[label][0], lse=outs[label][1]: kernel.launch(q, k, v, o, lse, scale=spec.scale))
                     for label, kernel in kernels.items()}
        # SDPA's is_causal is top-left; with Sq small against Sk the non-causal baseline does the same work
        for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)):
            def sdpa(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=Hq != Hkv)
            try:
                base = sdpa()
                row[f"{label}_err_vs_fp32"] = float(((base.float() - ref).norm() / ref.norm()).item()) if not causal else None
                providers[label] = sdpa
            except Exception as err:  # a backend that refuses the shape
                row[f"{label}_error"] = str(err)[:200]
        times: dict[str, list[float]] = {p: [] for p in providers}
        for _ in range(ROUNDS):
            for p, fn in providers.items():
                times[p].append(bench(fn))
        moved = (q.numel() + k.numel() + v.numel() + q.numel()) * q.element_size()
        for p, ts in times.items():
            ms = statistics.median(ts)
            row[f"{p}_ms"], row[f"{p}_ms_all"], row[f"{p}_GBps"] = ms, ts, moved / ms / 1e6
        for p in ("unpacked", "cudnn", "flash2"):
            if f"{p}_ms" in row:
                row[f"packed_vs_{p}"] = row[f"{p}_ms"] / row["packed_ms"]  # > 1: packed is faster
        rows.append(row)
        print(f"{row['case']:42s} packed {row['packed_GBps']:6.0f} GB/s ({row['packed_params'].get('BM')}x{row['packed_params'].get('BN')} "
              f"NSPLIT {row['packed_params'].get('NSPLIT', 'at launch')})  unpacked {row['unpacked_GBps']:6.0f}  cuDNN {row.get('cudnn_GBps', float('nan')):6.0f}  "
              f"FA2 {row.get('flash2_GBps', float('nan')):6.0f}  packed/unpacked {row['packed_vs_unpacked']:.2f}x  packed/cuDNN "
              f"{row.get('packed_vs_cudnn', float('nan')):.2f}x  verified {row['packed_verified']}/{row['unpacked_verified']}  "
              f"err {row['packed_err_vs_fp32']:.1e}  [{time.perf_counter() - start:.0f}s]", flush=True)
        (ns.out / "packed_gqa.json").write_text(json.dumps(dict(
            meta=dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rounds=ROUNDS,
                      command="PYTHONPATH=$PWD/src:$PWD/.gpu_deps python3 bench/packed_gqa.py --out $OUT"), rows=rows), indent=1))


if __name__ == "__main__":
    main()
