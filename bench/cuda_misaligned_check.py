"""On a GPU: attention(backend="cuda") on a q that is contiguous but 8 bytes off a 16-byte boundary (a slice of
a flat buffer), three calls (the checked first, then the dispatch-cache hits), each judged against the float64
reference. The launcher copies such an input to a fresh, aligned buffer (cp.async reads 16-byte units).

    PYTHONPATH=src:.gpu_deps python3 bench/cuda_misaligned_check.py
"""

import torch, attnforge
from attnforge.reference import attention_reference
for dt in (torch.float16, torch.bfloat16):
    B, H, S, D = 2, 8, 300, 128
    flat = torch.randn(B * H * S * D + 4, device="cuda", dtype=dt)
    q = flat[4:].view(B, H, S, D)  # contiguous, 8 bytes off 16
    k = torch.randn(B, H, S, D, device="cuda", dtype=dt); v = torch.randn(B, H, S, D, device="cuda", dtype=dt)
    assert q.is_contiguous() and q.data_ptr() % 16 == 8
    for call in range(3):
        o = attnforge.attention(q, k, v, causal=True, backend="cuda")
        ref = torch.as_tensor(attention_reference(q, k, v, causal=True)[0])
        err = ((o.double() - ref).norm() / ref.norm()).item()
        print(dt, "call", call, "rel err", f"{err:.2e}", "OK" if err < 5e-3 else "FAIL", flush=True)
