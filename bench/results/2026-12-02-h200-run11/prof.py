# ncu: our CUDA D128 kernels and FlashAttention-2 on the d128-s4k row, one launch each in a profiler range
import math, sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from attnforge.backends.cuda.kernel import CudaKernel
B, H, S, D = 4, 16, 4096, 128
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
calls = []
for path in sys.argv[1:]:
    kern = CudaKernel(path)
    calls.append(lambda kern=kern: kern(q, k, v, scale=1 / math.sqrt(D)))
def flash():
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v)
calls.append(flash)
for f in calls:
    f(); f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for f in calls:
    f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
