"""GPU check of the CUDA backend (run on a GPU machine from the repository root):

    PYTHONPATH=src:.gpu_deps python3 -m attnforge.backends.cuda.gpucheck --out $OUT [--phase verify,time,mutants]

verify: plans each spec for the target (default h200), compiles both code paths (native: the
sm_80-style m16n8k16 + cp.async code; turing: the sm_75 m16n8k8 code) for the local GPU and
verifies each natively with attnforge's verifier. time: median times (triton.testing.do_bench)
of both paths beside the Triton kernel and PyTorch SDPA's flash backend. mutants: the CUDA
mutants of selftest/mutants.py, planted and verified. Prints tables; writes JSON under --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import traceback
from pathlib import Path

import torch

from ...plan.builtin import plans_for
from ...spec import AttentionSpec
from ...targets import get_target
from ...verify import CaseShape, verification_shapes, verify
from ...compile_report import check_fits
from ...errors import AttnforgeError, DoesNotFitError
from . import CudaBackend
from .compile import arch_of, compile_cubin, compile_for_target
from .kernel import CudaKernel

VARIANTS = [
    ("mha", dict(heads=4)),
    ("gqa", dict(heads=8, kv_heads=2)),
    ("mqa-causal", dict(heads=4, kv_heads=1, causal=True)),
    ("gqa-causal", dict(heads=8, kv_heads=2, causal=True)),
    ("mha-causal-topleft", dict(heads=4, causal=True, causal_align="top_left")),
]
EXTRA = [  # fp16, native path, D=64 unless given
    ("d40-causal", dict(heads=4, kv_heads=2, causal=True, head_dim=40)),
    ("d72", dict(heads=2, head_dim=72)),
    ("d256-causal", dict(heads=2, causal=True, head_dim=256)),
    ("window", dict(heads=4, kv_heads=2, window_left=100, window_right=20)),
    ("alibi-softcap", dict(heads=4, causal=True, alibi_slopes="auto", softcap=30.0)),
    ("mods", dict(heads=4, score_mod="score - 0.01 * abs(q_idx - kv_idx)", mask_mod="kv_idx % 5 != 1")),
    # split-KV decode (two kernels, a split count per call): packed GQA, decode-verify, unpacked, per-row heads
    ("decode-gqa", dict(heads=8, kv_heads=2, seqlen_q=1, seqlen_k=1000)),
    ("verify-gqa-causal", dict(heads=8, kv_heads=2, seqlen_q=4, seqlen_k=700, causal=True, head_dim=128)),
    ("decode-mha", dict(heads=4, seqlen_q=1, seqlen_k=1000)),
    ("decode-window-alibi-softcap", dict(heads=8, kv_heads=2, seqlen_q=1, seqlen_k=1000, window_left=200, window_right=0,
                                         alibi_slopes="auto", softcap=30.0)),
]
TIMING = [  # (dtype, D, causal, B, Hq, Hkv, Sq, Sk): the forward rows of bench/gpu_check.py
    ("fp16", 64, False, 4, 32, 32, 4096, 4096),
    ("fp16", 64, True, 4, 32, 32, 4096, 4096),
    ("fp16", 128, False, 4, 16, 16, 4096, 4096),
    ("fp16", 128, True, 4, 16, 16, 4096, 4096),
    ("bf16", 128, False, 4, 16, 16, 4096, 4096),
    ("bf16", 128, True, 4, 16, 16, 4096, 4096),
    ("bf16", 256, False, 4, 8, 8, 4096, 4096),
    ("bf16", 128, False, 4, 32, 8, 4096, 4096),
    ("bf16", 128, True, 4, 32, 8, 4096, 4096),
]
BE = CudaBackend()
MUTANT_DEADLINE_S = 120.0  # verification (nvcc has run before the child starts); a mutant past it hangs


def build(spec: AttentionSpec, target_name: str, out: Path, tag: str) -> tuple[Path, dict, list]:
    """The first plan whose CUDA kernel compiles for the target without spills and fits: (file, params, reports)."""
    target = get_target(target_name)
    last = None
    for p in plans_for(BE, spec, target):
        tr = BE.translate(p.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl")
        reps = compile_for_target(tr.source, target, None)
        try:
            for r in reps:
                check_fits(r, target)
        except DoesNotFitError as err:
            last = err
            continue
        path = out / "src" / f"{tag}.cu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(tr.source)
        return path, p.params, reps
    raise RuntimeError(f"no plan fits: {last}")


_BUILT: dict[str, tuple] = {}


def prebuild(items: list[tuple[str, AttentionSpec, bool]], target_name: str, out: Path) -> None:
    """Build many kernels at once (nvcc runs in parallel processes); ``build`` then finds them."""
    from concurrent.futures import ThreadPoolExecutor

    from .compile import compile_cubin

    def one(item):
        tag, spec, turing = item
        try:
            res = build(spec, target_name, out, tag)
            if turing:
                compile_cubin(res[0].read_text(), "sm_90", "turing")
            _BUILT[tag] = res
        except Exception:
            _BUILT[tag] = RuntimeError(traceback.format_exc()[-800:])
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        list(pool.map(one, items))
    print(f"built {len(items)} kernels in {time.time() - t0:.0f}s", flush=True)


def built(spec: AttentionSpec, target_name: str, out: Path, tag: str) -> tuple:
    res = _BUILT.get(tag)
    if isinstance(res, Exception):
        raise res
    return res if res is not None else build(spec, target_name, out, tag)


def shapes_for(spec: AttentionSpec, params: dict, full: bool) -> list[CaseShape]:
    if full:
        return verification_shapes(spec, params, native=True)
    g = spec.group_size
    return verification_shapes(spec, params, native=False) + [CaseShape(2, 2 * g, 2, 1000, 1037), CaseShape(1, g, 1, 777, 1999, "bshd")]


def phase_verify(args, out: Path, deadline: float) -> list[dict]:
    rows = []
    jobs = []
    for dtype in ("fp16", "bf16"):
        for d in (64, 128):
            for name, fields in VARIANTS:
                jobs.append((f"{name}-d{d}-{dtype}", dict(head_dim=d, dtype=dtype, **fields), ("native", "turing"), name == "gqa-causal" and d == 128))
    for name, fields in EXTRA:
        f = dict(dtype="fp16", **fields)
        f.setdefault("head_dim", 64)
        decode = f.get("seqlen_q", 128) <= 16  # split-KV decode: the Turing path too (what auto builds on sm_75)
        jobs.append((f"{name}-d{f['head_dim']}-fp16", f, ("native", "turing") if decode else ("native",), False))
    prebuild([(tag, AttentionSpec(**fields), "turing" in paths) for tag, fields, paths, _ in jobs], args.target, out)
    for tag, fields, paths, full in jobs:
        if time.time() > deadline:
            print(f"{tag}: skipped (time budget)", flush=True)
            continue
        spec = AttentionSpec(**fields)
        try:
            src, params, reps = built(spec, args.target, out, tag)
        except Exception:
            rows.append(dict(case=tag, ok=False, error=traceback.format_exc()[-800:]))
            print(f"{tag:34s} BUILD FAIL {rows[-1]['error'][-300:]}", flush=True)
            continue
        for path in paths:
            t0 = time.time()
            try:
                kernel = CudaKernel(src, code_path=path)
                rec = verify(kernel, spec, params, target=get_target(args.target), shapes=shapes_for(spec, params, full))
                bad = [c for c in rec.cases if not c.passed]
                row = dict(case=tag, path=path, ok=rec.passed, params=params, cases=len(rec.cases), passed=len(rec.cases) - len(bad),
                           max_err_o=rec.max_err_o, max_err_lse=rec.max_err_lse, max_o_ratio=max(c.o_ratio for c in rec.cases),
                           first_bad=(f"{bad[0].shape}: {bad[0].error or bad[0].worst}" if bad else None), regs=reps[0].registers,
                           smem=reps[0].shared_bytes, spills=reps[0].spill_bytes, statement=rec.statement)
            except Exception:
                row = dict(case=tag, path=path, ok=False, error=traceback.format_exc()[-800:])
            row["seconds"] = round(time.time() - t0, 1)
            rows.append(row)
            print(f"{tag:34s} {path:7s} {'PASS' if row['ok'] else 'FAIL'} {row.get('passed', 0)}/{row.get('cases', 0)} "
                  f"errO={row.get('max_err_o', math.nan):.2e} errLSE={row.get('max_err_lse', math.nan):.2e} {params} {row['seconds']}s "
                  f"{'' if row['ok'] else (row.get('first_bad') or row.get('error', ''))[-400:]}", flush=True)
    return rows


def _ttag(dtype, d, causal, B, Hq, Hkv, Sq, Sk) -> str:
    return f"{dtype}-d{d}-{'causal' if causal else 'full'}-B{B}-H{Hq}/{Hkv}-S{Sq}"


def _tspec(dtype, d, causal, B, Hq, Hkv, Sq, Sk) -> AttentionSpec:
    return AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=d, dtype=dtype, causal=causal)


def _bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def phase_time(args, out: Path, deadline: float) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    prebuild([("time-" + _ttag(*row).replace("/", "_"), _tspec(*row), True) for row in TIMING], args.target, out)
    for dtype, d, causal, B, Hq, Hkv, Sq, Sk in TIMING:
        if time.time() > deadline:
            print("timing: stopped (time budget)", flush=True)
            break
        tag = f"{dtype}-d{d}-{'causal' if causal else 'full'}-B{B}-H{Hq}/{Hkv}-S{Sq}"
        spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=d, dtype=dtype, causal=causal)
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, Hq, Sq, d, device="cuda", dtype=dt, generator=g)
        k = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=dt, generator=g)
        v = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=dt, generator=g)
        flops = 4 * B * Hq * Sq * Sk * d * (0.5 if causal else 1.0)
        row = dict(case=tag)
        try:
            src, params, reps = built(spec, args.target, out, "time-" + tag.replace("/", "_"))
            row["params"] = params
            for path in ("native", "turing"):
                kern = CudaKernel(src, code_path=path)
                o, lse = kern(q, k, v, scale=spec.scale)
                row[path] = _bench(lambda: kern(q, k, v, scale=spec.scale))
        except Exception:
            row["error"] = traceback.format_exc()[-600:]
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                kk = k.repeat_interleave(Hq // Hkv, dim=1) if Hkv != Hq else k
                vv = v.repeat_interleave(Hq // Hkv, dim=1) if Hkv != Hq else v
                row["sdpa_flash"] = _bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=causal))
        except Exception as err:
            row["sdpa_flash_error"] = str(err)[:200]
        if args.triton:
            try:
                from ...backends import get_backend
                tb = get_backend("triton")
                t = get_target(args.target)
                p = next(plans_for(tb, spec, t))
                tr = tb.translate(p.program, head_dim=d, head_dim_v=d, file="kernel.tl")
                tp = out / "src" / ("triton-" + tag.replace("/", "_") + ".py")
                tp.write_text(tr.source)
                tk = tb.load(tp, interpret=False)
                tk(q, k, v, scale=spec.scale)
                row["triton"] = _bench(lambda: tk(q, k, v, scale=spec.scale))
            except Exception:
                row["triton_error"] = traceback.format_exc()[-300:]
        for key in ("native", "turing", "sdpa_flash", "triton"):
            if key in row:
                row[key + "_tflops"] = flops / row[key] / 1e9
        rows.append(row)
        print(f"{tag:36s} " + "  ".join(f"{key}={row[key]:.3f}ms ({row[key + '_tflops']:.0f} TF)" for key in ("native", "turing", "triton", "sdpa_flash") if key in row)
              + (f"  native/flash={row['sdpa_flash'] / row['native']:.2f}x" if "native" in row and "sdpa_flash" in row else "")
              + (f"  ERR {row.get('error', '')[-300:]}" if "error" in row else ""), flush=True)
    return rows


def phase_mutants(args, out: Path, deadline: float) -> list[dict]:
    from ...selftest.child import verify_in_child
    from ...selftest.mutants import CUDA_MUTANTS, SPECS
    from .compile import lint

    rows = []
    for mutant in CUDA_MUTANTS:
        spec, _ = SPECS[mutant.spec]
        src, params, _ = build(spec, args.target, out, f"mutant-base-{mutant.spec}")
        text = mutant.apply(src.read_text())
        mpath = out / "src" / f"mutant-{mutant.name}.cu"
        mpath.write_text(text)
        try:
            lint(text)
            static = None
        except Exception as err:
            static = str(err)[:200]
        # the GPU verdict without the lint: the mutant compiled as written, verified in a process of its own
        os.environ["ATTNFORGE_CUDA_NO_LINT"] = "1"
        try:
            try:  # nvcc here first (compile_cubin caches by content), so that the child's deadline is its verification's
                compile_cubin(text, arch_of(torch.cuda.get_device_capability()), os.environ.get("ATTNFORGE_CUDA_PATH", "native"))
            except (AttnforgeError, OSError):
                pass  # the child meets the same error, and reports it as never judged
            passed, killed_gpu, detail = verify_in_child("attnforge.backends.cuda.gpucheck", mpath, mutant.spec, params, MUTANT_DEADLINE_S,
                                                         ("--target", args.target))
        finally:
            os.environ.pop("ATTNFORGE_CUDA_NO_LINT", None)
        rows.append(dict(mutant=mutant.name, killed_statically=static is not None, static=static, killed_by_gpu=killed_gpu, detail=detail[:300]))
        print(f"mutant {mutant.name:34s} static={'KILLED' if static else 'survived'} gpu={'KILLED' if killed_gpu else 'SURVIVED' if passed else 'NOT JUDGED'} {detail[:200]}", flush=True)
    return rows


def _verify_one(path: Path, spec_key: str, params: dict, target_name: str) -> None:
    """Child process: verify the CUDA source at ``path`` for the spec; exit 0 passed, 1 failed."""
    from ...selftest.child import exit_with_verdict
    from ...selftest.mutants import SPECS

    spec, _ = SPECS[spec_key]
    exit_with_verdict(verify(CudaKernel(path), spec, params, target=get_target(target_name), shapes=shapes_for(spec, params, False)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/cuda-gpucheck")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--phase", default="verify,time,mutants")
    ap.add_argument("--budget", type=float, default=200.0, help="seconds; no new case starts after it")
    ap.add_argument("--triton", action="store_true", help="time the Triton kernels too (JIT compiles on the GPU machine)")
    ap.add_argument("--verify-one", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.verify_one:
        _verify_one(Path(args.verify_one), args.spec, json.loads(args.params), args.target)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + args.budget
    print(f"GPU: {torch.cuda.get_device_name()} cc {torch.cuda.get_device_capability()}; torch {torch.__version__}; loader {os.environ.get('ATTNFORGE_CUDA_LOADER', 'auto')}", flush=True)
    result = {}
    phases = args.phase.split(",")
    for phase, fn, reserve in (("verify", phase_verify, 75), ("mutants", phase_mutants, 55), ("time", phase_time, 0)):
        if phase in phases:
            try:
                result[phase] = fn(args, out, deadline - (reserve if "time" in phases else 0))
            except Exception:
                print(f"phase {phase} failed: {traceback.format_exc()[-1500:]}", flush=True)
            (out / "cuda_gpucheck.json").write_text(json.dumps(result, indent=1, default=str))
    if "verify" in result:
        v = result["verify"]
        print(f"verify: {sum(r['ok'] for r in v)}/{len(v)} pass; total {time.time() - start:.0f}s")


if __name__ == "__main__":
    main()
