"""fp16 against bf16 at D = 128, 1k full (run 17 call 4): does the fp16 kernel's speed depend on its data (power, clocks)?
Each kernel built and verified as gluon_persistent does, then timed on random inputs and on inputs of fewer mantissa bits,
with nvidia-smi sampling SM clock and power in the background."""
import json, os, statistics, subprocess, sys, time
from pathlib import Path
import torch, torch.nn.functional as F, triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
import gluon_persistent as gp
from attnforge.backends.gluon import _import
from attnforge.bench.matrix import full_matrix, select
from attnforge.spec import AttentionSpec

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
rows = {r.dtype: r for r in select([r for r in full_matrix() if r.group == "prefill"], patterns=["d128-s1k-full"]) if r.case == "mha"}
mods = {}
for dt, row in rows.items():
    kw = dict(heads=row.heads, kv_heads=row.kv_heads, head_dim=128, dtype=dt, causal=False, batch=row.batch, seqlen_q=1024, seqlen_k=1024)
    res = gp._build_and_verify((f"{row.name}@db", kw, gp._params(AttentionSpec(**kw)), str(out)))
    print(res["name"], res["ok"], res["params"], flush=True)
    assert res["ok"], res["why"]
    mods[dt] = _import(Path(res["module"]))
row = rows["fp16"]
shape = (row.batch, row.heads, 1024, 128)
g = torch.Generator("cuda").manual_seed(0)
base = [torch.randn(shape, device="cuda", generator=g) for _ in range(3)]
inputs = {
    "fp16 random": [t.half() for t in base],
    "fp16 holding bf16 values (7-bit mantissa)": [t.bfloat16().half() for t in base],
    "fp16 holding 3-bit mantissas": [(t * 8).round().div(8).half() for t in base],
    "bf16 random": [t.bfloat16() for t in base],
    "bf16 holding 3-bit mantissas": [(t * 8).round().div(8).bfloat16() for t in base],
}
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active", "--format=csv,noheader", "-lms", "50"],
                       stdout=open(out / "smi.csv", "w"))
time.sleep(1)
marks, table = [], []
for rnd in range(3):
    for name, (q, k, v) in inputs.items():
        dt = "fp16" if q.dtype == torch.float16 else "bf16"
        o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
        m = mods[dt]
        for who, fn in (("attnforge", lambda: m.launch(q, k, v, o, lse, scale=128 ** -0.5, checked=True)),
                        ("cudnn", lambda: F.scaled_dot_product_attention(q, k, v))):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                t0 = time.time()
                ms = triton.testing.do_bench(fn, warmup=100, rep=400, return_mode="median")
                marks.append((t0, time.time(), name, who))
            table.append(dict(round=rnd, inputs=name, provider=who, ms=ms))
            print(f"{rnd} {name:44s} {who:9s} {ms:.4f} ms", flush=True)
time.sleep(0.5); smi.terminate(); smi.wait()
# clocks and power per (inputs, provider): the samples inside each timing's window
import datetime
samples = []
for line in open(out / "smi.csv"):
    p = [x.strip() for x in line.split(",")]
    try:
        ts = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((ts, float(p[1].split()[0]), float(p[2].split()[0]), p[3]))
    except (ValueError, IndexError):
        pass
summary = {}
for t0, t1, name, who in marks:
    inside = [s for s in samples if t0 + 0.05 <= s[0] <= t1]
    summary.setdefault((name, who), []).extend(inside)
print("\n| inputs | provider | median ms | TF/s | SM MHz (median) | power W (median) | samples |")
print("|---|---|---|---|---|---|---|")
flops = 4 * row.batch * row.heads * 1024 * 1024 * 128
res = []
for (name, who), ss in summary.items():
    ms = statistics.median(t["ms"] for t in table if t["inputs"] == name and t["provider"] == who)
    mhz = statistics.median(s[1] for s in ss) if ss else float("nan")
    w = statistics.median(s[2] for s in ss) if ss else float("nan")
    res.append(dict(inputs=name, provider=who, ms=ms, mhz=mhz, watts=w, n=len(ss), reasons=sorted({s[3] for s in ss})))
    print(f"| {name} | {who} | {ms:.4f} | {flops / ms / 1e9:.0f} | {mhz:.0f} | {w:.0f} | {len(ss)} |")
(out / "fp16_power.json").write_text(json.dumps(dict(table=table, summary=res), indent=1))
