"""Run 22 call 3 (issue 13): where the D = 256 kernel's compute warps wait at 1k keys against 16k (the same kernel text, the
same 1024 work tiles, 16 against 256 K/V tiles each), beside cuDNN's kernel at 1k, under Nsight Compute. Each kernel is launched
once inside cudaProfilerStart/Stop after a warm-up call (the build and autotuning-free launch happen outside the profiled range).

    ncu --profile-from-start off ... python3 prof_d256.py OUT
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, "bench")


def module(spec, out: Path, tag: str):
    import gluon_persistent as gp
    from attnforge.backends.gluon import GluonBackend, _import
    from attnforge.plan.builtin import Candidate
    from attnforge.plan.hopper import hopper_plans
    from attnforge.targets import get_target
    params = gp._params(spec)
    plan = next(hopper_plans(spec, get_target("h200"), prefer=Candidate(params, "db")))
    assert plan.params == params, (plan.params, params)
    path = out / f"{tag}.py"
    path.write_text(GluonBackend().translate(plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl").source)
    print(tag, params, flush=True)
    return _import(path)


def main():
    from attnforge.spec import AttentionSpec
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    calls = []
    for tag, b, s in (("d256-1k", 16, 1024), ("d256-16k", 1, 16384)):
        spec = AttentionSpec(heads=8, kv_heads=8, head_dim=256, dtype="bf16", batch=b, seqlen_q=s, seqlen_k=s)
        m = module(spec, out, tag)
        q, k, v = (torch.randn(b, 8, s, 256, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
        calls.append((tag, (lambda m, q, k, v, o, lse: lambda: m.launch(q, k, v, o, lse, scale=256 ** -0.5, checked=True))(m, q, k, v, o, lse)))
        if s == 1024:
            def cudnn(q=q, k=k, v=v):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    F.scaled_dot_product_attention(q, k, v)
            calls.append(("cudnn-1k", cudnn))
    for _, fn in calls:  # builds and warm-up outside the profiled range
        fn(); fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for tag, fn in calls:
        fn()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled:", ", ".join(t for t, _ in calls), flush=True)


if __name__ == "__main__":
    main()
