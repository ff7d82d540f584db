"""Prepared in run 17, not yet run on a GPU: Q in registers for QK^T at D = 128 (qreg.py beside this file), verified by the gate's cases, timed beside the shipped
kernel and cuDNN on the bench's D = 128 rows and the D = 64 rows whose kernels have two warpgroups (1k, 4k causal)."""
import multiprocessing, statistics, sys, time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def job(args):
    name, kw, out = args
    import gluon_persistent as gp
    import qreg
    from attnforge.backends.gluon import _import
    from attnforge.backends.gluon.compile import compile_for_target
    from attnforge.backends.gluon.kernel import GluonKernel
    from attnforge.compile_report import check_fits
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.verify import verify
    spec, params = AttentionSpec(**kw), gp._params(AttentionSpec(**kw))
    base = gp._build_and_verify((f"{name}@db", kw, params, out))
    res = dict(name=name, params=params, base=base)
    if not base["ok"]:
        return res
    t0 = time.time()
    try:
        path = Path(base["module"]).with_name(f"{name}@qreg.py")
        path.write_text(qreg.q_in_registers(Path(base["module"]).read_text()))
        rep = compile_for_target(_import(path), get_target("h200"))
        check_fits(rep, get_target("h200"))
        rec = verify(GluonKernel(path), spec, params, target=get_target("h200"), fail_fast=True)
        res["qreg"] = dict(ok=rec.passed, why=rec.statement, module=str(path), spill=rep.spill_bytes, seconds=round(time.time() - t0, 1))
    except Exception as e:  # noqa: BLE001
        res["qreg"] = dict(ok=False, why=f"{type(e).__name__}: {str(e)[:300]}")
    return res


def main():
    import json
    import gluon_persistent as gp
    from attnforge.bench.matrix import full_matrix, select
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    rows = select([r for r in full_matrix() if r.group == "prefill"], patterns=["d128", "d64-s1k", "d64-s4k-causal"])
    jobs = [(r.name, dict(heads=r.heads, kv_heads=r.kv_heads, head_dim=r.head_dim, dtype=r.dtype, causal=r.causal, batch=r.batch,
                          seqlen_q=r.seqlen_q, seqlen_k=r.seqlen_k), str(out)) for r in rows]
    t0 = time.time()
    with ProcessPoolExecutor(14, mp_context=multiprocessing.get_context("spawn")) as pool:
        built = {r["name"]: r for r in pool.map(job, jobs)}
    for r in built.values():
        q = r.get("qreg", {})
        print(f"{r['name']:28s} db {'PASS' if r['base']['ok'] else 'FAIL'}  qreg {'PASS' if q.get('ok') else 'FAIL'} {'' if q.get('ok') else q.get('why', r['base'].get('why', ''))[:200]}", flush=True)
    print(f"phase 1 {time.time() - t0:.0f} s", flush=True)
    timed = []
    for row in rows:
        r = built[row.name]
        mods = {"db": r["base"]["module"]} if r["base"]["ok"] else {}
        if r.get("qreg", {}).get("ok"):
            mods["qreg"] = r["qreg"]["module"]
        if len(mods) == 2:
            t = gp._time_row(row, mods, 2)
            timed.append(t)
            print(f"| {row.name} | {r['params']} | {t['ratio']['db']} | {t['ratio']['qreg']} | {t['ratio']['qreg'] / t['ratio']['db']:.3f} |", flush=True)
    if timed:
        g = lambda k: statistics.geometric_mean([t["ratio"][k] for t in timed])  # noqa: E731
        print(f"geomean vs cuDNN over {len(timed)} rows: db {g('db'):.3f}, qreg {g('qreg'):.3f}")
    (out / "qreg_ab.json").write_text(json.dumps(dict(built=built, timed=timed), indent=1, default=str))


if __name__ == "__main__":
    main()
