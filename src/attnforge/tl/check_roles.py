"""Rules over a kernel's roles as a whole (docs/TL.md, section 11): where roles and allocations
may stand (TL420), the warps each role owns (TL509), register budgets (TL510), the phases of
the Waits on each barrier slot (TL418) and barriers waited on but never signalled (TL419).

The functions take the ``check_body.KernelCheck`` of the probe being checked and report through
its ``add``; the phase rule unrolls each role's loops at the probe's values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import TLRuntimeError
from ..targets import Target
from . import nodes as n
from .evaluate import evaluate
from .printer import expr as show

if TYPE_CHECKING:
    from .check_body import KernelCheck

WARPGROUP = 4  # wgmma is issued by a warpgroup: 4 consecutive warps, the first a multiple of 4
REGS_MIN, REGS_MAX, REGS_STEP = 24, 256, 8  # setmaxnreg's range and granule
MAX_OCCUPANCY = 4  # programs an SM the ``occupancy`` parameter may ask for


def occupancy(kernel: n.Kernel) -> int:
    """The programs resident on one SM that the kernel is written for (``param occupancy``, Hopper
    form; 1 without it): each has that share of the SM's registers and shared memory."""
    return int(kernel.param_map().get("occupancy", 1) or 1)


def shared_thread_regs(target: Target, programs: int, warps: int) -> int:
    """The registers a thread may hold when ``programs`` blocks of ``warps`` warps share an SM: the
    register file over the programs and over the block's threads, its warps counted in whole
    warpgroups (setmaxnreg moves registers between warpgroups; a kernel launches whole ones), a
    multiple of 8. ptxas compiles every role within it (a role's setmaxnreg raise does not lift it)."""
    threads = -(-warps // WARPGROUP) * WARPGROUP * 32
    return target.regs_per_sm // programs // threads // REGS_STEP * REGS_STEP
LOOP_CAP = 256  # trips unrolled per loop by the phase rule
WAIT_CAP = 4096  # Waits and loop trips simulated per role by the phase rule (nested loops multiply)


def _quiet(e: n.Expr, env: dict) -> object:
    """The value of ``e``, or None where it does not evaluate (the walk reports that)."""
    try:
        return evaluate(e, env)
    except TLRuntimeError:
        return None


def role_warps(kernel: n.Kernel, env: dict) -> list[tuple[n.Role, int, int]] | None:
    """Each role with its evaluated warp range, or None if a bound does not evaluate to an int."""
    out = []
    for r in n.roles(kernel):
        start, stop = _quiet(r.warp_start, env), _quiet(r.warp_stop, env)
        if not (isinstance(start, int) and isinstance(stop, int)) or isinstance(start, bool) or isinstance(stop, bool):
            return None
        out.append((r, start, stop))
    return out


def check_layout(kc: KernelCheck) -> None:
    """TL420 (placement), TL509 (warps), TL510 (register budgets), TL419 (unsignalled barriers)."""
    roles = n.roles(kc.k)
    _check_signalled(kc)
    if not roles:
        return
    for s in kc.k.body:
        if isinstance(s, n.Allocate) and s.level == "register":
            kc.add("TL420", s, f"register tile {s.name} is allocated outside the roles", "registers belong to one role: move the Allocate into the role that uses it")
        elif not isinstance(s, (n.Allocate, n.Role)):
            kc.add("TL420", s, "a kernel with roles has only allocations outside them", "move this statement into a role")
    seen: set[str] = set()
    for r in roles:
        if r.name in seen:
            kc.add("TL420", r, f"role {r.name} is declared twice", "give each role its own name")
        seen.add(r.name)
        for s in n.walk(r.body):
            if isinstance(s, n.Allocate) and s.level != "register":
                kc.add("TL420", s, f"the {s.level} allocation {s.name} is inside role {r.name}", "allocate global views, shared tiles, rings and barriers before the roles: every role shares them")
    _check_own_registers(kc, roles)
    for r in roles:
        kc.compile_time((r.warp_start, r.warp_stop), f"role {r.name}'s warp bound")
        for bound in (r.warp_start, r.warp_stop):
            kc.value(bound, kc.env, f"warp bound of role {r.name}")
    _check_warps(kc, roles)
    _check_regs(kc, roles)


def _check_own_registers(kc: KernelCheck, roles: list[n.Role]) -> None:
    """TL420: a register tile is its role's own; another role naming it reads or writes nothing there."""
    from .resources import stmt_reads, stmt_writes  # (resources imports this module)

    owner: dict[str, str] = {}
    for r in roles:
        for s in n.walk(r.body):
            made = s.name if isinstance(s, n.Allocate) and s.level == "register" else None
            for name in ({made} if made else set()) | (stmt_writes(s) if not isinstance(s, n.Copy) else set()):
                owner.setdefault(name, r.name)
    shared = {s.name for s in kc.k.body if isinstance(s, n.Allocate)}
    for r in roles:
        for s in n.walk(r.body):
            for name in sorted((stmt_reads(s) | stmt_writes(s)) - shared):
                if owner.get(name, r.name) != r.name:
                    kc.add("TL420", s, f"{name} is a register tile of role {owner[name]}; role {r.name} cannot see it",
                           "pass values between roles through shared memory, with a barrier the writer arrives on and the reader waits for")


def _check_signalled(kc: KernelCheck) -> None:
    signalled = {s.signal.name for s in n.walk(kc.k.body) if isinstance(s, n.Copy) and s.signal is not None}
    signalled |= {s.barrier.name for s in n.walk(kc.k.body) if isinstance(s, n.Arrive)}
    barriers = {s.name for s in n.walk(kc.k.body) if isinstance(s, n.Allocate) and s.level == n.BARRIER}
    waited = {s.barrier.name for s in n.walk(kc.k.body) if isinstance(s, n.Wait)}
    for s in n.walk(kc.k.body):
        if isinstance(s, n.Wait) and s.barrier.name in barriers - signalled:
            kc.add("TL419", s, f"the Wait on {s.barrier.name} never returns: no async Copy and no Arrive signals {s.barrier.name}",
                   f"signal it: 'Copy ... async {s.barrier.name}' in the producer, or 'Arrive {s.barrier.name}' where its slot is released")
        elif isinstance(s, n.Arrive) and s.barrier.name in barriers - waited:
            # a released slot nobody waits for: the producer refills it without knowing it is free
            kc.add("TL419", s, f"nobody waits on {s.barrier.name}: this Arrive releases a slot no role waits for before refilling it",
                   f"wait for it where the slot is refilled: 'Wait {s.barrier.name}[...] phase (j // stages + 1) % 2' before the copy")


def _check_warps(kc: KernelCheck, roles: list[n.Role]) -> None:
    ranges = role_warps(kc.k, kc.env)
    warps = kc.k.param_map().get("warps")
    if ranges is None:
        return  # a bound that does not evaluate is TL203/TL311
    if warps is None:
        kc.add("TL509", roles[0], "a kernel with roles needs the parameter warps (the first role's warps)", "add param warps = 8 and write 'role NAME warps 0 : warps'")
    (first, start, stop), prev = ranges[0], None
    if warps is not None and (start, stop) != (0, warps):
        kc.add("TL509", first, f"the first role, {first.name}, owns warps {start} : {stop}; it is the default partition and must own warps 0 : warps (0 : {warps})",
               f"write 'role {first.name} warps 0 : warps'")
    for r, a, b in ranges:
        if b <= a:
            kc.add("TL509", r, f"role {r.name} owns warps {a} : {b}, which is no warp", "a role owns START : STOP with STOP > START (half-open)")
        elif prev is not None and a != prev:
            kc.add("TL509", r, f"role {r.name} starts at warp {a}, but the role before it ends at warp {prev}" + (": the ranges overlap" if a < prev else ""),
                   f"roles own consecutive warp ranges: write 'role {r.name} warps {show(roles[roles.index(r) - 1].warp_stop)} : ...'")
        elif any(isinstance(s, n.Gemm) for s in n.walk(r.body)) and (a % WARPGROUP or (b - a) % WARPGROUP):
            kc.add("TL509", r, f"role {r.name} issues a GEMM but owns warps {a} : {b}: a warpgroup is 4 consecutive warps starting at a multiple of 4",
                   "give a GEMM role whole warpgroups: e.g. warps 0 : 4 or 4 : 12")
        prev = b
    total = max(b for _, _, b in ranges)
    limit = (kc.target.max_threads_per_block if kc.target is not None else 1024) // 32
    if total > limit:
        kc.add("TL509", roles[-1], f"the roles own {total} warps, more than the {limit} of a block", f"use at most {limit} warps in all")


def _check_regs(kc: KernelCheck, roles: list[n.Role]) -> None:
    for r in roles:
        if r.regs is not None and not (REGS_MIN <= r.regs <= REGS_MAX and r.regs % REGS_STEP == 0):
            kc.add("TL510", r, f"role {r.name} asks for {r.regs} registers per thread; setmaxnreg takes a multiple of {REGS_STEP} from {REGS_MIN} to {REGS_MAX}",
                   f"write regs {max(REGS_MIN, min(REGS_MAX, r.regs // REGS_STEP * REGS_STEP))}")
    ranges = role_warps(kc.k, kc.env)
    if kc.target is None or ranges is None or kc.probe or any(b <= a for _, a, b in ranges):
        return
    programs = occupancy(kc.k)
    regs_per_sm = kc.target.regs_per_sm // programs
    budgets = role_regs(ranges, kc.target, programs)
    whose = "an SM" if programs == 1 else f"a program's share of an SM (its registers over occupancy = {programs})"
    if budgets is None:
        fixed = sum((b - a) * 32 * r.regs for r, a, b in ranges if r.regs is not None)
        free = [r.name for r, _, _ in ranges if r.regs is None]
        kc.add("TL510", ranges[0][0], f"the roles with regs take {fixed} of the {regs_per_sm} registers of {whose}, leaving fewer than {REGS_MIN} per thread for "
                                      f"{', '.join(free)}", "lower the other roles' regs or warps")
        return
    used = sum((b - a) * 32 * regs for (_, a, b), regs in zip(ranges, budgets))
    if used > regs_per_sm:
        parts = ", ".join(f"{r.name} {(b - a) * 32} x {regs}" for (r, a, b), regs in zip(ranges, budgets))
        kc.add("TL510", ranges[0][0], f"the roles' register budgets need {used} registers ({parts} threads x registers), more than the {regs_per_sm} of {whose}",
               "lower regs or warps of a role")


def role_regs(ranges: list[tuple[n.Role, int, int]], target: Target, programs_per_sm: int = 1) -> list[int] | None:
    """Registers per thread of each role: its ``regs``; the roles without share what the others
    leave of the registers the program launches with equally (a multiple of 8, at most 255). Those are
    ``shared_thread_regs`` a thread of its warps in whole warpgroups (a program's share of the SM's register
    file: all of it, or 1 / ``programs_per_sm``, ``occupancy``), and each role holds its warps' warpgroups
    (setmaxnreg moves registers between warpgroups: a load role of one warp sets its warpgroup's). So with a
    load warp at 24, two compute warpgroups hold 240 each and three 160, as Triton's warp-specialised kernels.
    None: that share is below the minimum of 24."""
    def whole(a: int, b: int) -> int:  # a role's warps in whole warpgroups
        return -(-(b - a) // WARPGROUP) * WARPGROUP

    warps = sum(whole(a, b) for _, a, b in ranges)
    total = shared_thread_regs(target, programs_per_sm, warps) * 32 * warps
    fixed = sum(whole(a, b) * 32 * r.regs for r, a, b in ranges if r.regs is not None)
    free = sum(whole(a, b) * 32 for r, a, b in ranges if r.regs is None)
    share = min((total - fixed) // max(free, 1) // REGS_STEP * REGS_STEP, target.regs_per_thread_max)
    if free and share < REGS_MIN:
        return None
    return [r.regs if r.regs is not None else share for r, _, _ in ranges]


def barrier_kinds(kernel: n.Kernel) -> dict[str, str]:
    """How each barrier is signalled: "copy" (by async copies: slots start empty) or "arrive"
    (by Arrive: slots start free). A barrier signalled both ways gets no rule."""
    kinds: dict[str, set[str]] = {}
    for s in n.walk(kernel.body):
        if isinstance(s, n.Copy) and s.signal is not None:
            kinds.setdefault(s.signal.name, set()).add("copy")
        elif isinstance(s, n.Arrive):
            kinds.setdefault(s.barrier.name, set()).add("arrive")
    return {name: k.pop() for name, k in kinds.items() if len(k) == 1}


def check_phases(kc: KernelCheck, role: str, body: tuple[n.Stmt, ...], env: dict) -> None:
    """TL418: the n-th Wait on a slot of a barrier that copies signal waits for phase n % 2; on a
    slot that Arrive releases, (n + 1) % 2 (it starts free). A Wait on a slot the role has not
    signalled anything since its last Wait there is a repeat of that Wait, not the next one: the
    other side cannot complete the slot's next phase until this role releases something, so the
    repeat returns at once and must name the same phase. Loops are unrolled at the probe's values
    (at most LOOP_CAP trips each); the first mismatch of each Wait is reported."""
    kinds = barrier_kinds(kc.k)
    if not kinds:
        return
    counts: dict[tuple[str, int], int] = {}  # Waits on each slot so far, repeats not counted
    signals_at: dict[tuple[str, int], int] = {}  # the role's signals before its last Wait on each slot
    signals = [0]  # Arrives and signalling copies the role has issued so far
    reported: set[int] = set()
    left = [WAIT_CAP]

    def run(stmts: tuple[n.Stmt, ...], env: dict, at: tuple[str, ...]) -> None:
        for s in stmts:
            if left[0] <= 0:
                return
            if isinstance(s, n.Loop):
                start, stop = _quiet(s.start, env), _quiet(s.stop, env)
                if isinstance(start, int) and isinstance(stop, int):
                    for i in range(start, min(stop, start + LOOP_CAP)):
                        left[0] -= 1
                        if left[0] <= 0:
                            return
                        run(s.body, {**env, s.var: i}, at + (f"{s.var} = {i}",))
            elif isinstance(s, n.Arrive) or (isinstance(s, n.Copy) and s.signal is not None):
                signals[0] += 1
            elif isinstance(s, n.Wait) and s.barrier.name in kinds:
                slot = 0 if s.barrier.index is None else _quiet(s.barrier.index, env)
                phase = _quiet(s.phase, env)
                if not isinstance(slot, int) or not isinstance(phase, int):
                    continue
                left[0] -= 1
                key = (s.barrier.name, slot)
                repeat = signals_at.get(key) == signals[0]
                k = counts.get(key, 0) - repeat
                counts[key], signals_at[key] = k + 1, signals[0]
                copy = kinds[s.barrier.name] == "copy"
                want = k % 2 if copy else (k + 1) % 2
                if phase != want and id(s) not in reported:
                    reported.add(id(s))
                    _phase_finding(kc, s, role, slot, k, phase, want, copy, at)

    run(body, env, ())


def _phase_finding(kc: KernelCheck, s: n.Wait, role: str, slot: int, k: int, phase: int, want: int, copy: bool, at: tuple[str, ...]) -> None:
    name = s.barrier.name if s.barrier.index is None else f"{s.barrier.name}[{slot}]"
    where = f"at {', '.join(at)}" if at else "here"
    instance = "first" if kc.probe == 0 else "last"
    how = "async copies fill it, so it first completes phase 0" if copy else "Arrive releases it, so it starts free"
    kc.add("TL418", s, f"in role {role}, {where} (the {instance} program instance) this is Wait number {k + 1} on {name}, which must wait for phase {want}, "
                       f"but it waits for phase {phase}: {how}",
           "the n-th Wait on a slot (from 0) waits for phase n % 2 when async copies signal it, e.g. phase (j // R) % 2 for slot j % R, "
           "and for phase (n + 1) % 2 when Arrive signals it (the slot starts free), e.g. phase (j // R + 1) % 2")
