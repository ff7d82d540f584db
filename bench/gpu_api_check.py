"""On a GPU: attnforge.attention against SDPA (math backend, float64) for a few calls, BSHD too,
inside torch.compile, and the requires-grad refusal. Prints one line per check."""

import os
import tempfile

import torch
import torch.nn.functional as F

import attnforge

os.environ.setdefault("ATTNFORGE_CACHE", tempfile.mkdtemp(prefix="afcache-"))
torch.manual_seed(0)
dev = "cuda"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


for dtype in (torch.float16, torch.bfloat16):
    q = torch.randn(2, 16, 1000, 128, device=dev, dtype=dtype)
    k = torch.randn(2, 4, 1000, 128, device=dev, dtype=dtype)
    v = torch.randn(2, 4, 1000, 128, device=dev, dtype=dtype)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True)
    o = attnforge.attention(q, k, v, causal=True)
    print(f"attention gqa causal {dtype}: rel err vs SDPA(float64) {rel(o, ref):.2e}")
    ob = attnforge.attention(q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous(), causal=True, layout="bshd")
    print(f"attention bshd {dtype}: rel err {rel(ob.transpose(1, 2), ref):.2e}, output shape {tuple(ob.shape)}")
    f = torch.compile(lambda q, k, v: attnforge.attention(q, k, v, causal=True) + 1.0, fullgraph=True)
    print(f"torch.compile(inductor) {dtype}: rel err {rel(f(q, k, v) - 1.0, ref):.2e}")
try:
    attnforge.attention(q.requires_grad_(), k, v)
    print("requires_grad: NOT refused")
except attnforge.AttnforgeError as err:
    print(f"requires_grad refused: {err}")
