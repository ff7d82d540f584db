"""Run 22 (issue 13): does the next work tile's Q (and its first K/V tile) load under this one's epilogue at D = 256?

In the persistent kernel with O through Qs (``ostage = 2``), the load warp's first statement of a work tile is the wait for
``q_free``, which the compute warpgroups arrive on only after O's TMA store from Qs: so the next tile's Q, *and its first K/V
tile behind it*, are copied only after the whole epilogue, with the tensor cores idle. Two text transforms of the generated
module:

- ``kv_first``: the load role copies a work tile's first K/V tile before it waits for Qs (their slots come free in the last
  loop turns of the tile before, not in its epilogue);
- ``q_per_set``: Q's ready and free barriers one per warpgroup set, so a set's next Q rows load as soon as its own O store
  has read them (the other set may still be in its last PV GEMM).
- ``kv_stage`` (call 4, after Nsight Compute put warpgroup 1 at its wait for Q for a tenth of its time at 1k keys): O leaves
  through the last K/V tile's ring slots, not Qs, so Qs goes back to the load warp once the tile's last QK^T GEMM is done and the
  next work tile's Q loads under the last PV GEMM and the epilogue. Warpgroup 0 stages its 64 x 256 rows of O in that tile's K
  slot, warpgroup 1 in its V slot (each slot is one set's O: BN = HM, D = Dv), each after a named barrier says the other set's
  GEMM reading the slot is done; the slot's free barrier is arrived on by that set after its TMA store has read it. A work tile
  without keys (none at these rows) stores through Qs as before.

    python3 q_early.py OUT [ROWS...]   # default rows: d256
"""
from __future__ import annotations

import json
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, "bench")


def _one(pattern: str, text: str) -> re.Match:
    found = list(re.finditer(pattern, text, flags=re.M))
    if len(found) != 1:
        raise ValueError(f"q_early: {pattern!r} matched {len(found)} times")
    return found[0]


def kv_first(source: str) -> str:
    """The load role's first K/V copy of a work tile before Q's wait; the tile loop from 1 on."""
    q = _one(r"^( +)# TL: Copy Q .*\n(?:\1.*\n)+?(?=\1# TL: for j = 0)", source)
    loop = _one(r"^(\s+)for j in range\(0, (gl\.cdiv\(Sk, BN\))\):\n((?:\1    .*\n)+)", source)
    ind, count, body = loop.group(1), loop.group(2), loop.group(3)
    first = f"{ind}if {count} > 0:  # the first K/V tile before Qs is waited for: its slots come free before the epilogue\n"
    first += f"{ind}    j = 0\n" + body
    rest = f"{ind}for j in range(1, {count}):\n" + body
    start, end = q.start(), loop.end()
    assert q.end() <= loop.start()
    return source[:start] + first + source[q.start():q.end()] + source[q.end():loop.start()] + rest + source[end:]


def q_per_set(source: str) -> str:
    """q_ready and q_free one per warpgroup set."""
    s = source
    s = s.replace("q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())\n    mbarrier.init(q_ready, count=1)",
                  "q_ready = gl.allocate_shared_memory(gl.int64, [SETS, 1], mbarrier.MBarrierLayout())\n"
                  "    for i in gl.static_range(SETS):\n        mbarrier.init(q_ready.index(i), count=1)")
    n_free = s.count("mbarrier.init(q_free, count=")
    s = re.sub(r"q_free = gl\.allocate_shared_memory\(gl\.int64, \[1\], mbarrier\.MBarrierLayout\(\)\)\n    mbarrier\.init\(q_free, count=\d+\)",
               "q_free = gl.allocate_shared_memory(gl.int64, [SETS, 1], mbarrier.MBarrierLayout())\n"
               "    for i in gl.static_range(SETS):\n        mbarrier.init(q_free.index(i), count=1)", s)
    s = s.replace("mbarrier.wait(q_ready, ", "mbarrier.wait(q_ready.index(WG), ")
    s = s.replace("mbarrier.arrive(q_free, count=1)", "mbarrier.arrive(q_free.index(WG), count=1)")
    m = _one(r"^( +)(mbarrier\.wait\(q_free, \(tiles \+ 1\) % 2\).*\n\1)?mbarrier\.expect\(q_ready, SETS \* q_desc\.block_type\.nbytes\)\n"
             r"\1for w in gl\.static_range\(SETS\):.*\n\1    tma\.async_copy_global_to_shared\(q_desc, (\[.*\]), q_ready, Qs\.index\(w\)\)\n", s)
    ind, coord = m.group(1), m.group(3)
    new = f"{ind}for w in gl.static_range(SETS):  # each set's Q rows on barriers of their own\n"
    if m.group(2):
        new += f"{ind}    mbarrier.wait(q_free.index(w), (tiles + 1) % 2)  # set w is done with its rows of Qs\n"
    new += (f"{ind}    mbarrier.expect(q_ready.index(w), q_desc.block_type.nbytes)\n"
            f"{ind}    tma.async_copy_global_to_shared(q_desc, {coord}, q_ready.index(w), Qs.index(w))\n")
    s = s[:m.start()] + new + s[m.end():]
    for bad in ("mbarrier.wait(q_ready, ", "(q_free, ", "expect(q_ready, "):
        if bad in s:
            raise ValueError(f"q_per_set: {bad!r} left")
    if n_free == 0 and "q_free" in s.split("def _load")[1].split("def attn_fwd")[0]:
        raise ValueError("q_per_set: q_free without its allocation")
    return s


def kv_stage(source: str) -> str:
    """O staged through the last K/V tile's ring slots (two warpgroup sets only; see the docstring)."""
    s = source
    if "SETS = gl.constexpr(2)" not in s or "q_t.store(out)" not in s or "persistent" not in s:
        raise ValueError("kv_stage: needs the persistent two-set kernel with O through Qs")
    helpers = (
        "@gluon.jit\n"
        "def _pair_sync(ID: gl.constexpr):  # (kv_stage) wait, with the other set's arrival, on named barrier ID\n"
        "    one_a_thread: gl.constexpr = gl.BlockedLayout([1], [32], [WG_WARPS], [0])\n"
        "    gl.inline_asm_elementwise(\"bar.sync $1, 256; mov.u32 $0, 0;\", \"=r,r\", [gl.full([32 * WG_WARPS], ID, gl.int32, one_a_thread)], dtype=gl.int32, is_pure=False, pack=1)\n\n"
        "@gluon.jit\n"
        "def _pair_arrive(ID: gl.constexpr):\n"
        "    one_a_thread: gl.constexpr = gl.BlockedLayout([1], [32], [WG_WARPS], [0])\n"
        "    gl.inline_asm_elementwise(\"bar.arrive $1, 256; mov.u32 $0, 0;\", \"=r,r\", [gl.full([32 * WG_WARPS], ID, gl.int32, one_a_thread)], dtype=gl.int32, is_pure=False, pack=1)\n\n")
    s = s.replace("@gluon.jit\ndef _compute(", helpers + "@gluon.jit\ndef _compute(", 1)
    # K's slot of the work tile's last K/V tile: warpgroup 0 keeps it for its O (the prologue's and the loop's release)
    s = re.sub(r"^( +)(mbarrier\.arrive\(k_free\.index\(\(\(lo \+ it\) % stages\)\), count=1\))\n",
               r"\1if WG != 0 or lo < hi - 1:  # (kv_stage) set 0 keeps the last tile's K slot for its O\n\1    \2\n", s, flags=re.M)
    n1 = s.count("lo < hi - 1:  # (kv_stage)")
    s = re.sub(r"^( +)(mbarrier\.arrive\(k_free\.index\(\(\(\(j \+ 1\) \+ it\) % stages\)\), count=1\))\n",
               r"\1if WG != 0 or j + 1 < hi - 1:  # (kv_stage) set 0 keeps the last tile's K slot for its O\n\1    \2\n", s, flags=re.M)
    # the last PV block: set 0 gives V's slot back (set 1 keeps it for its O) and says its last PV is done; before it, set 1
    # says its last QK^T is done and both give Qs back
    last = _one(r"^( +)if lo < hi:  # the last tile's PV GEMM\n", s)
    ind = last.group(1)
    early = (f"{ind}if lo < hi:  # (kv_stage) every QK^T GEMM of this work tile is done: Qs back to the load warp now\n"
             f"{ind}    mbarrier.arrive(q_free, count=1)\n"
             f"{ind}    if WG == 1:\n"
             f"{ind}        _pair_arrive(12)  # set 0 may write its O into the last tile's K slot\n")
    s = s[:last.start()] + early + s[last.start():]
    v = _one(r"^( +)(mbarrier\.arrive\(v_free\.index\(floormod\(\(\(hi - 1\) \+ it\), stages\)\), count=1\))\n", s)
    s = s[:v.start()] + (f"{v.group(1)}if WG == 0:  # (kv_stage) set 1 keeps the last tile's V slot for its O\n"
                         f"{v.group(1)}    {v.group(2)}\n{v.group(1)}    _pair_arrive(13)  # set 1 may write its O into it\n") + s[v.end():]
    # the epilogue: O through the slot, the slot given back after the store has read it; without keys, through Qs as before
    e = _one(r"^( +)q_t\.store\(out\).*\n\1fence_async_shared\(\).*\n\1tma\.async_copy_shared_to_global\(o_desc, (\[.*\]), Qs\.index\(WG\)\)\n"
             r"\1tma\.store_wait\(0\).*\n\1mbarrier\.arrive\(q_free, count=1\).*\n", s)
    i, coord, old = e.group(1), e.group(2), e.group(0)
    new = (f"{i}if lo < hi:  # (kv_stage) O through the last K/V tile's slot of this set\n"
           f"{i}    s_last = floormod(((hi - 1) + it), stages)\n"
           f"{i}    if WG == 0:\n"
           f"{i}        _pair_sync(12)  # set 1's last QK^T has read Ks[s_last]\n"
           f"{i}        o_t = Ks.index(s_last)\n"
           f"{i}    else:\n"
           f"{i}        _pair_sync(13)  # set 0's last PV has read Vs[s_last]\n"
           f"{i}        o_t = Vs.index(s_last)\n"
           f"{i}    o_t.reshape([HM, Dv]).store(out)\n"
           f"{i}    fence_async_shared()\n"
           f"{i}    tma.async_copy_shared_to_global(o_desc, {coord}, o_t)\n"
           f"{i}    tma.store_wait(0)  # the store has read the slot\n"
           f"{i}    if WG == 0:\n"
           f"{i}        mbarrier.arrive(k_free.index(s_last), count=1)\n"
           f"{i}    else:\n"
           f"{i}        mbarrier.arrive(v_free.index(s_last), count=1)\n"
           f"{i}else:\n" + "".join(f"{i}    {line[len(i):]}\n" for line in old.splitlines()))
    s = s[:e.start()] + new + s[e.end():]
    if n1 != 1 or s.count("# (kv_stage)") != 6:
        raise ValueError(f"kv_stage: {n1} prologue releases, {s.count('# (kv_stage)')} edits")
    return s


VERSIONS = {  # name: (parameter overrides over the database's, transforms)
    "p": ({"persistent": 1}, ()),
    "p_kv": ({"persistent": 1}, (kv_first,)),
    "p_kv_q": ({"persistent": 1}, (kv_first, q_per_set)),
    "q": ({}, (q_per_set,)),
}
ALL_VERSIONS = {**VERSIONS, "p_kvo": ({"persistent": 1}, (kv_stage,))}
if "--kv-stage" in sys.argv:  # call 4: O through the last K/V tile's slots, beside the persistent kernel
    sys.argv.remove("--kv-stage")
    VERSIONS = {v: ALL_VERSIONS[v] for v in ("p", "p_kvo")}
ALLOW_SPILL = 64  # the persistent D = 256 kernel spills 16 B (40 causal): measured anyway, the gate would refuse it


def job(args):
    name, kw, out, version = args
    import gluon_persistent as gp
    from attnforge.backends.gluon import GluonBackend, _import
    from attnforge.backends.gluon.compile import compile_for_target
    from attnforge.backends.gluon.kernel import GluonKernel
    from attnforge.plan.builtin import Candidate
    from attnforge.plan.hopper import hopper_plans
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.verify import verify
    spec = AttentionSpec(**kw)
    params = gp._params(spec)
    t0 = time.time()
    try:
        over, transforms = ALL_VERSIONS[version] if version != "db" else ({}, ())
        params = {**params, **over}
        plan = next(hopper_plans(spec, get_target("h200"), prefer=Candidate(params, "asked for")))
        if plan.params != params:
            raise ValueError(f"the checker refused {params}")
        source = GluonBackend().translate(plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl").source
        for t in transforms:
            source = t(source)
        path = Path(out) / "src" / f"{name}@{version}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        rep = compile_for_target(_import(path), get_target("h200"))
        if rep.spill_bytes > ALLOW_SPILL:
            raise ValueError(f"spills {rep.spill_bytes} B")
        rec = verify(GluonKernel(path), spec, params, target=get_target("h200"), fail_fast=True)
        return dict(name=name, version=version, params=params, ok=rec.passed, why=rec.statement, module=str(path), err_o=rec.max_err_o,
                    spill=rep.spill_bytes, regs=rep.registers, seconds=round(time.time() - t0, 1))
    except Exception as e:  # noqa: BLE001
        return dict(name=name, version=version, params=params, ok=False, why=f"{type(e).__name__}: {str(e)[:300]}")


def _in_child(flag: str, payload, deadline_s: float) -> dict:
    import subprocess
    try:
        done = subprocess.run([sys.executable, __file__, sys.argv[1], flag, json.dumps(payload)], capture_output=True, text=True,
                              timeout=deadline_s)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {deadline_s:.0f} s: taken as hung, killed"}
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("RESULT ")), None)
    return json.loads(line[len("RESULT "):]) if line else {"error": "the child gave no result: " + done.stderr.strip()[-300:]}


def main():
    import gluon_persistent as gp
    if "--job" in sys.argv:
        print("RESULT " + json.dumps(job(tuple(json.loads(sys.argv[sys.argv.index("--job") + 1]))), default=str), flush=True)
        return
    if "--time" in sys.argv:
        from attnforge.bench.matrix import full_matrix
        name, mods = json.loads(sys.argv[sys.argv.index("--time") + 1])
        row = next(r for r in full_matrix() if r.name == name)
        print("RESULT " + json.dumps(gp._time_row(row, mods, 3)), flush=True)
        return
    from attnforge.bench.matrix import full_matrix, select
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    rows = select([r for r in full_matrix() if r.group == "prefill"], patterns=sys.argv[2:] or ["d256"])
    jobs = [(r.name, dict(heads=r.heads, kv_heads=r.kv_heads, head_dim=r.head_dim, dtype=r.dtype, causal=r.causal, batch=r.batch,
                          seqlen_q=r.seqlen_q, seqlen_k=r.seqlen_k), str(out), v) for v in ("db", *VERSIONS) for r in rows]
    t0, built = time.time(), {}
    with ThreadPoolExecutor(14) as pool:
        for done in as_completed([pool.submit(lambda j: (lambda r: r if "error" not in r else dict(name=j[0], version=j[3], ok=False, why=r["error"]))(_in_child("--job", j, 240)), j) for j in jobs]):
            r = done.result()
            built.setdefault(r["name"], {})[r["version"]] = r
            print(f"{r['name']:28s} {r['version']:7s} {'PASS' if r.get('ok') else 'FAIL'} spill {r.get('spill')} err {r.get('err_o')} "
                  f"{'' if r.get('ok') else r.get('why', '')[:200]}", flush=True)
    print(f"phase 1 {time.time() - t0:.0f} s", flush=True)
    timed = []
    print("| row | db params | db vs cuDNN | " + " | ".join(f"{v} / db" for v in VERSIONS) + " |")
    print("|---|---|---|" + "---|" * len(VERSIONS))
    for row in rows:
        b = built.get(row.name, {})
        mods = {v: b[v]["module"] for v in ("db", *VERSIONS) if b.get(v, {}).get("ok")}
        if "db" not in mods or len(mods) < 2:
            continue
        t = _in_child("--time", [row.name, mods], 300)
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
    (out / "q_early.json").write_text(json.dumps(dict(built=built, timed=timed), indent=1, default=str))


if __name__ == "__main__":
    main()
