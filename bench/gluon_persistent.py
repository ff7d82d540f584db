"""The gluon backend's prefill kernel with and without a schedule switch (``--switch``: ``persistent``,
one program per SM walks the work tiles, its rings carried over; or ``ostage``, O through a shared
tile and a TMA store), each verified natively, then timed side by side with cuDNN.

Usage (on an H100/H200, from the repository root; carry .gpu_deps):
    PYTHONPATH=src:.gpu_deps python3 bench/gluon_persistent.py --out $OUT [--rows s1k,d256] [--jobs 8] [--switch ostage]
    PYTHONPATH=src:.gpu_deps python3 bench/gluon_persistent.py --out $OUT --rows d128 --variants ostage=2 ostage=2,persistent=1

For each prefill row of the bench matrix (``--rows``: name substrings; default all): the parameters the
tuning database holds for the gluon backend on the row's bucket (the planner's first choice if none),
and the same with the switch on (the db's without it), or with each of ``--variants``' overrides. Phase 1 builds every kernel, refuses
one that spills or overflows shared memory as generate's gate does (``compile_report.check_fits``), and verifies the rest (``verify.verify``: the
gate's cases against the float64 reference), ``--jobs`` at a time, each in a process of its own killed at ``--deadline``
(a hung kernel fails its own job), and also verifies the switch on the feature specs below (at D <= 64 for ostage) (window,
ALiBi, softcap, GQA/MQA, odd lengths, both causal alignments), which are not timed. Phase 2, a process a row with a
deadline: cuDNN (SDPA), the database's kernel and the switched one timed in turns (CUDA events, ``do_bench`` median, L2 flushed),
``--rounds`` rounds, the median of the round medians. Writes SWITCH.json (with ``--variants``: the variants'
names joined) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

# (name, AttentionSpec keywords): the switch verified beyond the bench rows' plain causal and full
FEATURES = (
    ("gqa_causal_odd", dict(heads=4, kv_heads=2, head_dim=128, dtype="bf16", causal=True, seqlen_q=1000, seqlen_k=1000)),
    ("full_odd_fp16_d64", dict(heads=4, kv_heads=4, head_dim=64, dtype="fp16", seqlen_q=777, seqlen_k=1031)),
    ("d256_causal", dict(heads=4, kv_heads=2, head_dim=256, dtype="bf16", causal=True, seqlen_q=1000, seqlen_k=1000)),
    ("topleft", dict(heads=4, kv_heads=1, head_dim=128, dtype="bf16", causal=True, causal_align="top_left", seqlen_q=300, seqlen_k=900)),
    ("sq_gt_sk", dict(heads=2, kv_heads=2, head_dim=128, dtype="bf16", causal=True, seqlen_q=900, seqlen_k=300)),
    ("window", dict(heads=4, kv_heads=2, head_dim=64, dtype="bf16", window_left=128, window_right=0, seqlen_q=1000, seqlen_k=1000)),
    ("window_d128", dict(heads=4, kv_heads=2, head_dim=128, dtype="bf16", window_left=200, window_right=30, seqlen_q=1000, seqlen_k=1000)),
    ("alibi", dict(heads=4, kv_heads=2, head_dim=128, dtype="bf16", causal=True, alibi_slopes="auto", seqlen_q=600, seqlen_k=600)),
    ("softcap", dict(heads=4, kv_heads=2, head_dim=128, dtype="bf16", softcap=20.0, seqlen_q=600, seqlen_k=600)),
    ("mqa_b3", dict(batch=3, heads=8, kv_heads=1, head_dim=128, dtype="bf16", causal=True, seqlen_q=257, seqlen_k=513)),
)


def _params(spec) -> dict[str, int]:
    from attnforge.plan.hopper import hopper_candidates
    from attnforge.targets import get_target
    from attnforge.tune import database

    entry = database.lookup(spec, "h200", "gluon")
    return dict(entry.params) if entry is not None else dict(hopper_candidates(spec, get_target("h200"))[0].params)


def _build_and_verify(job: tuple) -> dict:
    """Translate the Hopper-form plan with ``params``, compile it, refuse it as the gate would (a spill, shared memory
    over the limit), and verify it natively. ``job``: (name, spec keywords, params, out[, spill bytes allowed a thread]):
    the gate refuses any spill; allowing some only measures what it costs."""
    name, spec_kw, params, out, *rest = job
    allow_spill = rest[0] if rest else 0
    from attnforge.backends.gluon import GluonBackend
    from attnforge.backends.gluon import _import
    from attnforge.backends.gluon.compile import compile_for_target
    from attnforge.backends.gluon.kernel import GluonKernel
    from attnforge.compile_report import check_fits
    from attnforge.plan.builtin import Candidate
    from attnforge.plan.hopper import hopper_plans
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.verify import verify

    t0 = time.time()
    spec, target = AttentionSpec(**spec_kw), get_target("h200")
    try:
        plan = next(hopper_plans(spec, target, prefer=Candidate(params, "asked for")))
        if plan.params != params:
            return dict(name=name, params=params, ok=False, why=f"the checker refused {params}; the planner fell back to {plan.params}")
        tr = GluonBackend().translate(plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl")
        path = Path(out) / "src" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(tr.source)
        # as generate's gate: a kernel that spills (or overflows shared memory) is refused before it is verified or
        # timed, unless --allow-spill lets a small spill through to be measured
        report = compile_for_target(_import(path), target)
        if not 0 < report.spill_bytes <= allow_spill or report.shared_bytes > target.smem_per_block_optin:
            check_fits(report, target)
        record = verify(GluonKernel(path), spec, params, target=target, fail_fast=True)
        return dict(name=name, params=params, ok=record.passed, why=record.statement, module=str(path),
                    err_o=record.max_err_o, spill_bytes=report.spill_bytes, seconds=round(time.time() - t0, 1))
    except Exception as e:  # noqa: BLE001 -- a failure is a row of the table, not the end of the run
        return dict(name=name, params=params, ok=False, why=f"{type(e).__name__}: {str(e)[:400]}", seconds=round(time.time() - t0, 1))


JOB_DEADLINE_S = 240.0  # a build and the gate's cases take under a minute on the H200; past this the kernel is taken as hung


def _in_child(flag: str, payload, deadline_s: float) -> dict | str:
    """This script's ``flag`` mode on ``payload`` in a fresh Python process (no CUDA context shared), killed if it has not
    answered within ``deadline_s``: its result, or why there is none."""
    import subprocess

    try:
        done = subprocess.run([sys.executable, __file__, flag, json.dumps(payload)], capture_output=True, text=True, timeout=deadline_s)
    except subprocess.TimeoutExpired:
        return f"no result within {deadline_s:.0f} s: taken as hung, killed"
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("RESULT ")), None)
    return json.loads(line[len("RESULT "):]) if line else f"the child exited {done.returncode} without a result: {done.stderr.strip()[-300:]}"


def _build_and_verify_in_child(job: tuple, deadline_s: float = JOB_DEADLINE_S) -> dict:
    """``_build_and_verify(job)`` in a child (``--child-job``) with a deadline: a kernel that hangs costs its own job, not
    the whole run."""
    result = _in_child("--child-job", job, deadline_s)
    return result if isinstance(result, dict) else dict(name=job[0], params=job[2], ok=False, why=result)


def _time_row_in_child(row_name: str, modules: dict[str, str], rounds: int, deadline_s: float) -> dict | None:
    """``_time_row`` in a child (``--child-time``) with a deadline: a kernel can pass the gate's cases and still hang on the
    row's shape. None (and a line saying why) when it gave no result."""
    result = _in_child("--child-time", [row_name, modules, rounds], deadline_s)
    if isinstance(result, dict):
        return result
    print(f"{row_name}: timing: {result}", flush=True)
    return None


def _time_row(row, modules: dict[str, str], rounds: int) -> dict:
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnforge.backends.gluon import _import

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[row.dtype]
    q = torch.randn(row.batch, row.heads, row.seqlen_q, row.head_dim, device="cuda", dtype=dt)
    k, v = (torch.randn(row.batch, row.kv_heads, row.seqlen_k, row.head_dim, device="cuda", dtype=dt) for _ in range(2))
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
    scale = row.head_dim ** -0.5
    gqa = row.heads != row.kv_heads

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=row.causal, enable_gqa=gqa)

    calls = {"cudnn": cudnn}
    for variant, path in modules.items():
        module = _import(Path(path))
        calls[variant] = (lambda m: lambda: m.launch(q, k, v, o, lse, scale=scale, checked=True))(module)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=50, return_mode="median"))
    ms = {name: statistics.median(t) for name, t in times.items()}
    return dict(row=row.name, ms=ms, ratio={name: round(ms["cudnn"] / t, 3) for name, t in ms.items() if name != "cudnn"})


def _overrides(text: str) -> dict[str, int]:
    """``ostage=2,persistent=1`` -> {"ostage": 2, "persistent": 1} (0 takes the parameter out)."""
    from attnforge.plan.hopper import HOPPER_PARAMS

    try:
        pairs = [item.split("=") for item in text.split(",")]
        overrides = {key.strip(): int(value) for key, value in pairs}
    except ValueError:
        raise SystemExit(f"--variants: {text!r} is not KEY=INT[,KEY=INT...] (e.g. ostage=2,persistent=1)") from None
    unknown = sorted(set(overrides) - HOPPER_PARAMS)
    if unknown:
        raise SystemExit(f"--variants: {', '.join(unknown)} in {text!r} is no parameter of the Hopper form ({', '.join(sorted(HOPPER_PARAMS))})")
    return overrides


def _apply(base: dict[str, int], overrides: dict[str, int]) -> dict[str, int]:
    params = {**base, **overrides}
    return {key: value for key, value in params.items() if value != 0}


def main() -> int:
    if "--child-job" in sys.argv:  # a child of _build_and_verify_in_child: one job, its result as the last line
        job = tuple(json.loads(sys.argv[sys.argv.index("--child-job") + 1]))
        print("RESULT " + json.dumps(_build_and_verify(job), default=str), flush=True)
        return 0
    if "--child-time" in sys.argv:  # a child of _time_row_in_child
        from attnforge.bench.matrix import full_matrix

        row_name, modules, rounds = json.loads(sys.argv[sys.argv.index("--child-time") + 1])
        print("RESULT " + json.dumps(_time_row(next(r for r in full_matrix() if r.name == row_name), modules, rounds)), flush=True)
        return 0
    from concurrent.futures import ThreadPoolExecutor

    from attnforge.bench.matrix import full_matrix, select
    from attnforge.spec import AttentionSpec

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", default="", help="comma-separated row name substrings (default: every prefill row)")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=JOB_DEADLINE_S, metavar="S",
                    help=f"seconds a build and its gate may take before the kernel is taken as hung (default {JOB_DEADLINE_S:.0f})")
    ap.add_argument("--allow-spill", type=int, default=0, metavar="BYTES",
                    help="time kernels that spill up to BYTES a thread too (the gate refuses every spill; this measures what one costs)")
    ap.add_argument("--switch", default="persistent", choices=("persistent", "ostage"),
                    help="one variant: the database's parameters with this one at 1 (against them without it)")
    ap.add_argument("--variants", nargs="+", metavar="KEY=INT[,KEY=INT]",
                    help="instead of --switch: each a set of overrides of the database's parameters (0 removes one), "
                         "e.g. ostage=2 ostage=2,persistent=1; a variant equal to the database's or to an earlier one is skipped")
    args = ap.parse_args()
    if args.variants:
        variants = {text: _overrides(text) for text in args.variants}
        strip: tuple[str, ...] = ()
    else:  # (--switch: the baseline is the database's parameters without the switch)
        variants, strip = {args.switch: {args.switch: 1}}, (args.switch,)
    label = "-".join(variants).replace(",", "_").replace("=", "")  # (a file name of letters, digits, '_' and '-')
    args.out.mkdir(parents=True, exist_ok=True)
    prefill = [r for r in full_matrix() if r.group == "prefill"]
    rows = select(prefill, patterns=args.rows.split(",")) if args.rows else prefill
    jobs = []
    same_as: dict[str, dict[str, str]] = {}  # row -> variant -> the variant (or "db") whose kernel it is
    for row in rows:
        kw = dict(heads=row.heads, kv_heads=row.kv_heads, head_dim=row.head_dim, dtype=row.dtype, causal=row.causal,
                  batch=row.batch, seqlen_q=row.seqlen_q, seqlen_k=row.seqlen_k)
        base = {k: v for k, v in _params(AttentionSpec(**kw)).items() if k not in strip}
        built_as = {"db": base}
        same_as[row.name] = {"db": "db"}
        jobs.append((f"{row.name}@db", kw, base, str(args.out), args.allow_spill))
        for name, overrides in variants.items():
            params = _apply(base, overrides)
            same_as[row.name][name] = next((v for v, p in built_as.items() if p == params), name)
            if same_as[row.name][name] == name:
                built_as[name] = params
                jobs.append((f"{row.name}@{name}", kw, params, str(args.out), args.allow_spill))
    for feature, kw in FEATURES:
        feature_params: list[dict[str, int]] = []
        for name, overrides in variants.items():
            fkw = {**kw, "head_dim": min(kw["head_dim"], 64)} if overrides.get("ostage") == 1 else kw  # (O's staging
            # tile fits beside the ring at D <= 64)
            params = _apply(_params(AttentionSpec(**fkw)), overrides)
            if params not in feature_params:  # (a variant that changes nothing here: built once)
                feature_params.append(params)
                jobs.append((f"feature-{feature}@{name}", fkw, params, str(args.out), args.allow_spill))
    t0 = time.time()
    built: dict[str, dict] = {}
    with ThreadPoolExecutor(args.jobs) as pool:  # each job a process of its own (no CUDA context forked), killed at its deadline
        for result in pool.map(lambda job: _build_and_verify_in_child(job, args.deadline), jobs):
            built[result["name"]] = result
            print(f"{'PASS' if result['ok'] else 'FAIL'} {result['name']} {result['params']} ({result.get('seconds')} s"
                  f"{', spills %d B' % result['spill_bytes'] if result.get('spill_bytes') else ''})"
                  + ("" if result["ok"] else f": {result['why'][:300]}"), flush=True)
    print(f"phase 1: {sum(r['ok'] for r in built.values())}/{len(built)} verified in {time.time() - t0:.0f} s", flush=True)
    timed, untimed = [], []
    for row in rows:
        own = [v for v, same in same_as[row.name].items() if v == same]
        modules = {v: built[f"{row.name}@{v}"]["module"] for v in own if built[f"{row.name}@{v}"]["ok"]}
        if modules:
            t = _time_row_in_child(row.name, modules, args.rounds, args.deadline + 60 * len(modules))
            if t is None:
                untimed.append(row.name)
                continue
            # a variant whose parameters equal an earlier one's is that kernel: its ratio, not a second timing
            t["ratio"].update({v: t["ratio"][same] for v, same in same_as[row.name].items() if v != same and same in t["ratio"]})
            t["same_as"] = {v: same for v, same in same_as[row.name].items() if v != same}
            timed.append(t)
    (args.out / f"{label}.json").write_text(json.dumps(dict(built=built, timed=timed), indent=1))
    names = list(variants)
    print("\n| row | db params | db vs cuDNN | " + " | ".join(f"{v} vs cuDNN | {v} / db" for v in names) + " |")
    print("|---|---|---|" + "---|---|" * len(names))
    for t in timed:
        r = t["ratio"]
        cells = [f"{r.get(v, '-')}{'=' + t['same_as'][v] if v in t['same_as'] else ''} | "
                 + (f"{r[v] / r['db']:.3f}" if {"db", v} <= set(r) else "-") for v in names]
        print(f"| {t['row']} | {built[t['row'] + '@db']['params']} | {r.get('db', '-')} | " + " | ".join(cells) + " |")
    geo = lambda xs: statistics.geometric_mean(xs)  # noqa: E731
    with_db = [t["ratio"] for t in timed if "db" in t["ratio"]]
    if with_db:
        best = geo([max(r.values()) for r in with_db])
        print(f"\ngeomean vs cuDNN over {len(with_db)} rows: db {geo([r['db'] for r in with_db]):.3f}, "
              + ", ".join(f"{v} {geo([r.get(v, r['db']) for r in with_db]):.3f}" for v in names)
              + f" (a variant equal to another is that one's kernel; one that failed counts as db); per row best {best:.3f}")
    if untimed:
        print(f"\nnot timed (the timing child hung or died): {', '.join(untimed)}")
    return 0 if all(r["ok"] for r in built.values()) and not untimed else 1


if __name__ == "__main__":
    sys.exit(main())
