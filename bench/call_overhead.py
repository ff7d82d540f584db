"""On a GPU: the host cost of one ``attnforge.attention`` call, beside SDPA's cuDNN backend.

    python bench/call_overhead.py [--json FILE]

For a few small shapes (short kernels, where the host sets the pace) it measures, after warm-up:
  issue   -- back-to-back calls without a sync: wall time per call (host issue rate)
  stubbed -- the same with every kernel launch replaced by a no-op: attnforge's own host code
  launch  -- the C launcher alone, called again with the last call's arguments: the launch itself
  kernel  -- CUDA-event time per call of a long back-to-back run (the GPU's side)
  sdpa    -- SDPA (cuDNN) issue time per call, the same way
and checks that ``attention()`` can be captured in a CUDA graph and replayed to the same output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

os.environ.setdefault("ATTNFORGE_CACHE", tempfile.mkdtemp(prefix="afcache-"))
import attnforge  # noqa: E402


def issue_time(fn, calls: int = 300, repeats: int = 5) -> float:
    """Median over repeats of (wall time of ``calls`` back-to-back calls) / calls, in us."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        times.append((t1 - t0) / calls * 1e6)
    return statistics.median(times)


def gpu_time(fn, calls: int = 200) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def _recorded_launches():
    """The direct launches (``direct.DirectLaunch``) attention()'s dispatch cache holds now."""
    from attnforge import api

    return [slot.direct for prepared in api._dispatch.values() for slot in prepared.slots if slot is not None and slot.direct is not None]


class _Stub:
    """Replaces every kernel launch with a no-op: the Triton JIT launch (``JITFunction.run``),
    a recorded kernel's ``CompiledKernel.run``, and the C launcher call of a direct launch (the
    arguments are still assembled: that is our code)."""

    def __enter__(self):
        import triton.runtime.jit as jit
        from triton.compiler.compiler import CompiledKernel

        self.jit, self.saved = jit.JITFunction, jit.JITFunction.run
        jit.JITFunction.run = lambda self, *a, **k: None
        self.compiled, self.compiled_run = CompiledKernel, CompiledKernel.__dict__["run"]
        CompiledKernel.run = property(lambda self: (lambda *a, **k: None))
        self.direct = [(d, d.c_launch) for d in _recorded_launches()]
        for d, _ in self.direct:
            d.c_launch = lambda *a: None
        return self

    def __exit__(self, *exc):
        self.jit.run = self.saved
        self.compiled.run = self.compiled_run
        for d, c_launch in self.direct:
            d.c_launch = c_launch


def launch_alone_time(fn) -> float:
    """Issue time of the C launcher alone: the direct launches of one call of ``fn`` (two for
    split-KV decode), repeated with the same arguments (no attnforge code, no allocation): what
    'the launch itself' costs."""
    from attnforge.backends.triton.direct import DirectLaunch

    seen = []
    call = DirectLaunch.__call__
    DirectLaunch.__call__ = lambda self, grid, args, device: seen.append((self, grid, args, device)) or call(self, grid, args, device)
    try:
        fn()
    finally:
        DirectLaunch.__call__ = call
    if not seen:
        return float("nan")
    launches = []
    for direct, grid, args, device in seen:
        saved = direct.c_launch
        direct.c_launch = lambda *a: launches.append((saved, a))
        try:
            direct(grid, args, device)
        finally:
            direct.c_launch = saved

    def replay() -> None:
        for c_launch, final in launches:
            c_launch(*final)
    return issue_time(replay)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    shapes = [("B1 H8/8 S128 D64 fp16", 1, 8, 8, 128, 64, torch.float16, False),
              ("B2 H32/8 S1024 D128 bf16 causal", 2, 32, 8, 1024, 128, torch.bfloat16, True),
              ("decode B64 H32/8 Sk4096 D128 bf16", 64, 32, 8, 4096, 128, torch.bfloat16, False)]
    for name, B, Hq, Hkv, S, D, dtype, causal in shapes:
        Sq = 1 if name.startswith("decode") else S
        q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Hkv, S, D, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        with torch.no_grad():
            ours = lambda: attnforge.attention(q, k, v, causal=causal)  # noqa: E731
            ours()
            ours()
            sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal and Sq == S, enable_gqa=Hq != Hkv)  # noqa: E731
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                sdpa()
                row = {"shape": name, "sdpa_issue_us": issue_time(sdpa), "sdpa_kernel_us": gpu_time(sdpa)}
            # a dispatch-cache hit (checks skipped, the recorded kernel launched directly) still computes the right thing
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=Hq != Hkv)
            row["hit_rel_err"] = float((ours().double() - ref).norm() / ref.norm())
            row["issue_us"] = issue_time(ours)
            row["kernel_us"] = gpu_time(ours)
            with _Stub():
                row["stubbed_us"] = issue_time(ours)
            row["launch_alone_us"] = launch_alone_time(ours)
            # CUDA graph: capture one call, replay, compare with an eager call
            try:
                expect = ours().clone()
                graph = torch.cuda.CUDAGraph()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    ours()
                torch.cuda.current_stream().wait_stream(stream)
                with torch.cuda.graph(graph):
                    captured = ours()
                graph.replay()
                torch.cuda.synchronize()
                row["graph_equal"] = bool(torch.equal(captured, expect))
                row["graph_replay_us"] = issue_time(graph.replay, calls=200)
            except Exception as err:  # reported, not fatal: the other numbers still count
                row["graph_equal"], row["graph_replay_us"], row["graph_error"] = False, float("nan"), f"{type(err).__name__}: {err}"[:300]
                print(f"{name}: CUDA graph failed: {row['graph_error']}")
        rows.append(row)
    # a launch hook (a profiler) sends hits through Triton's JIT with the checked path's descriptors: same output
    from triton import knobs

    q = torch.randn(2, 8, 300, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    with torch.no_grad():
        plain = attnforge.attention(q, k, v, causal=True)
        calls = []
        hook = lambda metadata: calls.append(1)  # noqa: E731
        knobs.runtime.launch_enter_hook.add(hook)
        try:
            hooked = attnforge.attention(q, k, v, causal=True)
        finally:
            knobs.runtime.launch_enter_hook.remove(hook)
        torch.cuda.synchronize()
    hook_row = {"hooked_equal": bool(torch.equal(plain, hooked)), "hook_calls": len(calls)}
    print(f"with a launch hook: output equal {hook_row['hooked_equal']}, hook called {hook_row['hook_calls']} time(s)")
    # where the host time of a dispatch-cache hit goes: cProfile over many calls of the first shape
    import cProfile
    import io
    import pstats

    print(f"triton launch_enter_hook: {knobs.runtime.launch_enter_hook!r}")
    q = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.float16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    with torch.no_grad():
        attnforge.attention(q, k, v)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            attnforge.attention(q, k, v)
        prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    print("\n".join(text.getvalue().splitlines()[:45]))
    print(f"{'shape':36} {'issue':>8} {'stubbed':>8} {'launch':>8} {'kernel':>8} {'sdpa iss':>8} {'sdpa ker':>8} {'graph':>6} {'replay':>7}  (us)")
    for r in rows:
        print(f"{r['shape']:36} {r['issue_us']:8.1f} {r['stubbed_us']:8.1f} {r['launch_alone_us']:8.1f} {r['kernel_us']:8.1f} {r['sdpa_issue_us']:8.1f} "
              f"{r['sdpa_kernel_us']:8.1f} {str(r['graph_equal']):>6} {r['graph_replay_us']:7.1f}  rel err {r['hit_rel_err']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows, "launch_hook": hook_row}, f, indent=1)


if __name__ == "__main__":
    main()
