"""Where a persistent Gluon prefill kernel loses time per work tile: generated modules (and variants of
them) checked against a float64 reference, then timed beside cuDNN on the short rows and on a key-length
sweep at a fixed number of work tiles, whose intercept is the fixed cost of a work tile.

Usage (on an H100/H200 from the repository root, .gpu_deps carried):
    PYTHONPATH=src:.gpu_deps python3 bench/gluon_tile_overhead.py --out $OUT NAME=DIR[:double_q] ...

Each NAME=DIR[:VARIANT+VARIANT...] is an ``attnforge generate --backend gluon`` output directory of a kernel without a mask
(its kernel_gluon.py); the variants rewrite the module (experiments for the emitter, not its output):
``double_q`` the persistent Q buffer into two slots (Q of the next work tile loads while this one's last
GEMMs run), ``no_o_store`` (a diagnostic, timed only) O not written at all. Run 9's ``named_turns`` (the ping-pong
turn on hardware named barriers) is what the emitter writes now (the tool as run 9 ran it, on kernels of 4c96def:
git show 2e9990f:bench/gluon_tile_overhead.py), and so is run 10's ``split_free`` (K's ring slot given back after its
QK^T GEMM on a barrier of its own: git show 0da2f28:bench/gluon_tile_overhead.py, on modules of bbf83f3). Run 7's ``tma_store`` and ``qs_store``
(bench/RESULTS.md) are the emitter's ``ostage = 1`` and ``2`` now (docs/TL.md section 11.5), which the planner writes:
generate the kernels with and without them instead (the rewrites as run are in git at f484df2).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

_DOUBLE_Q = [  # (old, new): the one persistent Q slot becomes two, indexed by the work tile's parity
    ("Qs = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)",
     "Qs = gl.allocate_shared_memory(q_desc.dtype, [2] + q_desc.block_type.shape, q_desc.layout)"),
    ("q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())\n    mbarrier.init(q_ready, count=1)",
     "q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())\n"
     "    mbarrier.init(q_ready.index(0), count=1)\n    mbarrier.init(q_ready.index(1), count=1)"),
    ("q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())\n    mbarrier.init(q_free, count=2)",
     "q_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())\n"
     "    mbarrier.init(q_free.index(0), count=2)\n    mbarrier.init(q_free.index(1), count=2)"),
    ("mbarrier.wait(q_free, (tiles + 1) % 2)", "mbarrier.wait(q_free.index(tiles % 2), (tiles // 2 + 1) % 2)"),
    ("mbarrier.expect(q_ready, q_desc.block_type.nbytes)", "mbarrier.expect(q_ready.index(tiles % 2), q_desc.block_type.nbytes)"),
    ("q_ready, Qs)", "q_ready.index(tiles % 2), Qs.index(tiles % 2))"),
    ("    q_t = Qs.reshape([BM, D]).slice(WG * HM, HM)\n", ""),
    ("mbarrier.wait(q_ready, ((0) + tiles) % 2)",
     "mbarrier.wait(q_ready.index(tiles % 2), (tiles // 2) % 2)\n        q_t = Qs.index(tiles % 2).reshape([BM, D]).slice(WG * HM, HM)"),
    ("mbarrier.arrive(q_free, count=1)", "mbarrier.arrive(q_free.index(tiles % 2), count=1)"),
]


_O_STORE = "        gl.store(o_ptrs, out, mask=gl.expand_dims(o_rows, 1) < Sq)\n"

VARIANTS = {
    "double_q": _DOUBLE_Q,
    "no_o_store": [(_O_STORE, "")],  # a diagnostic: O never written (timed only, not checked)
}


def rewrite(text: str, variant: str) -> str:
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    for old, new in VARIANTS[variant]:
        if text.count(old) != 1:
            raise SystemExit(f"{variant}: {old!r} occurs {text.count(old)} times, not once")
        text = text.replace(old, new)
    return text


def load(name: str, path: Path, variant: str | None, work: Path):
    text = (path / "kernel_gluon.py").read_text()
    for v in filter(None, (variant or "").split("+")):
        text = rewrite(text, v)
    f = work / f"{name}.py"
    f.write_text(text)
    spec = importlib.util.spec_from_file_location(f"k_{name}", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("kernels", nargs="+")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mods, unchecked = {}, set()
    for item in a.kernels:
        name, _, rest = item.partition("=")
        path, _, variant = rest.partition(":")
        mods[name] = load(name, Path(path), variant or None, out)
        if "no_o_store" in variant:
            unchecked.add(name)

    def run(mod, q, k, v):
        o = torch.empty(q.shape[:3] + (v.shape[3],), device=q.device, dtype=q.dtype)
        lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
        mod.launch(q, k, v, o, lse, scale=q.shape[-1] ** -0.5, checked=True)
        return o, lse

    def rand(B, H, S, D, dt):
        return torch.randn(B, H, S, D, device="cuda", dtype=dt)

    rows, checks = [], []
    for name, mod in ((n, m) for n, m in mods.items() if n not in unchecked):  # correctness first: odd lengths, and many work tiles per program
        D, dt = mod.HEAD_DIM, mod.TENSOR_DTYPES["q"]
        for B, H, Sq, Sk in ((3, 4, 777, 1031), (8, 2048 // D, 1024, 1024)):
            q, k, v = rand(B, H, Sq, D, dt), rand(B, H, Sk, D, dt), rand(B, H, Sk, D, dt)
            o, lse = run(mod, q, k, v)
            worst = 0.0
            for b in (0, B - 1):
                s = (q[b].double() @ k[b].double().transpose(-1, -2)) * D ** -0.5
                ref = torch.softmax(s, -1) @ v[b].double()
                worst = max(worst, ((o[b].double() - ref).norm() / ref.norm()).item(),
                            (lse[b].double() - torch.logsumexp(s, -1)).abs().max().item())
            ok = worst < (1e-2 if dt == torch.bfloat16 else 2e-3)
            checks.append(dict(kernel=name, shape=[B, H, Sq, Sk], err=worst, ok=ok))
            print(f"check {name} {B}x{H}x{Sq}x{Sk}: {worst:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    if not all(c["ok"] for c in checks):
        print("a kernel failed its check: not timed")
        (out / "overhead.json").write_text(json.dumps(dict(checks=checks), indent=1))
        return 1

    dims = sorted({m.HEAD_DIM for m in mods.values()})
    for D in dims:
        H = 2048 // D
        same = {n: m for n, m in mods.items() if m.HEAD_DIM == D}
        dt = next(iter(same.values())).TENSOR_DTYPES["q"]
        for B, Sq, Sk in ((16, 1024, 1024), (16, 1024, 2048), (16, 1024, 4096), (4, 4096, 4096)):
            q, k, v = rand(B, H, Sq, D, dt), rand(B, H, Sk, D, dt), rand(B, H, Sk, D, dt)
            fns = {"cudnn": lambda: F.scaled_dot_product_attention(q, k, v)}
            fns |= {n: (lambda m=m: run(m, q, k, v)) for n, m in same.items()}
            times = {n: [] for n in fns}
            for _ in range(a.rounds):
                for n, fn in fns.items():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        times[n].append(triton.testing.do_bench(fn, warmup=25, rep=50))
            med = {n: statistics.median(t) for n, t in times.items()}
            flops = 4 * B * H * Sq * Sk * D
            row = dict(D=D, B=B, H=H, Sq=Sq, Sk=Sk, ms=med, tflops={n: flops / t * 1e-9 for n, t in med.items()})
            rows.append(row)
            print(f"D={D} {B}x{H}x{Sq}x{Sk}: cudnn {row['tflops']['cudnn']:.0f} TF/s | "
                  + " ".join(f"{n} {med['cudnn'] / t:.3f}x" for n, t in med.items() if n != "cudnn"), flush=True)
    # the fixed cost per work tile: time at Sq = 1k against Sk, a line through 1k, 2k, 4k keys
    tiles = {}
    for D in dims:
        pts = [r for r in rows if r["D"] == D and r["Sq"] == 1024]
        for n in pts[0]["ms"]:
            xs, ys = [r["Sk"] for r in pts], [r["ms"][n] for r in pts]
            slope = (ys[-1] - ys[0]) / (xs[-1] - xs[0])
            intercept = ys[0] - slope * xs[0]
            work = 16 * (2048 // D) * 8  # work tiles of BM = 128 at Sq = 1k
            tiles[f"D{D} {n}"] = dict(ms_per_1k_keys=slope * 1024, intercept_ms=intercept,
                                      us_per_work_tile_per_sm=intercept * 1e3 / math.ceil(work / 132))
    for k_, t in tiles.items():
        print(f"{k_}: {t['ms_per_1k_keys']:.3f} ms per 1k keys, intercept {t['intercept_ms']:.3f} ms "
              f"({t['us_per_work_tile_per_sm']:.2f} us per work tile of an SM)")
    (out / "overhead.json").write_text(json.dumps(dict(checks=checks, rows=rows, tiles=tiles), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
