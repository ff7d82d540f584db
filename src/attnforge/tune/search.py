"""``attnforge tune``'s search: TL parameters for one spec bucket and sequence-length bucket on a
GPU, every candidate through the whole gate (check, interpret, translate, compile, verify) before
it is timed, within a time budget.

The candidates start from the planner's first choice and walk its neighbours (BM, BN, warps,
stages, TMA, persistent scheduling), nearest first. A rejection prunes what would fail for the
same reason: a kernel that spills rules out tiles at least as large under the same schedule
switches (not fewer stages: stages cost shared memory, not registers; in the Hopper form only of
as many warps, whose count sets each thread's registers); one over shared memory rules
out as many stages of tiles at least as large. Times are medians of CUDA events on the bucket's
timing shape, of launches as a user's calls make them (the first checked, the later ones on the
kernel's fast path), beside the planner's first choice in the same run. Without a GPU, candidates run in the interpreter on a
tiny shape: the search and the database work, but the times say nothing about a GPU.

A backend that translates the Hopper form (``tl_form == "hopper"``: gluon) is searched over that
form's parameters instead: the planner's first choice, its best at each other count of compute
warpgroups (BM and warps: ``hopper_order``), then the first choice's K/V tile width, ring depth and
schedule switches (``pingpong``, ``overlap``, ``persistent``, ``ostage``, ``qreg``); it has no interpreter, so
it is tuned on its GPU only.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Callable

from ..backends import Backend, choose_backend
from ..cache import spec_bucket
from ..errors import AttnforgeError
from ..generate import generate
from ..plan import builtin
from ..spec import AttentionSpec
from ..targets import Target
from . import database

Progress = Callable[[str], None]


@dataclass
class Trial:
    params: dict[str, int]
    ms: float | None = None
    rejected: str | None = None  # which gate refused it, and why


@dataclass
class Outcome:
    entry: database.Entry | None
    trials: list[Trial] = field(default_factory=list)
    kernel: object = field(default=None, repr=False)  # the entry's kernel, loaded (for a head-to-head)


def timing_shape(spec: AttentionSpec, seq: str, native: bool) -> tuple[int, int, int, int, int]:
    """(B, Hq, Hkv, Sq, Sk) the bucket is timed on: 16k tokens at 2048 hidden as the benchmarks
    use (decode: B=64 at the bucket's length); a tiny shape in the interpreter."""
    g = spec.group_size
    # a packed-GQA spec (small Sq) keeps its Sq: a longer one would time, tune and record a prefill
    # kernel under the packed kernel's database key
    packed = not spec.is_decode and builtin.packs_gqa(spec)
    if not native:
        return 1, g, 1, spec.seqlen_q if spec.is_decode or packed else 32, 48
    length = int(seq.lstrip("<=>")) if not seq.startswith(">") else 2 * database.SEQ_BUCKETS[-1]
    hq = max(g, 2048 // spec.head_dim // g * g)
    if spec.is_decode or packed:
        return 64, hq, hq // g, spec.seqlen_q, length
    return max(1, 16384 // length), hq, hq // g, length, length


def neighbours(first: dict[str, int], target: Target, kind: str) -> list[dict[str, int]]:
    """The planner's first choice, then parameter sets around it, nearest (fewest changes) first:
    tiles, warps and stages; TMA and persistent scheduling for prefill. Not decode's BM (the
    group's packed rows) nor its split count, which the launcher picks per call from the batch
    and KV length (``attnforge.splits``)."""
    axes: dict[str, list[int]] = {"BM": [64, 128] if kind == "prefill" else [first["BM"]],
                                  "BN": [32, 64, 128], "warps": [4, 8], "stages": [1, 2, 3, 4]}
    if "tma" in first:
        axes["tma"] = [first["tma"], 1 - first["tma"]]
    if kind == "prefill":
        axes["persistent"] = [0, 1]
    return _nearest_first(first, axes, ("persistent", "tma"))


def _nearest_first(first: dict[str, int], axes: dict[str, list[int]], switches: tuple[str, ...]) -> list[dict[str, int]]:
    """Every combination of ``axes`` over ``first``, fewest changes first; a switch that is off is
    left out (TL parameters are >= 1)."""
    grid = []
    for values in itertools.product(*axes.values()):
        params = {**first, **dict(zip(axes, values))}
        for switch in switches:
            if params.get(switch) == 0:
                params.pop(switch)
        grid.append(params)
    distance = lambda p: sum(p.get(k) != first.get(k) for k in set(p) | set(first))  # noqa: E731
    unique = {tuple(sorted(p.items())): p for p in grid}
    return sorted(unique.values(), key=distance)


def hopper_neighbours(first: dict[str, int]) -> list[dict[str, int]]:
    """The Hopper form's first choice, then its neighbours, nearest first: BN, the ring's depth (2 to 4, the first choice's,
    and two slots deeper past 4) and the schedule switches, O's staging tile (BM and warps stay the first choice's: 64 rows
    a warpgroup, wgmma's smallest M per warpgroup; ping-pong stays on where BM is not a power of two: BM = 192 is three warpgroups' rows, and one set's 192-row
    TMA box is refused by the translator)."""
    bm = first.get("BM", 128)
    depth = first.get("stages", 2)  # (the first choice's own ring depth, and two slots more past 4: four warpgroups take 6)
    axes = {"BN": [64, 128], "stages": sorted({2, 3, 4, depth} | ({depth + 2} if depth >= 4 else set())),
            "pingpong": [0, 1] if bm & (bm - 1) == 0 else [1], "overlap": [0, 1], "persistent": [0, 1], "ostage": [0, 1, 2, 3], "qreg": [0, 1]}
    grid = _nearest_first(first, axes, ("pingpong", "overlap", "persistent", "ostage", "qreg"))
    return [p for p in grid if _translator_takes(p)]


def _translator_takes(p: dict[str, int]) -> bool:
    """Whether the gluon translator takes these schedule switches together, so that a candidate it would refuse does not use
    up a --max-candidates slot: not Q in registers with O out through Qs (``shape._check_q_in_registers``), and O through the
    last K/V tile's slots only in a persistent, overlapped ping-pong kernel of two warpgroups with BN = BM / 2 and Q read from
    Qs (``shape._check_o_via_kv``; its D == Dv the translator checks against the spec)."""
    if p.get("qreg") and p.get("ostage") in (2, 3):
        return False
    return p.get("ostage") != 3 or bool(p.get("persistent") and p.get("overlap") and p.get("pingpong") and p["warps"] == 8
                                         and p["BN"] * 2 == p["BM"] and not p.get("chain"))


def hopper_order(planned: list[dict[str, int]]) -> list[dict[str, int]]:
    """What the tuner times for the Hopper form, in order: the planner's first choice, the planner's best candidate for each other
    count of compute warpgroups (BM and warps: three against two at D = 64), then the first choice's neighbours (which keep
    its BM and warps), each once. So ``--max-candidates 2`` times two warpgroup counts head to head where the planner offers
    both, rather than the first choice against its nearest neighbour."""
    first = planned[0]
    counts: dict[tuple[int, int], dict[str, int]] = {}
    for p in planned:  # the planner's best for each (BM, warps)
        counts.setdefault((p["BM"], p["warps"]), p)
    order: dict[tuple, dict[str, int]] = {}
    for p in [*counts.values(), *hopper_neighbours(first)]:
        order.setdefault(tuple(sorted(p.items())), p)
    return list(order.values())


# schedule switches, which move a kernel's register pressure as much as its tile does (a persistent causal D = 128 Hopper-form
# kernel spilled storing O from registers, not through Qs; a chained one at D = 128 where the unchained did not); the portable
# form's ``persistent`` counts too
_REGISTER_SWITCHES = ("pingpong", "overlap", "persistent", "ostage", "chain", "qreg")


def _pruned(params: dict[str, int], by: list[tuple[str, dict[str, int]]], *, budget_by_warps: bool = False) -> bool:
    """Whether an earlier rejection rules ``params`` out (see the module docstring). ``budget_by_warps`` (the Hopper form):
    a thread's register budget is set by the warps (setmaxnreg over whole warpgroups: 240 a compute thread for 8 warps, 160
    for 12), so a spill rules out only candidates of as many warps."""
    for why, bad in by:
        tile, bad_tile = params["BM"] * params["BN"], bad["BM"] * bad["BN"]
        same_switches = all(params.get(k, 0) == bad.get(k, 0) for k in _REGISTER_SWITCHES)
        warps = params["warps"] == bad["warps"] if budget_by_warps else params["warps"] <= bad["warps"]
        if why == "spills" and tile >= bad_tile and warps and same_switches:
            return True
        if (why == "shared" and params["BN"] >= bad["BN"] and params["BM"] >= bad["BM"] and params.get("stages", 1) >= bad.get("stages", 1)
                and (params.get("ostage") == 1 or bad.get("ostage") != 1)  # (O's staging tile: only what holds one too)
                and (params.get("chain") == 1 or bad.get("chain") != 1)):  # (chain's second Q tile: likewise)
            return True
    return False


def _reason(message: str) -> str | None:
    text = message.lower()
    if "spill" in text or "register" in text:
        return "spills"
    if "shared memory" in text or "tl503" in text or "tl504" in text:
        return "shared"
    return None


def search_order(chosen: Backend, timed_spec: AttentionSpec, bucket: AttentionSpec, target: Target,
                 max_candidates: int | None = None) -> tuple[str, dict[str, int], list[dict[str, int]], Callable[[dict[str, int]], str]]:
    """What ``tune`` searches for a backend: the kind of program, the planner's first choice for the
    timed shape, the candidates nearest first (the Hopper form's prefill: ``hopper_order``), and the TL source of a candidate
    for the bucket. The Hopper form's split-KV pair (decode, packed small-Sq GQA) searches its own candidates, not the
    prefill kernel's neighbours."""
    hopper = chosen.tl_form == "hopper"
    if hopper and (timed_spec.is_decode or builtin.packs_gqa(timed_spec)):
        from ..plan.hopper import hopper_decode_candidates, hopper_decode_source

        cands = hopper_decode_candidates(timed_spec, target)
        return ("decode", cands[0].params, [c.params for c in cands][: max_candidates or None],
                lambda p: hopper_decode_source(bucket, target, p))
    if hopper:
        from ..plan.hopper import hopper_candidates, hopper_source

        planned = [c.params for c in hopper_candidates(timed_spec, target)]
        order = [p for p in hopper_order(planned) if not (p.get("qreg") and timed_spec.windowed)]  # (refused by the translator)
        return "prefill", planned[0], order[: max_candidates or None], lambda p: hopper_source(bucket, target, p)
    kind, cands = builtin.candidates(timed_spec, target, refused=set(chosen.refused_strategies(target)), mma=chosen.mma)
    first = cands[0].params
    return kind, first, neighbours(first, target, kind)[: max_candidates or None], lambda p: builtin.source_for(bucket, target, kind, p)


def tune(spec: AttentionSpec, target: Target, *, backend: str | Backend = "auto", seq: str | None = None, budget_s: float = 300.0,
         max_candidates: int | None = None, db: Path | None = None, record: bool = True, progress: Progress | None = None) -> Outcome:
    """Search one (spec bucket, sequence bucket) on ``target`` and record the fastest verified
    candidate in the database ``db`` (the user's by default; ``record=False``: search only). Needs the target's GPU to time
    natively; without a GPU the interpreter runs a tiny shape (see the module docstring)."""
    import torch

    say = progress or (lambda text: None)
    chosen = backend if isinstance(backend, Backend) else choose_backend(backend, spec, target)
    seq = seq or database.seq_bucket(spec)
    native = torch.cuda.is_available()
    if native:
        from ..targets import detect_local_target

        local = detect_local_target(torch.cuda.current_device())
        if local.cc != target.cc:
            raise AttnforgeError(f"tuning for {target.name} ({target.sm}) needs that GPU; this one is {local.name} ({local.sm})",
                                 where="--target", hint=f"tune on a {target.name}, or pass --target {local.name}")
    hopper = chosen.tl_form == "hopper"
    if hopper and not native:
        raise AttnforgeError(f"tuning the {chosen.name} backend needs its GPU: its kernels have no CPU interpreter to run in",
                             where="--backend", hint=f"run attnforge tune --backend {chosen.name} on a {target.name}")
    B, Hq, Hkv, Sq, Sk = timing_shape(spec, seq, native)
    shape = f"B={B} Hq={Hq}/Hkv={Hkv} Sq={Sq} Sk={Sk}"
    bucket = spec_bucket(spec)
    timed_spec = AttentionSpec(**{**spec.to_dict(), "batch": B, "heads": Hq, "kv_heads": Hkv, "seqlen_q": Sq, "seqlen_k": Sk})
    kind, first, order, source_for = search_order(chosen, timed_spec, bucket, target, max_candidates)
    deadline = time.monotonic() + budget_s
    trials: list[Trial] = []
    pruned_by: list[tuple[str, dict[str, int]]] = []
    inputs = _inputs(spec, B, Hq, Hkv, Sq, Sk, "cuda" if native else "cpu")
    best_kernel: tuple[float, object] | None = None
    with tempfile.TemporaryDirectory(prefix="attnforge-tune-") as tmp:
        for i, params in enumerate(order):
            if time.monotonic() > deadline and trials:
                say(f"budget of {budget_s:.0f} s spent after {len(trials)} candidate(s)")
                break
            if _pruned(params, pruned_by, budget_by_warps=hopper):
                continue
            trial = Trial(params)
            trials.append(trial)
            text = source_for(params)
            out = Path(tmp) / f"c{i}"
            result = generate(bucket, target, out, backend=chosen, tl=text, tl_file=f"candidate-{i}.tl", tuned=False)
            if not result.verified:
                trial.rejected = f"{result.failed_step or 'verify'}: {(result.error or 'not verified').splitlines()[0][:200]}"
                why = _reason(result.error or "")
                if why is not None:
                    pruned_by.append((why, params))
                say(f"rejected {_fmt(params)}: {trial.rejected}")
                continue
            kernel = chosen.load(out / chosen.source_file, interpret=not native)
            trial.ms = _time(kernel, inputs, spec, native)
            say(f"{_fmt(params)}: {trial.ms:.3f} ms" + (" (the planner's first choice)" if params == first else ""))
            if best_kernel is None or trial.ms < best_kernel[0]:
                best_kernel = (trial.ms, kernel)
    timed = [t for t in trials if t.ms is not None]
    if not timed:
        return Outcome(None, trials)
    best = min(timed, key=lambda t: t.ms)
    planner = next((t.ms for t in timed if t.params == first), None)
    device = torch.cuda.get_device_name() if native else "cpu (interpreter)"
    versions = ", ".join(f"{name} {version}" for name, version in {"torch": torch.__version__, **chosen.versions()}.items())
    entry = database.Entry(target=target.name, backend=chosen.name, spec=database.spec_key(spec), seq=seq, params=best.params, ms=best.ms,
                           planner_ms=planner, device=device, shape=shape, tried=len(trials),
                           measured=f"{date.today().isoformat()}, {versions}",
                           rejected=[f"{_fmt(t.params)}: {t.rejected}" for t in trials if t.rejected], kind=kind)
    if record:
        database.record(entry, db)
    return Outcome(entry, trials, best_kernel[1])


def tune_head_to_head(spec: AttentionSpec, target: Target, backends: list[str], *, rounds: int = 5, seq: str | None = None,
                      db: Path | None = None, record: bool = True, progress: Progress | None = None, **search) -> dict[str, Outcome]:
    """Each backend's search (``tune``), then their best kernels timed in turns on the same inputs,
    ``rounds`` rounds, each entry's time the median of its rounds: times taken side by side in one
    run, which ``--backend auto`` compares to choose (times from different runs, before and after a
    backend changed, chose wrong). A backend whose search found nothing is left out."""
    import statistics

    import torch

    say = progress or (lambda text: None)
    if len(set(backends)) != len(backends) or len(backends) < 2 or "auto" in backends:
        raise AttnforgeError(f"a head-to-head needs two or more different backends by name, not {','.join(backends)}", where="--backend",
                             hint="e.g. --backend triton,gluon")
    for name in backends:  # every one refused up front, before any search runs
        choose_backend(name, spec, target)
    outcomes = {}
    for name in backends:
        say(f"searching the {name} backend")
        try:
            outcomes[name] = tune(spec, target, backend=name, seq=seq, record=False, progress=progress, **search)
        except AttnforgeError as err:  # this backend cannot be tuned here (its GPU): the others still are
            say(f"{name}: not searched: {err.message}")
            outcomes[name] = Outcome(None, [])
    found = {name: o for name, o in outcomes.items() if o.entry is not None}
    if len(found) >= 2:
        native = torch.cuda.is_available()
        B, Hq, Hkv, Sq, Sk = timing_shape(spec, seq or database.seq_bucket(spec), native)
        inputs = _inputs(spec, B, Hq, Hkv, Sq, Sk, "cuda" if native else "cpu")
        times: dict[str, list[float]] = {name: [] for name in found}
        for r in range(rounds):
            for name in (list(found) if r % 2 == 0 else list(found)[::-1]):  # in turns, the order alternating
                times[name].append(_time(found[name].kernel, inputs, spec, native))
        for name, outcome in found.items():
            entry = outcome.entry
            if entry.planner_ms == entry.ms:  # the best is the planner's first choice: one kernel, one time
                entry.planner_ms = statistics.median(times[name])
            entry.ms = statistics.median(times[name])
            others = ", ".join(f"{other} {statistics.median(times[other]):.3f} ms" for other in found if other != name)
            entry.measured += f"; head to head with {others} ({rounds} rounds in turns)"
            say(f"head to head: {name} {entry.ms:.3f} ms ({', '.join(f'{t:.3f}' for t in times[name])})")
    for outcome in found.values():
        if record:
            database.record(outcome.entry, db)
    return outcomes


def _inputs(spec: AttentionSpec, B: int, Hq: int, Hkv: int, Sq: int, Sk: int, device: str):
    import torch

    from ..dtypes import torch_dtype

    dtype = torch_dtype(spec.dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(B, Hq, Sq, spec.head_dim, generator=gen, device=device, dtype=dtype)
    k = torch.randn(B, Hkv, Sk, spec.head_dim, generator=gen, device=device, dtype=dtype)
    v = torch.randn(B, Hkv, Sk, spec.head_dim_v, generator=gen, device=device, dtype=dtype)
    return q, k, v


def _time(kernel, inputs, spec: AttentionSpec, native: bool) -> float:
    """Median milliseconds of one launch: CUDA events natively, wall time in the interpreter."""
    import torch

    q, k, v = inputs
    o = torch.empty(q.shape[:3] + (spec.head_dim_v,), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    scalars = {**spec.runtime_scalars()}
    if spec.alibi_slopes is not None:
        from ..spec import alibi_slopes_for

        scalars["alibi_slopes"] = torch.tensor(alibi_slopes_for(q.shape[1]), dtype=torch.float32, device=q.device)
    if native:
        from ..api import PreparedCall
        from ..backends.triton.timing import median_ms

        # timed as a user's calls run (attnforge.attention): the first launch checked, the later ones replayed with the
        # checks skipped. Timed through ``launch`` with its checks, a short Gluon kernel was host-bound: 0.29 against
        # 0.19 ms for the same kernel in attnforge bench (bench/RESULTS.md, 2026-12-02 run 8)
        slopes = scalars.pop("alibi_slopes", None)
        prepared = PreparedCall(kernel, scalars, slopes, out_bshd=False)
        return median_ms(lambda: prepared.launch(q, k, v, o, lse))
    run = lambda: kernel.launch(q, k, v, o, lse, **scalars)  # noqa: E731
    times = []
    for _ in range(2):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def _fmt(params: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


__all__ = ["Outcome", "Trial", "neighbours", "timing_shape", "tune", "tune_head_to_head"]
