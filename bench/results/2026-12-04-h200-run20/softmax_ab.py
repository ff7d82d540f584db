"""Run 19 calls 3 and 4, run 20 (issue 13), head to head on the H200: the shipped Gluon kernels (``db``: the tuning database's
parameters, else the planner's first choice) against text transforms of their softmax. Each kernel through the gate's
cases first (a spilling one refused); then cuDNN and the versions timed in turns (gluon_persistent._time_row, 3 rounds).
Since run 20 call 5 (one hung kernel held its whole call) every build and every row's timing runs in a child process of
its own, killed at a deadline; calls 1-4 ran the builds in one process pool, the timing in this process.

    python3 softmax_ab.py OUT exp2 [ROWS...]   # call 3: one exp2 in 8 / 4 / 2 on the FMA pipe (exp2_mix.py)
    python3 softmax_ab.py OUT tree [ROWS...]   # call 4: the row max (and sum) as a tree (tree_reduce.py)
    python3 softmax_ab.py OUT rowsum [ROWS...] # run 20 calls 1-2: the row sum by the tensor cores (rowsum_mma.py), and a control
    python3 softmax_ab.py OUT raw [ROWS...]    # run 20 call 5 (hung), next_raw.sh: K/V slots given back (and waited for) in inline asm, no bar.sync (raw_arrive.py)
    python3 softmax_ab.py OUT lazy [ROWS...]   # run 20 call 3: the lazy rescale, its branch over 32 registers at a time (lazy_rescale.py)
"""
import json, statistics, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent / "2026-12-04-h200-run19"))  # exp2_mix, tree_reduce
sys.path.insert(0, "bench")

MODES = {"exp2": {"e8": (8, (0,)), "e4": (4, (0,)), "e2": (2, (0,))}, "tree": {"tree": "both", "tmax": "max"},
         "rowsum": {"rowsum": None, "ctl": None},  # ctl: the shipped source again, a control
         "lazy": {"lazy32": 32, "ctl": None},
         # unspec: the shipped kernel unspecialised; waits: K/V released and waited for in asm; all: and Q released
         "raw": {"unspec": None, "waits": (True, False), "all": (True, True), "ctl": None}}
MODE = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] in MODES else "tree"
VERSIONS = MODES[MODE]


def _transform(source: str, version: str, params: dict, dtype: str) -> tuple[str, int]:
    if MODE == "exp2":  # a degree-3 polynomial for bf16's P, degree 4 for fp16's
        import exp2_mix
        pack, emulated = VERSIONS[version]
        return exp2_mix.patch(source, pack, emulated, 3 if dtype == "bf16" else 4)
    if version == "ctl":
        return source, 0
    if MODE == "raw":
        if version == "unspec":
            import raw_arrive
            return raw_arrive.unspecialised(source), 1
        return _raw(source, VERSIONS[version])
    if MODE == "lazy":
        import lazy_rescale
        return lazy_rescale.patch(source, VERSIONS[version])
    if MODE == "rowsum":
        import rowsum_mma
        return rowsum_mma.patch(source)
    import tree_reduce
    return tree_reduce.patch(source, params["BN"], VERSIONS[version])


def _raw(source: str, how: tuple[bool, bool]) -> tuple[str, int]:
    """raw_arrive's patch of the unspecialised kernel, its barrier offsets checked before and after (see raw_arrive.py)."""
    import raw_arrive
    base = raw_arrive.unspecialised(source)
    offsets = raw_arrive.checked_offsets(base)
    text, n = raw_arrive.patch(base, offsets, waits=how[0], qfree=how[1])
    if raw_arrive.checked_offsets(text) != offsets:  # the asm's constant offsets must still be the allocator's
        raise ValueError("raw_arrive: the patched kernel's barriers moved")
    return text, n


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


JOB_DEADLINE_S = 240  # a build and the gate's cases take under a minute; past this the kernel is taken as hung


def _in_child(flag: str, payload, deadline_s: float) -> dict | None:
    """This script's ``flag`` mode on ``payload`` in a fresh Python process, killed (its CUDA context with it) if it has
    not answered within ``deadline_s``: {"error": why} then, or when it answered nothing."""
    try:
        done = subprocess.run([sys.executable, __file__, sys.argv[1], MODE, flag, json.dumps(payload)], capture_output=True, text=True,
                              timeout=deadline_s)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {deadline_s:.0f} s: taken as hung, killed"}
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("RESULT ")), None)
    return json.loads(line[len("RESULT "):]) if line else {"error": "the child gave no result: " + done.stderr.strip()[-300:]}


def _job_in_child(args) -> dict:
    r = _in_child("--job", args, JOB_DEADLINE_S)
    return r if "error" not in r else dict(name=args[0], version=args[3], ok=False, why=r["error"])


def main():
    import gluon_persistent as gp
    if "--job" in sys.argv:  # a child of _in_child: one build and its gate
        print("RESULT " + json.dumps(job(tuple(json.loads(sys.argv[sys.argv.index("--job") + 1]))), default=str), flush=True)
        return
    if "--time" in sys.argv:  # a child of _in_child: one row's versions timed
        from attnforge.bench.matrix import full_matrix
        name, mods = json.loads(sys.argv[sys.argv.index("--time") + 1])
        row = next(r for r in full_matrix() if r.name == name)
        print("RESULT " + json.dumps(gp._time_row(row, mods, 3)), flush=True)
        return
    from attnforge.bench.matrix import full_matrix, select
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    pats = sys.argv[3:] or ["d64", "d128-s1k-full", "d128-s16k-full"]
    rows = select([r for r in full_matrix() if r.group == "prefill"], patterns=pats)
    jobs = []
    for version in ("db", *VERSIONS):
        jobs += [(r.name, dict(heads=r.heads, kv_heads=r.kv_heads, head_dim=r.head_dim, dtype=r.dtype, causal=r.causal, batch=r.batch,
                               seqlen_q=r.seqlen_q, seqlen_k=r.seqlen_k), str(out), version) for r in rows]
    t0 = time.time()
    built = {}
    with ThreadPoolExecutor(14) as pool:  # each job in a child of its own, killed at its deadline (run 20 call 5 hung)
        for done in as_completed([pool.submit(_job_in_child, j) for j in jobs]):
            r = done.result()
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
        t = _in_child("--time", [row.name, mods], 300)  # a kernel can pass the gate's cases and still hang on the row's shape
        if "error" in t:
            print(f"| {row.name} | timing: {t['error']} |", flush=True)
            continue
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
