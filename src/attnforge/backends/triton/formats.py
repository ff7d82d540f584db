"""Each attnforge format as Triton names it: in kernels (``tl.float16``) and in compile signatures."""

from __future__ import annotations

TL_TYPE = {
    "fp16": "tl.float16", "bf16": "tl.bfloat16", "fp32": "tl.float32", "tf32": "tl.float32",
    "fp64": "tl.float64", "fp8e4m3": "tl.float8e4nv", "fp8e5m2": "tl.float8e5",
}
SIGNATURE_TYPE = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64", "fp8e4m3": "fp8e4nv", "fp8e5m2": "fp8e5"}
