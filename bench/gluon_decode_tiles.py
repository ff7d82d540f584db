"""Split-KV decode sweep for the Gluon backend: the planner's Hopper-form decode program at several
(BN, stages) rings, each built on the CPU, then on an H100/H200 checked against SDPA's math backend in
fp32 and timed in GB/s of Q, K and V beside SDPA's cuDNN backend, at several split counts (the split
rule aimed at 1, 2, 4 or 8 programs per SM; the planner's Hopper-form decode aims at 1). Each call is captured in a CUDA
graph and the replays timed (do_bench median, rounds in turns); one profiled replay per call splits its
time between the partial and the combine kernel. An exploration tool like bench/cuda_decode_tiles.py.

    # on the CPU (PYTHONPATH picks the source tree; --variants adds each module rewritten, VARIANTS below):
    PYTHONPATH=src python3 bench/gluon_decode_tiles.py build --out AB [--cand 64,3 ...] [--label NAME_] [--variants two pipe+bm16 ...]
    # on the GPU machine:
    PYTHONPATH=src:.gpu_deps python3 bench/gluon_decode_tiles.py time AB [--per-sm 1 2 4] [--eager]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_decode_tiles import ROWS, captured, row_inputs  # noqa: E402  (bench/: the script's own directory)

DEFAULT_CANDS = ["64,2", "64,3", "64,4", "64,6", "128,2", "128,3", "32,4", "32,6"]  # BN, stages
VARIANTS = {  # rewrites of a module (experiments, not the emitter's output)
    # the launch of one split running both kernels, as before the partial kernel stored into o and lse itself
    "two": [("one = NSPLIT == 1 and o.stride(3) == 1", "one = False")],
    # the partial kernel at 128 registers a thread (.maxnreg; the compute warpgroup setmaxnreg's 232): two programs an SM
    "nreg128": [("num_warps=WG_WARPS, slots=slots", "num_warps=WG_WARPS, maxnreg=128, slots=slots")],
    # (pipe, bm16: modules with a Triton combine kernel, built from a tree before gluon/merge.py, 2026-12-02 run 13)
    # the combine's loop over the splits software-pipelined by Triton (its loads issued stages ahead)
    "pipe": [("    for s in range(0, NSPLIT):", "    for s in tl.range(0, NSPLIT, num_stages=3):")],
    # the combine on 16 rows (the 4 packed rows of a K/V head's group) in 4 warps, not 64 in 8
    "bm16": [("(-(-((Hq // Hkv) * Sq) // 64))),), (o, lse", "(-(-((Hq // Hkv) * Sq) // 16))),), (o, lse"),
             ("DV_PAD=128, BM=64,", "DV_PAD=128, BM=16,"),
             ("num_warps=8, num_stages=2, slots=slots, index=1)", "num_warps=4, num_stages=2, slots=slots, index=1)")],
}


def build(args: argparse.Namespace) -> None:
    from attnforge.backends.gluon import GluonBackend
    from attnforge.plan.hopper import hopper_decode_source
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.tl import check, parse

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = get_target("h200")
    B, Hq, Hkv, Sk = ROWS["decode-b64-sk4k"]  # one module serves every batch and KV length
    spec = AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, head_dim=128, dtype="bf16", seqlen_q=1, seqlen_k=Sk)
    for cand in args.cand:
        bn, stages = (int(x) for x in cand.split(","))
        text = hopper_decode_source(spec, target, dict(BM=64, BN=bn, warps=4, stages=stages))
        program = parse(text, file="kernel.tl")
        result = check(program, target, head_dim=128, head_dim_v=128, file="kernel.tl")
        if not result.ok:
            print(f"BN{bn}-st{stages}: refused by the checker: {result.errors[0].message}", flush=True)
            continue
        source = GluonBackend().translate(program, head_dim=128, head_dim_v=128).source
        path = out / f"dec_{args.label}bn{bn}_st{stages}.py"
        path.write_text(source)
        print(path, flush=True)
        for variant in args.variants:
            text = source
            for part in variant.split("+"):
                for old, new in VARIANTS[part]:
                    if text.count(old) != 1:
                        raise SystemExit(f"{path}: variant {part}: {old!r} occurs {text.count(old)} times, not once")
                    text = text.replace(old, new)
            path = out / f"dec_{args.label}bn{bn}_st{stages}_{variant.replace('+', '_')}.py"
            path.write_text(text)
            print(path, flush=True)


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernel_times(graph) -> dict[str, float]:
    """Device microseconds of each kernel in one replay of ``graph``, by name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    got: dict[str, float] = {}
    for e in prof.events():
        if e.device_time > 0:
            got[e.name] = got.get(e.name, 0.0) + e.device_time
    return got


def time_modules(args: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from attnforge.splits import split_count

    ab = Path(args.ab)
    mods = {p.stem: _module(p) for p in sorted(ab.glob("dec_*.py"))}
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    results: list[dict] = []
    for r, (B, Hq, Hkv, Sk) in ROWS.items():
        q, k, v, scale, gbytes, ref = row_inputs(B, Hq, Hkv, Sk)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
        provs, meta = {"cudnn": cudnn}, {}
        for name, mod in mods.items():
            for per_sm in args.per_sm:
                o = torch.empty_like(q)
                lse = torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
                nsplit = split_count(B * Hkv, -(-Sk // mod.DESC_BLOCKS['k'][2]), sm, per_sm)

                def call(mod=mod, o=o, lse=lse, per_sm=per_sm):
                    # the split rule aimed at per_sm programs per SM, whatever the TL's launch line says (the graph
                    # records the launches of this one call)
                    mod.split_count = lambda programs, tiles, sms, _per_sm=None: split_count(programs, tiles, sms, per_sm)
                    mod.launch(q, k, v, o, lse, scale=scale, checked=True)
                call()
                torch.cuda.synchronize()
                label = f"{name}-x{per_sm}"
                err = float((o.float() - ref).abs().max())
                provs[label] = call
                meta[label] = dict(row=r, cand=name, per_sm=per_sm, nsplit=nsplit, err=err, ok=err < 2e-2)
        graphs = {p: captured(f) for p, f in provs.items()}
        times = {p: [] for p in provs}
        for _ in range(args.rounds):
            for p, g in graphs.items():  # --eager: each call as the caller makes it (launch() on the host), as attnforge bench times
                times[p].append(do_bench(provs[p] if args.eager else g.replay, warmup=10, rep=args.rep_ms))
        med = {p: sorted(t)[len(t) // 2] for p, t in times.items()}
        cudnn_kernels = _kernel_times(graphs["cudnn"])
        print(f"{r}: cudnn {gbytes / med['cudnn'] * 1e3:.0f} GB/s ({med['cudnn'] * 1e3:.1f} us; kernels "
              + ", ".join(f"{k[:40]} {t:.1f} us" for k, t in cudnn_kernels.items()) + ")", flush=True)
        for label, e in meta.items():
            kernels = _kernel_times(graphs[label])
            part = sum(t for k, t in kernels.items() if "attn_decode_partial" in k)
            comb = sum(t for k, t in kernels.items() if "attn_decode_combine" in k)
            e |= dict(ms=med[label], gbps=gbytes / med[label] * 1e3, vs_cudnn=med["cudnn"] / med[label], partial_us=part, combine_us=comb)
            print(f"  {label:20s} NSPLIT {e['nsplit']:2d} err {e['err']:.1e}{'' if e['ok'] else ' FAIL'} {e['gbps']:6.0f} GB/s "
                  f"{e['vs_cudnn']:.3f}x cudnn  partial {part:6.1f} us combine {comb:5.1f} us", flush=True)
            results.append(e)
        results.append({"row": r, "cudnn_ms": med["cudnn"]})
        (ab / "gluon_decode_tiles.json").write_text(json.dumps(results, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write AB/dec_bnBN_stST.py for each candidate (CPU)")
    b.add_argument("--out", required=True)
    b.add_argument("--cand", nargs="+", default=DEFAULT_CANDS, help="BN,stages pairs")
    b.add_argument("--label", default="", help="a prefix for the file names (modules of two source trees side by side)")
    b.add_argument("--variants", nargs="*", default=[], choices=None, help=f"also each module rewritten: {', '.join(VARIANTS)}, or several joined by +")
    t = sub.add_parser("time", help="check and time every module in AB (GPU)")
    t.add_argument("ab")
    t.add_argument("--per-sm", type=int, nargs="+", default=[1, 2, 4])
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--rep-ms", type=int, default=30)
    t.add_argument("--eager", action="store_true", help="time the calls themselves, not CUDA graph replays of them")
    args = ap.parse_args()
    build(args) if args.cmd == "build" else time_modules(args)


if __name__ == "__main__":
    main()
