"""Generated CUDA decode files side by side on the local GPU, and attention()'s own calls: GB/s of
Q, K and V by do_bench, by replaying a CUDA graph of one call (the kernels alone, no host work),
and the host time to issue one call back to back (100 calls, then a sync). For comparing two
versions of the backend's output on the same inputs (bf16, GQA 32/8, D=128, Sq=1):

    git show OLD:src/... # or: generate each version's source with bench/cuda_decode_tiles.build
    PYTHONPATH=src:.gpu_deps python3 bench/cuda_decode_ab.py old=OLD.cu new=NEW.cu
"""

from __future__ import annotations

import sys
import time

import torch
from triton.testing import do_bench

import attnforge
from attnforge.backends.cuda.kernel import CudaKernel
from attnforge.reference import attention_reference
from cuda_decode_tiles import captured  # bench/: the script's own directory


def graph_ms(f) -> float:
    return sorted(do_bench(captured(f).replay, warmup=10, rep=40) for _ in range(3))[1]


def main() -> None:
    files = dict(a.split("=", 1) for a in sys.argv[1:])
    kernels = {name: CudaKernel(path) for name, path in files.items()}
    for B, Sk in ((64, 4096), (8, 32768)):
        q = torch.randn(B, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, 8, Sk, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, 8, Sk, 128, device="cuda", dtype=torch.bfloat16)
        gb = (q.numel() + k.numel() + v.numel()) * 2 / 1e9
        ref = torch.as_tensor(attention_reference(q, k, v)[0]).float()
        calls = {name: (lambda kern=kern: kern(q, k, v)) for name, kern in kernels.items()}
        calls["attention-cuda"] = lambda: attnforge.attention(q, k, v, backend="cuda")
        calls["attention-triton"] = lambda: attnforge.attention(q, k, v, backend="triton")
        for name, f in calls.items():
            o = f()
            o = o[0] if isinstance(o, tuple) else o
            err = (o.float() - ref).abs().max().item()
            t = sorted(do_bench(f, warmup=10, rep=40) for _ in range(3))[1]
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(100):
                f()
            host = (time.perf_counter() - start) / 100 * 1e3
            torch.cuda.synchronize()
            print(f"B={B} Sk={Sk} {name:16s} {gb / t * 1e3:6.0f} GB/s do_bench, {gb / graph_ms(f) * 1e3:6.0f} GB/s in a graph, "
                  f"host {host:.3f} ms a call; max |O - ref| {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
