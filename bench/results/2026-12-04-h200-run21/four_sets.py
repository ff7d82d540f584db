"""Run 21 call 5 (issue 13): four compute warpgroups at D = 64 (BM = 256), after call 4.

Part A: the one kernel of call 4 that compiled without a spill and failed the gate (the window feature spec, 4/2 heads,
window 128/0, 1000 x 1000, BM 256, BN 64, Q in registers, no overlap: max |O - ref| 0.378) beside its neighbours, each
through the gate's cases (spills allowed here: this asks which switch breaks it, not whether to ship it).
Part B: BM = 256 with the overlap and 6 or 8 ring slots against the tuning database's kernel at D = 64 without a mask on
shapes of the 1k bucket and past it (the same 16k tokens a batch as the bench matrix), each kernel verified first, then
timed in turns with cuDNN (gluon_persistent._time_row, 3 rounds).

    python3 four_sets.py OUT        # on the H200, from the repository root, PYTHONPATH=src:.gpu_deps:bench
"""
import json, multiprocessing, statistics, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

WINDOW = dict(heads=4, kv_heads=2, head_dim=64, dtype="bf16", window_left=128, window_right=0, seqlen_q=1000, seqlen_k=1000)
SETS4 = dict(BM=256, BN=64, warps=16, pingpong=1, ostage=1)
ISOLATE = {  # name: (spec keywords, params)
    "A1 window 4/2, 4 sets, qreg, no overlap (call 4's failure)": (WINDOW, {**SETS4, "stages": 3, "qreg": 1}),
    "A2 window 4/2, 4 sets, no qreg, no overlap": (WINDOW, {**SETS4, "stages": 3}),
    "A3 window 4/2, 2 sets BM 128, BN 64, qreg, no overlap": (WINDOW, {**SETS4, "BM": 128, "warps": 8, "stages": 3, "qreg": 1}),
    "A4 window 4/4 (MHA), 4 sets, qreg, no overlap": ({**WINDOW, "kv_heads": 4}, {**SETS4, "stages": 3, "qreg": 1}),
    "A5 window 4/2, 4 sets, overlap": (WINDOW, {**SETS4, "stages": 3, "overlap": 1}),
    "A6 full 4/2 (GQA) 1000, 4 sets, qreg, no overlap": ({**WINDOW, "window_left": None, "window_right": None}, {**SETS4, "stages": 3, "qreg": 1}),
    "A7 causal 4/2 1000, 4 sets, no overlap, one program a tile": ({**WINDOW, "window_left": None, "window_right": None, "causal": True},
                                                                  {**SETS4, "stages": 3}),
}
SHAPES = ((16, 1024), (32, 512), (8, 2048))  # (batch, Sq = Sk), 32 heads: the matrix's 16k tokens a batch
VERSIONS = {"s6": {**SETS4, "stages": 6, "overlap": 1, "persistent": 1}, "s8": {**SETS4, "stages": 8, "overlap": 1, "persistent": 1}}


def main() -> None:
    import gluon_persistent as gp
    from attnforge.bench.matrix import Row
    from attnforge.spec import AttentionSpec
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    jobs, meta = [], {}
    for i, (name, (kw, params)) in enumerate(ISOLATE.items()):
        jobs.append((f"iso{i}", {k: v for k, v in kw.items() if v is not None}, params, str(out), 4096)); meta[f"iso{i}"] = name
    for dtype in ("fp16", "bf16"):
        for batch, s in SHAPES:
            kw = dict(batch=batch, heads=32, kv_heads=32, head_dim=64, dtype=dtype, seqlen_q=s, seqlen_k=s)
            for v, params in {"db": gp._params(AttentionSpec(**kw)), **VERSIONS}.items():
                jobs.append((f"{dtype}-b{batch}-s{s}@{v}", kw, params, str(out), 0))
    built = {}
    with ProcessPoolExecutor(14, mp_context=multiprocessing.get_context("spawn")) as pool:
        for r in pool.map(gp._build_and_verify, jobs):
            built[r["name"]] = r
            print(f"{'PASS' if r['ok'] else 'FAIL'} {meta.get(r['name'], r['name'])} {r['params']} err {r.get('err_o')} "
                  f"spill {r.get('spill_bytes')}" + ("" if r["ok"] else f": {r['why'][:200]}"), flush=True)
    timed = []
    for dtype in ("fp16", "bf16"):
        for batch, s in SHAPES:
            key = f"{dtype}-b{batch}-s{s}"
            mods = {v: built[f"{key}@{v}"]["module"] for v in ("db", *VERSIONS) if built[f"{key}@{v}"]["ok"]}
            if "db" not in mods:
                continue
            t = gp._time_row(Row("prefill", "mha", dtype, 64, False, batch, 32, 32, s, s), mods, 3)
            t["db_params"] = built[f"{key}@db"]["params"]
            timed.append(t)
            print(f"| {key} | db {t['db_params']} | db vs cuDNN {t['ratio']['db']} | "
                  + " | ".join(f"{v} / db {t['ratio'][v] / t['ratio']['db']:.3f}" for v in VERSIONS if v in t["ratio"]) + " |", flush=True)
    for v in VERSIONS:
        rs = [t["ratio"][v] / t["ratio"]["db"] for t in timed if v in t["ratio"]]
        if rs:
            print(f"{v}: geomean over db {statistics.geometric_mean(rs):.3f} ({len(rs)} shapes)")
    (out / "four_sets.json").write_text(json.dumps(dict(built=built, meta=meta, timed=timed), indent=1, default=str))


if __name__ == "__main__":
    main()
