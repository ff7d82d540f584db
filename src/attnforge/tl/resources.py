"""Resource estimates of a TL kernel: shared memory (with pipeline stages) and registers per thread.

Shared memory is exact for the buffers the program allocates. Registers are an estimate: the
peak of live register tiles, spread over the threads, plus a fixed overhead (REG_OVERHEAD).
"""

from __future__ import annotations

import itertools
import math

from ..dtypes import FORMATS
from ..errors import TLRuntimeError
from ..targets import Target
from . import nodes as n
from .evaluate import evaluate
from .check_roles import MAX_OCCUPANCY, occupancy, role_regs, role_warps, shared_thread_regs
from .findings import Finding, KernelResources

REG_OVERHEAD = 24  # addresses, loop counters, row indices: registers a thread needs besides tiles
BARRIER_BYTES = 8  # an mbarrier is one 64-bit word of shared memory
BLOCK_RESERVED_SMEM = 1024  # shared memory the driver keeps for each resident block (sm_80 and later)


def estimate(kernel: n.Kernel, env: dict, tgt: Target | None, report, events: list, skip: bool) -> KernelResources:
    """Shared memory and registers of one kernel, with TL503/TL504/TL506/TL109 findings for ``tgt``.

    ``events`` are the checker's register definitions and operand reads in program order;
    ``skip`` leaves the estimates out (open parameters).
    """
    res = KernelResources(kernel.name)
    if skip:
        return res
    params = kernel.param_map()
    breakdown = _smem_breakdown(kernel, env)
    if breakdown is None:
        return res  # a dimension or stage count that does not evaluate is reported by the walk
    res.smem_breakdown = breakdown
    res.smem_bytes = sum(breakdown.values())
    warps = params.get("warps")
    if warps is not None and warps < 1:
        return res  # reported as TL102
    if warps is None:
        report(Finding("TL109", "warning", kernel.line, kernel.col, "no 'warps' parameter: the register estimate assumes 4 warps", "add param warps = 4 (or 8)"))
        warps = 4
    res.threads = warps * 32
    ranges = role_warps(kernel, env) if n.roles(kernel) else None
    if ranges and all(b > a for _, a, b in ranges):
        # Roles: the block has every role's warps; the register tiles are counted against the first
        # role's threads (the default partition, which holds the accumulators).
        warps = max(b for _, _, b in ranges)
        res.threads = warps * 32
        res.regs_per_thread = _register_estimate(kernel, report_events=events, threads=(ranges[0][2] - ranges[0][1]) * 32)
        res.regs_per_thread += _q_registers(kernel, env, threads=(ranges[0][2] - ranges[0][1]) * 32)
    else:
        ranges = None
        res.regs_per_thread = _register_estimate(kernel, report_events=events, threads=res.threads)
    if tgt is None:
        return res
    if res.smem_bytes > tgt.smem_per_block_optin:
        parts = ", ".join(f"{k} {v // 1024} KiB" if v >= 1024 else f"{k} {v} B" for k, v in res.smem_breakdown.items())
        if res.smem_bytes - res.smem_breakdown.get("o_stage", 0) <= tgt.smem_per_block_optin:  # (only O's staging tile is too much)
            fix = "ostage = 2 (O stored from Qs, no tile of its own; needs D == Dv), or leave ostage out"
        else:
            fix = _smem_fix(kernel, env, tgt.smem_per_block_optin)
        report(Finding("TL503", "error", kernel.line, kernel.col,
                       f"shared memory {res.smem_bytes // 1024} KiB exceeds {tgt.name}'s {tgt.smem_per_block_optin // 1024} KiB per block ({parts})", fix))
    _check_occupancy(kernel, res, tgt, report)
    if res.threads > tgt.max_threads_per_block:
        report(Finding("TL506", "error", kernel.line, kernel.col, f"{warps} warps are {res.threads} threads, more than {tgt.max_threads_per_block} per block", "use at most 32 warps; 4 or 8 is usual"))
    if res.regs_per_thread > tgt.regs_per_thread_max:
        report(Finding("TL504", "error", kernel.line, kernel.col,
                       f"about {res.regs_per_thread} registers per thread are live at the peak, more than {tgt.regs_per_thread_max}: the kernel would spill",
                       "raise warps (spreads the accumulators), or lower BM or BN"))
    elif ranges is not None and occupancy(kernel) > 1 and res.regs_per_thread > (cap := shared_thread_regs(tgt, occupancy(kernel), warps)):
        report(Finding("TL504", "error", kernel.line, kernel.col,
                       f"about {res.regs_per_thread} registers per thread are live at the peak, more than the {cap} a thread may hold with "
                       f"occupancy = {occupancy(kernel)} ({tgt.regs_per_sm} registers over {occupancy(kernel)} programs of {warps} warps in whole "
                       "warpgroups): it would not compile", "leave occupancy out (one program an SM), or lower BM, BN or the head dim's tiles"))
    elif ranges is not None:
        budget = (role_regs(ranges, tgt, occupancy(kernel)) or [None])[0]  # None: reported as TL510
        if budget is not None and res.regs_per_thread > budget:
            first = ranges[0][0]
            report(Finding("TL504", "error", first.line, first.col,
                           f"about {res.regs_per_thread} registers per thread are live at the peak in role {first.name}, more than its budget of {budget}: it would spill",
                           "lower BM or BN, raise its warps, or give it more registers (regs) and the other roles fewer"))
    elif res.regs_per_thread * res.threads > tgt.regs_per_sm:
        report(Finding("TL504", "error", kernel.line, kernel.col,
                       f"{res.threads} threads x {res.regs_per_thread} registers exceed the {tgt.regs_per_sm} registers of an SM",
                       "lower warps or the tile sizes"))
    return res


def _check_occupancy(kernel: n.Kernel, res: KernelResources, tgt: Target, report) -> None:
    """TL511: ``param occupancy = N`` (N programs resident on an SM) must leave each its share:
    N blocks' shared memory (with the driver's reserve per block) within the SM's, N blocks' threads
    within the SM's. (Registers: each role's budget is taken from 1/N of the register file, TL510.)"""
    want = kernel.param_map().get("occupancy")
    if want is None:
        return
    if not isinstance(want, int) or not 1 <= want <= MAX_OCCUPANCY:
        report(Finding("TL511", "error", kernel.line, kernel.col, f"occupancy = {want}: the programs resident on an SM, 1 to {MAX_OCCUPANCY}",
                       "write occupancy = 2 (two programs an SM), or leave it out (1)"))
        return
    need = want * (res.smem_bytes + BLOCK_RESERVED_SMEM)
    if need > tgt.smem_per_sm:
        report(Finding("TL511", "error", kernel.line, kernel.col,
                       f"occupancy = {want} needs {want} x ({res.smem_bytes // 1024} KiB + 1 KiB reserved) = {need // 1024} KiB of shared memory, "
                       f"more than {tgt.name}'s {tgt.smem_per_sm // 1024} KiB an SM", "fewer ring stages or a smaller BN, or a lower occupancy"))
    if want * res.threads > tgt.max_threads_per_sm:
        report(Finding("TL511", "error", kernel.line, kernel.col,
                       f"occupancy = {want} needs {want * res.threads} threads an SM, more than {tgt.name}'s {tgt.max_threads_per_sm}",
                       "fewer warps, or a lower occupancy"))


def _smem_breakdown(kernel: n.Kernel, env: dict) -> dict[str, int] | None:
    """Bytes of each shared buffer, times the stage count of a pipelined loop that fills it."""
    dtypes = kernel.dtype_map()
    stages_of: dict[str, int] = {}
    try:
        for loop in (s for s in n.walk(kernel.body) if isinstance(s, n.Loop) and s.stages is not None):
            stages = int(evaluate(loop.stages, env))
            for s in n.walk(loop.body):
                if isinstance(s, n.Copy) and s.dst_level == "shared":
                    stages_of[s.dst] = max(stages_of.get(s.dst, 1), stages)
        out = {}
        for s in n.walk(kernel.body):
            if isinstance(s, n.Allocate) and s.level == "shared":
                ring = 1 if s.ring is None else int(evaluate(s.ring, env))
                out[s.name] = _tile_bytes(s, env, dtypes) * stages_of.get(s.name, 1) * ring
            elif isinstance(s, n.Allocate) and s.level == n.BARRIER:
                out[s.name] = BARRIER_BYTES * math.prod(int(evaluate(d, env)) for d in s.shape)
        if kernel.param_map().get("chain") == 1:
            # a Hopper-form schedule (docs/TL.md section 11.5): Q in a slot per work tile's parity
            q = _q_tile(kernel)
            if q is not None:
                out[f"{q.name} (the next work tile's)"] = out[q.name]
        if kernel.param_map().get("ostage") == 1 and {"BM", "Dv"} <= set(env):
            # a Hopper-form schedule (docs/TL.md section 11.5): O leaves through a BM x Dv shared tile (2: through Qs)
            out["o_stage"] = int(env["BM"]) * int(env["Dv"]) * FORMATS[dtypes.get("out", "fp16")].bytes
        return out
    # evaluate() raises every failure of an expression as TLRuntimeError. Its value is an int or
    # a float (the env holds no arrays): int() of an infinite one (x / 0, exp of a large number)
    # raises OverflowError, of a NaN (0 / 0, inf - inf) ValueError. The walk reports all three.
    except (TLRuntimeError, OverflowError, ValueError):
        return None


def _smem_fix(kernel: n.Kernel, env: dict, limit: int) -> str:
    """The smallest change of the parameters the shared buffers depend on that fits ``limit``.

    Tries halving each such parameter (stage counts down to 1, tiles down to 16), preferring
    fewer changed parameters, then the largest buffers that still fit.
    """
    uses: set[str] = set()
    for s in n.walk(kernel.body):
        if isinstance(s, n.Allocate) and s.level == "shared":
            for d in s.shape + ((s.ring,) if s.ring is not None else ()):
                uses |= n.expr_names(d)
        if isinstance(s, n.Loop) and s.stages is not None:
            uses |= n.expr_names(s.stages)
    params = {p.name: p.value for p in kernel.params if p.name in uses and p.value}
    choices = []
    for name, value in params.items():
        floor = 1 if name not in _tile_params(kernel) else 16
        options = [value]
        while options[-1] // 2 >= floor:
            options.append(options[-1] // 2)
        choices.append([(name, v) for v in options])
    best = None
    for combo in itertools.product(*choices):
        trial = {**env, **dict(combo)}
        sizes = _smem_breakdown(kernel, trial)
        total = sum(sizes.values()) if sizes is not None else None
        if total is None or total > limit:
            continue
        changed = [(k, v) for k, v in combo if v != params[k]]
        key = (len(changed), -total)
        if best is None or key < best[0]:
            best = (key, changed, total)
    if best is None:
        return "no smaller tiles or fewer stages fit: split the head dimension or pick a target with more shared memory"
    _, changed, total = best
    edits = " and ".join(f"{k} = {v}" for k, v in changed)
    return f"e.g. {edits} needs {total // 1024} KiB of the {limit // 1024} KiB"


def _tile_params(kernel: n.Kernel) -> set[str]:
    """Parameters that size tiles (they appear in a shape), as opposed to stage counts."""
    names: set[str] = set()
    for s in n.walk(kernel.body):
        if isinstance(s, n.Allocate):
            for d in s.shape:
                names |= n.expr_names(d)
    return names


def _register_estimate(kernel: n.Kernel, report_events: list, threads: int) -> int:
    """Peak bytes of live register tiles, spread over the threads, plus a fixed overhead.

    A tile is live from its first definition to its last use; tiles used inside a loop but
    defined before it stay live to the loop's end (they are carried across iterations). A
    statement's inputs that die there are freed before its outputs are counted, as a compiler
    reuses their registers. Operands streamed from shared memory count as two MMA K-steps.
    """
    order: list[n.Stmt] = []
    loop_span: dict[int, tuple[int, int]] = {}

    def flatten(body, outer: tuple[int, ...]):
        for s in body:
            order.append(s)
            if isinstance(s, n.Role):  # laid out in program order; a role is not a loop
                flatten(s.body, outer)
            if isinstance(s, n.Loop):
                start = len(order)
                flatten(s.body, outer + (id(s),))
                loop_span[id(s)] = (start, len(order) - 1)
    flatten(kernel.body, ())
    pos = {id(s): i for i, s in enumerate(order)}
    enclosing: dict[int, list[int]] = {}
    for lid, (a, b) in loop_span.items():
        for i in range(a, b + 1):
            enclosing.setdefault(i, []).append(lid)
    size: dict[str, int] = {}
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    # A name redefined from scratch in another loop (S in an unmasked loop, then S in a diagonal
    # loop) is a new value with its own life; accumulations and in-place updates continue the old one.
    versions: dict[str, list[tuple[int, str, object]]] = {}
    events = [e for e in report_events if e[1] == kernel.name]
    for kind, _, stmt, name, nbytes, loop in events:
        i = pos.get(id(stmt))
        if i is None:
            continue
        if kind == "frag":
            key = f"{name}@frag{i}"
        else:
            history = versions.setdefault(name, [])
            if not history or (_fresh(stmt) and history[-1][2] is not loop):
                history.append((i, f"{name}#{len(history)}", loop))
            key = history[-1][1]
        size[key] = max(size.get(key, 0), nbytes)
        start[key] = min(start.get(key, i), i)
        end[key] = max(end.get(key, i), i)
    # uses: any statement naming the tile extends the life of the value current there
    for i, s in enumerate(order):
        for name in stmt_reads(s):
            history = versions.get(name)
            if history:
                current = [key for at, key, _ in history if at <= i]
                key = current[-1] if current else history[0][1]
                end[key] = max(end[key], i)
    for key in list(start):
        for lid in set(enclosing.get(end[key], [])):
            a, b = loop_span[lid]
            if start[key] < a:
                end[key] = max(end[key], b)
    peak = 0
    for i in range(len(order)):
        live = sum(size[k] for k in start if (start[k] <= i < end[k]) or start[k] == i)
        peak = max(peak, live)
    return math.ceil(peak / 4 / threads) + REG_OVERHEAD


def _tile_bytes(s: n.Allocate, env: dict, dtypes: dict) -> int:
    """One copy of a tile: its elements times its format's bytes."""
    return math.prod(int(evaluate(d, env)) for d in s.shape) * FORMATS.get(dtypes.get(s.dtype, s.dtype), FORMATS["fp32"]).bytes


def _q_tile(kernel: n.Kernel) -> n.Allocate | None:
    """The Hopper form's Q: the first GEMM's A operand, where it is a shared tile."""
    gemm = next((s for s in n.walk(kernel.body) if isinstance(s, n.Gemm)), None)
    if gemm is None:
        return None
    return next((s for s in n.walk(kernel.body) if isinstance(s, n.Allocate) and s.level == "shared" and s.name == gemm.a), None)


def _q_registers(kernel: n.Kernel, env: dict, threads: int) -> int:
    """A Hopper-form schedule (``qreg = 1``, docs/TL.md section 11.5): Q also held in the first role's registers across the
    tile loops, as the QK^T GEMMs' A operand: one copy of its tile over the role's threads."""
    q = _q_tile(kernel) if kernel.param_map().get("qreg") == 1 else None
    if q is None:
        return 0
    try:
        return math.ceil(_tile_bytes(q, env, kernel.dtype_map()) / 4 / threads)
    except (TLRuntimeError, OverflowError, ValueError):  # (reported where the shared tiles are sized)
        return 0


def _fresh(s: n.Stmt) -> bool:
    """Whether a statement defines its result from scratch (not by accumulating or in place)."""
    if isinstance(s, n.Gemm):
        return not s.accumulate
    if isinstance(s, (n.Elementwise, n.Cast)):
        return s.out is not None
    return isinstance(s, (n.Allocate, n.Copy, n.OnlineSoftmax, n.Normalize, n.LogSumExp))


def stmt_writes(s: n.Stmt) -> set[str]:
    """The names a statement writes, in place or anew (a global store writes no tile)."""
    if isinstance(s, n.Copy):
        return {s.dst} if s.dst_level != "global" else set()
    if isinstance(s, (n.Gemm, n.Normalize, n.LogSumExp)):
        return {s.out}
    if isinstance(s, n.Elementwise):
        first = s.args[0] if s.args else None
        return {s.out} if s.out else ({first.id} if isinstance(first, n.Name) else set())
    if isinstance(s, n.Cast):
        return {s.out or s.src}
    if isinstance(s, (n.ScoreMod, n.Mask, n.Softmax)):
        return {s.target}
    if isinstance(s, n.OnlineSoftmax):
        return {s.out, s.row_max, s.row_sum, *s.rescale}
    if isinstance(s, n.Reshape):
        return {s.name}
    return set()


def stmt_reads(s: n.Stmt) -> set[str]:
    """The names a statement reads (tiles, states, accumulators; not the indices of a mask)."""
    if isinstance(s, n.Copy):
        return {s.src}
    if isinstance(s, n.Gemm):
        return {s.a, s.b} | ({s.out} if s.accumulate else set())
    if isinstance(s, n.Elementwise):
        return set().union(*(n.expr_names(a) for a in s.args))
    if isinstance(s, n.Cast):
        return {s.src}
    if isinstance(s, (n.ScoreMod, n.Mask, n.Softmax)):
        return {s.target}
    if isinstance(s, n.OnlineSoftmax):
        return {s.scores, s.row_max, s.row_sum, *s.rescale}
    if isinstance(s, n.Normalize):
        return {s.acc, s.row_sum}
    if isinstance(s, n.LogSumExp):
        return {s.row_max, s.row_sum}
    if isinstance(s, n.Reshape):
        return {s.name}
    return set()
