"""Run 20 (issue 12): the H200's ceiling for the mma.sync instructions the CUDA backend issues, measured with nothing else
in the loop: each warp runs CHAINS independent accumulators through ITERS rounds of one mma shape, operands in registers,
no memory traffic. What attention at 1.2x FlashAttention-2 would need of it is the comparison this is for.

    python3 mma_sync_peak.py build DIR   # on the CPU: one cubin a (shape, dtype), nvcc for sm_90
    python3 mma_sync_peak.py time DIR    # on the GPU: TFLOP/s for 4, 8 and 16 warps an SM; FlashAttention-2 beside
"""
import json, sys
from pathlib import Path

SHAPES = {  # name: (PTX shape, A regs, B regs, FLOPs an instruction)
    "m16n8k16.f16": ("m16n8k16.row.col.f32.f16.f16.f32", 4, 2, 2 * 16 * 8 * 16),
    "m16n8k16.bf16": ("m16n8k16.row.col.f32.bf16.bf16.f32", 4, 2, 2 * 16 * 8 * 16),
    "m16n8k8.f16": ("m16n8k8.row.col.f32.f16.f16.f32", 2, 1, 2 * 16 * 8 * 8),
}
CHAINS, ITERS = 8, 4096


def source(shape: str) -> str:
    ptx, na, nb, _ = SHAPES[shape]
    a = ", ".join(f"%{4 + i}" for i in range(na))
    b = ", ".join(f"%{4 + na + i}" for i in range(nb))
    ins = ", ".join([f'"r"(a[{i}])' for i in range(na)] + [f'"r"(b[{i}])' for i in range(nb)])
    return f"""
extern "C" __global__ void peak(float* out, int iters) {{
    unsigned a[{na}], b[{nb}];
    for (int i = 0; i < {na}; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x * (i + 1));  // small finite halves
    for (int i = 0; i < {nb}; ++i) b[i] = 0x3c003c00u ^ (threadIdx.x * (i + 7));
    float acc[{CHAINS}][4] = {{}};
    for (int it = 0; it < iters; ++it) {{
#pragma unroll
        for (int c = 0; c < {CHAINS}; ++c)
            asm volatile("mma.sync.aligned.{ptx} {{%0, %1, %2, %3}}, {{{a}}}, {{{b}}}, {{%0, %1, %2, %3}};"
                         : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3]) : {ins});
    }}
    float s = 0.f;
    for (int c = 0; c < {CHAINS}; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}}
"""


def build(d: Path) -> None:
    sys.path.insert(0, "src")
    import os
    os.environ["ATTNFORGE_CUDA_NO_LINT"] = "1"  # the linter reads attnforge kernels, not this probe
    from attnforge.backends.cuda.compile import compile_cubin, sass_mix
    d.mkdir(parents=True, exist_ok=True)
    for shape in SHAPES:
        cubin, _, _, _ = compile_cubin(source(shape), "sm_90")
        (d / f"{shape}.cubin").write_bytes(cubin)
        hmma = {k: v for k, v in sass_mix(cubin).items() if "HMMA" in k}
        print(shape, hmma)


def time(d: Path) -> None:
    import ctypes
    import torch
    from attnforge.backends.cuda.kernel import _DriverFunction
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape, (_, _, _, flops) in SHAPES.items():
        fn = _DriverFunction((d / f"{shape}.cubin").read_bytes(), "peak", 0, 0)
        for warps in (4, 8, 16):
            grid, threads = sms * 4, 32 * warps // 4  # four blocks an SM, WARPS warps an SM in all
            out = torch.empty(grid * threads, device="cuda")
            launch = fn.prepare(["out"], [("i32", ITERS)])
            stream = torch.cuda.current_stream().cuda_stream
            for _ in range(3):
                launch({"out": out}, grid, threads, 0, stream)
            torch.cuda.synchronize()
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            best = float("inf")
            for _ in range(10):
                t0.record(); launch({"out": out}, grid, threads, 0, stream); t1.record(); torch.cuda.synchronize()
                best = min(best, t0.elapsed_time(t1))
            tf = grid * threads / 32 * CHAINS * ITERS * flops / (best * 1e-3) / 1e12
            rows.append(dict(shape=shape, warps_per_sm=warps, ms=best, tflops=round(tf, 1)))
            print(f"{shape:16s} {warps:2d} warps/SM  {best:7.3f} ms  {tf:6.1f} TFLOP/s", flush=True)
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for D, H in ((64, 32), (128, 16), (256, 8)):  # the bench's 16k non-causal bf16 rows, FlashAttention-2 beside the ceiling
        q, k, v = (torch.randn(1, H, 16384, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ms = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v), warmup=25, rep=100, return_mode="median")
        tf = 4 * H * 16384 * 16384 * D / (ms * 1e-3) / 1e12
        rows.append(dict(shape=f"fa2 d{D} 16k bf16", ms=ms, tflops=round(tf, 1)))
        print(f"FlashAttention-2 D={D} 16k bf16  {ms:7.3f} ms  {tf:6.1f} TFLOP/s", flush=True)
    (d / "mma_sync_peak.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    {"build": build, "time": time}[sys.argv[1]](Path(sys.argv[2]))
