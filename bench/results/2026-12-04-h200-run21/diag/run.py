"""Which of two text differences breaks the window kernel with Q in registers (run 21 call 5: A3 failed)."""
import json, multiprocessing, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
KW = dict(heads=4, kv_heads=2, head_dim=64, dtype="bf16", window_left=128, window_right=0, seqlen_q=1000, seqlen_k=1000)
P = {"BM": 128, "BN": 64, "warps": 8, "stages": 3, "pingpong": 1, "ostage": 1}

def one(path):
    from attnforge.backends.gluon.kernel import GluonKernel
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.verify import verify
    params = {**P, **({"qreg": 1} if "/qreg" in path else {})}
    try:
        r = verify(GluonKernel(Path(path)), AttentionSpec(**KW), params, target=get_target("h200"), fail_fast=False)
        bad = "; ".join(f"{c.shape} err {c.err_o:.3g} {c.worst}" for c in r.cases if not c.passed)
        return path, r.passed, r.max_err_o, r.statement[:120], bad[:900]
    except Exception as e:
        return path, False, None, f"{type(e).__name__}: {e}"[:300], ""

if __name__ == "__main__":
    paths = sorted(str(p) for p in Path(__file__).parent.glob("*mask.py"))
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        for r in pool.map(one, paths):
            print("PASS" if r[1] else "FAIL", *r[0:1], "err", r[2], "|", r[3], "|", r[4], flush=True)
