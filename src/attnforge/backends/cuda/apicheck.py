"""GPU check of the user-facing paths with the CUDA backend: attnforge.attention(backend="cuda")
against SDPA in float32, both loaders (CuPy and the driver API). Run on a GPU machine:
    PYTHONPATH=src:.gpu_deps python3 -m attnforge.backends.cuda.apicheck"""

from __future__ import annotations

import torch

import attnforge


def main() -> None:
    torch.manual_seed(0)
    for loader in ("cupy",):
        for dtype, causal, hq, hkv, d in ((torch.bfloat16, True, 8, 2, 128), (torch.float16, False, 4, 4, 64)):
            q = torch.randn(2, hq, 333, d, device="cuda", dtype=dtype)
            k = torch.randn(2, hkv, 517, d, device="cuda", dtype=dtype)
            v = torch.randn_like(k)
            o, lse = attnforge.attention(q, k, v, causal=causal, return_lse=True, backend="cuda")
            kk, vv = (t.repeat_interleave(hq // hkv, dim=1).float() for t in (k, v))
            # bottom-right causal: query i sees keys j <= i + Sk - Sq
            mask = torch.ones(333, 517, device="cuda", dtype=torch.bool).tril(517 - 333) if causal else None
            ref = torch.nn.functional.scaled_dot_product_attention(q.float(), kk, vv, attn_mask=mask)
            err = ((o.float() - ref).norm() / ref.norm()).item()
            print(f"loader={loader} {dtype} causal={causal} Hq={hq}/{hkv} D={d}: rel err vs SDPA fp32 {err:.2e} {'OK' if err < 1e-2 else 'BAD'}", flush=True)
    # the driver-API loader on a kernel directory from `attnforge generate --backend cuda` (argv[1])
    import sys

    from .kernel import CudaKernel

    if len(sys.argv) > 1:
        kern = CudaKernel(f"{sys.argv[1]}/kernel_cuda.cu", loader="driver")
        q = torch.randn(3, 8, 700, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(3, 2, 900, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        o, lse = kern(q, k, v)
        mask = torch.ones(700, 900, device="cuda", dtype=torch.bool).tril(200)
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), *(t.repeat_interleave(4, dim=1).float() for t in (k, v)), attn_mask=mask)
        err = ((o.float() - ref).norm() / ref.norm()).item()
        print(f"loader=driver bf16 causal GQA 8/2 D=128: rel err vs SDPA fp32 {err:.2e} {'OK' if err < 1e-2 else 'BAD'}", flush=True)


if __name__ == "__main__":
    main()
