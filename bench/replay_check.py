"""On a GPU: every way a dispatch-cache key is launched gives the right answer on new inputs.

    python bench/replay_check.py [--backend triton|gluon|auto]

Every case builds with every backend on an H100/H200 (Gluon's decode included): a refusal is an error.

For each case, four calls with the same shapes and fresh inputs (and fresh ALiBi slopes when they
are a tensor): the first builds and checks (the JIT launch), the second records its launches, the
third and fourth replay them (``backends/triton/replay.py``). Each output is judged against the
float64 reference (``reference.attention_reference``, on the GPU) by the bench's tolerance; a
fifth call runs under a launch hook (Triton's JIT path again). Prints one line per case.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

os.environ.setdefault("ATTNFORGE_CACHE", tempfile.mkdtemp(prefix="afcache-"))
import attnforge  # noqa: E402
from attnforge.numerics import O_TOLERANCE  # noqa: E402
from attnforge.reference import attention_reference, relative_error  # noqa: E402
from attnforge.spec import alibi_slopes_for  # noqa: E402

CASES = [  # name, (B, Hq, Hkv, Sq, Sk, D), dtype, options
    ("mha causal bhsd", (2, 8, 8, 300, 300, 64), torch.float16, dict(causal=True)),
    ("gqa bshd", (2, 16, 4, 257, 513, 128), torch.bfloat16, dict(layout="bshd")),
    ("window", (1, 8, 2, 400, 400, 64), torch.float16, dict(causal=True, window=64)),
    ("alibi auto", (2, 8, 8, 200, 200, 64), torch.bfloat16, dict(causal=True, alibi_slopes="auto")),
    ("alibi tensor per call", (2, 8, 8, 200, 200, 64), torch.float16, dict(causal=True, alibi_slopes="tensor")),
    ("softcap", (1, 8, 8, 300, 300, 128), torch.bfloat16, dict(causal=True, softcap=30.0)),
    ("decode split-KV", (8, 32, 8, 1, 4099, 128), torch.bfloat16, dict()),
    ("decode-verify Sq=16", (4, 32, 8, 16, 2000, 128), torch.float16, dict(causal=True)),
]


def reference(q, k, v, opts, slopes):
    if opts.get("layout") == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    window = opts.get("window")
    o, lse = attention_reference(q.double(), k.double(), v.double(), causal=opts.get("causal", False),
                                 window=(window, 0) if window is not None else (None, None),
                                 alibi_slopes=None if slopes is None else slopes.double().cpu().numpy(), softcap=opts.get("softcap"))
    return (o.transpose(1, 2) if opts.get("layout") == "bshd" else o), lse


def main() -> int:
    import argparse

    from triton import knobs

    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    failures = ran = 0
    for name, (B, Hq, Hkv, Sq, Sk, D), dtype, opts in CASES:
        errors = []
        for call in range(5):
            shape = (B, Sq, Hq, D) if opts.get("layout") == "bshd" else (B, Hq, Sq, D)
            kv = (B, Sk, Hkv, D) if opts.get("layout") == "bshd" else (B, Hkv, Sk, D)
            q = torch.randn(shape, device="cuda", dtype=dtype)
            k, v = torch.randn(kv, device="cuda", dtype=dtype), torch.randn(kv, device="cuda", dtype=dtype)
            kwargs = dict(opts)
            slopes = None
            if opts.get("alibi_slopes") == "tensor":
                slopes = torch.rand(Hq, device="cuda") * 0.5 + 0.01 * call
                kwargs["alibi_slopes"] = slopes
            elif opts.get("alibi_slopes") == "auto":
                slopes = torch.tensor(alibi_slopes_for(Hq), device="cuda")
            hook = (lambda metadata: None) if call == 4 else None
            if hook is not None:
                knobs.runtime.launch_enter_hook.add(hook)
            try:
                with torch.no_grad():
                    o, lse = attnforge.attention(q, k, v, return_lse=True, backend=args.backend, **kwargs)
            finally:
                if hook is not None:
                    knobs.runtime.launch_enter_hook.remove(hook)
            ref_o, ref_lse = reference(q, k, v, opts, slopes)
            err = relative_error(o.double(), ref_o)
            lse_err = float((lse.double() - ref_lse).abs().max())
            errors.append((err, lse_err))
        ran += 1
        tol = O_TOLERANCE["fp16" if dtype == torch.float16 else "bf16"]
        ok = all(e <= tol and le < 1e-2 for e, le in errors)
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:24} err(O) per call {' '.join(f'{e:.1e}' for e, _ in errors)}  "
              f"max |dLSE| {max(le for _, le in errors):.1e}  (calls: build, record, replay, replay, hooked)", flush=True)
    print(f"replay check ({args.backend}): {ran - failures} of {ran} cases right on every call")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
