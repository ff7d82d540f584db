"""Run 19 calls 3 and 4 (issue 13), head to head on the H200: the shipped Gluon kernels (``db``: the tuning database's
parameters, else the planner's first choice) against text transforms of their softmax. Each kernel through the gate's
cases first (a spilling one refused); then cuDNN and the versions timed in turns (gluon_persistent._time_row, 3 rounds).

    python3 softmax_ab.py OUT exp2 [ROWS...]   # call 3: one exp2 in 8 / 4 / 2 on the FMA pipe (exp2_mix.py)
    python3 softmax_ab.py OUT tree [ROWS...]   # call 4: the row max (and sum) as a tree (tree_reduce.py)
    python3 softmax_ab.py OUT rowsum [ROWS...] # prepared, not run: the row sum by the tensor cores (rowsum_mma.py)
"""
import json, multiprocessing, statistics, sys, time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, "bench")

MODES = {"exp2": {"e8": (8, (0,)), "e4": (4, (0,)), "e2": (2, (0,))}, "tree": {"tree": "both", "tmax": "max"},
         "rowsum": {"rowsum": None}}
MODE = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] in MODES else "tree"
VERSIONS = MODES[MODE]


def _transform(source: str, version: str, params: dict, dtype: str) -> tuple[str, int]:
    if MODE == "exp2":  # a degree-3 polynomial for bf16's P, degree 4 for fp16's
        import exp2_mix
        pack, emulated = VERSIONS[version]
        return exp2_mix.patch(source, pack, emulated, 3 if dtype == "bf16" else 4)
    if MODE == "rowsum":
        import rowsum_mma
        return rowsum_mma.patch(source)
    import tree_reduce
    return tree_reduce.patch(source, params["BN"], VERSIONS[version])


def job(args):
    name, kw, out, version = args
    import gluon_persistent as gp
    from attnforge.backends.gluon import _import
    from attnforge.backends.gluon.compile import compile_for_target
    from attnforge.backends.gluon.kernel import GluonKernel
    from attnforge.compile_report import check_fits
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.verify import verify
    spec, params = AttentionSpec(**kw), gp._params(AttentionSpec(**kw))
    t0 = time.time()
    if version == "db":
        return {**gp._build_and_verify((name, kw, params, out)), "version": version}
    from attnforge.backends.gluon import GluonBackend
    from attnforge.plan.builtin import Candidate
    from attnforge.plan.hopper import hopper_plans
    plan = next(hopper_plans(spec, get_target("h200"), prefer=Candidate(params, "asked for")))
    source = GluonBackend().translate(plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl").source
    base = Path(out) / "src" / f"{name}.py"
    base.parent.mkdir(parents=True, exist_ok=True)
    try:
        text, n = _transform(source, version, params, kw["dtype"])
        path = base.with_name(f"{name}@{version}.py"); path.write_text(text)
        rep = compile_for_target(_import(path), get_target("h200"))
        check_fits(rep, get_target("h200"))
        rec = verify(GluonKernel(path), spec, params, target=get_target("h200"), fail_fast=True)
        return dict(name=name, version=version, ok=rec.passed, why=rec.statement, module=str(path), patched=n, err_o=rec.max_err_o,
                    seconds=round(time.time() - t0, 1))
    except Exception as e:  # noqa: BLE001
        return dict(name=name, version=version, ok=False, why=f"{type(e).__name__}: {str(e)[:300]}")


def main():
    import gluon_persistent as gp
    from attnforge.bench.matrix import full_matrix, select
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    pats = sys.argv[3:] or ["d64", "d128-s1k-full", "d128-s16k-full"]
    rows = select([r for r in full_matrix() if r.group == "prefill"], patterns=pats)
    jobs = []
    for version in ("db", *VERSIONS):
        jobs += [(r.name, dict(heads=r.heads, kv_heads=r.kv_heads, head_dim=r.head_dim, dtype=r.dtype, causal=r.causal, batch=r.batch,
                               seqlen_q=r.seqlen_q, seqlen_k=r.seqlen_k), str(out), version) for r in rows]
    t0 = time.time()
    with ProcessPoolExecutor(14, mp_context=multiprocessing.get_context("spawn")) as pool:
        res = list(pool.map(job, jobs))
    built = {}
    for r in res:
        built.setdefault(r["name"], {})[r["version"]] = r
        print(f"{r['name']:28s} {r['version']:3s} {'PASS' if r.get('ok') else 'FAIL'} err {r.get('err_o')} {'' if r.get('ok') else r.get('why', '')[:200]}", flush=True)
    print(f"phase 1 {time.time() - t0:.0f} s", flush=True)
    timed = []
    print("| row | params | db | " + " | ".join(VERSIONS) + " |")
    for row in rows:
        b = built[row.name]
        mods = {v: b[v]["module"] for v in ("db", *VERSIONS) if b.get(v, {}).get("ok")}
        if "db" not in mods or len(mods) < 2:
            continue
        t = gp._time_row(row, mods, 3)
        timed.append(t)
        rel = " | ".join(f"{t['ratio'][v] / t['ratio']['db']:.3f}" if v in t["ratio"] else "-" for v in VERSIONS)
        print(f"| {row.name} | {b['db']['params']} | {t['ratio']['db']} | {rel} |", flush=True)
    for v in VERSIONS:
        rs = [t["ratio"][v] / t["ratio"]["db"] for t in timed if v in t["ratio"]]
        if rs:
            print(f"{v}: geomean over db {statistics.geometric_mean(rs):.3f} over {len(rs)} rows (min {min(rs):.3f}, max {max(rs):.3f})")
    if timed:
        print("db vs cuDNN geomean", round(statistics.geometric_mean([t["ratio"]["db"] for t in timed]), 3))
    (out / f"softmax_ab_{MODE}.json").write_text(json.dumps(dict(built=built, timed=timed), indent=1, default=str))


if __name__ == "__main__":
    main()
