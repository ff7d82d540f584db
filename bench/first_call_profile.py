"""On a GPU: where the first ``attention()`` call for a new spec spends its time, and what one
later call costs on the host. Fresh attnforge and Triton caches, so the first call is a true one.

    python bench/first_call_profile.py OUTDIR

Writes OUTDIR/first_call.prof.txt (cProfile, top functions by cumulative time) and
OUTDIR/first_call.json (wall time, the report's steps and verification cases); prints a table.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "first_call_out")
out.mkdir(parents=True, exist_ok=True)
os.environ["ATTNFORGE_CACHE"] = tempfile.mkdtemp(prefix="afcache-")
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tritoncache-")

t0 = time.perf_counter()
import torch  # noqa: E402

import attnforge  # noqa: E402

imported = time.perf_counter() - t0
torch.cuda.init()
q = torch.randn(2, 32, 1000, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
prof = cProfile.Profile()
t0 = time.perf_counter()
prof.enable()
attnforge.attention(q, k, v, causal=True)
torch.cuda.synchronize()
prof.disable()
first = time.perf_counter() - t0
text = io.StringIO()
pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(60)
(out / "first_call.prof.txt").write_text(text.getvalue())
report = next(Path(os.environ["ATTNFORGE_CACHE"]).glob("*/report.json"))
data = json.loads(report.read_text())
steps = {s["name"]: s.get("seconds") for s in data.get("steps", [])}
cases = [(c.get("shape"), round(c.get("seconds", 0.0), 3)) for c in data.get("verification", {}).get("cases", [])]
(out / "first_call.json").write_text(json.dumps({"import_s": imported, "first_call_s": first, "steps": steps, "cases": cases}, indent=1))
print(f"import {imported:.2f} s; first call {first:.2f} s")
print("steps:", ", ".join(f"{n} {s:.2f}" for n, s in steps.items() if s is not None))
print("verification cases (launch seconds):", cases)
print("\n".join(text.getvalue().splitlines()[:70]))
