"""The Hopper form in the interpreter: roles as coroutines, mbarriers, rings of shared tiles,
TMA copies and asynchronous GEMMs (docs/TL.md, section 11).

``RoleSteps`` is mixed into ``interpreter._Kernel``. Each program instance runs its top-level
allocations, then each role's body as a generator (``_Kernel.block``) that yields a ``Blocked``
where a ``Wait`` would block and None after an arrival. Timing is ignored: a TMA copy lands and
arrives when it is issued, an asynchronous GEMM computes when it is issued.

The scheduler always resumes the first role, in its order, that can make progress, and each
program instance runs twice: in declaration order (the consumer, declared first, runs as far
ahead as it can: a read without its Wait sees a NaN -- ring stages and TMA-filled tiles start as
NaN -- or a stale stage) and in reverse (the producer runs ahead: a refill without its Wait, or a
slot released before its reader is done, overwrites what is still to be read). Both must write
the same outputs; a wrong phase reads stale data or deadlocks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ..abi import INPUTS as INPUT_TENSORS
from . import nodes as n
from .limits import MAX_ELEMENTS
from .printer import expr as show
from .resources import stmt_reads
from .tiles import Tile

if TYPE_CHECKING:
    from typing import NoReturn

_PHASE_HINT = ("a Wait returns once the barrier's phase of that parity has completed: a slot that async copies fill first "
               "completes phase 0 (its consumer waits with phase (j // R) % 2); a slot the consumer releases with Arrive "
               "starts free (its producer waits with phase (j // R + 1) % 2); every barrier waited on must be signalled")


@dataclass
class Slot:
    """One mbarrier: arrivals in the current phase and phases completed since it was allocated."""

    count: int
    arrivals: int = 0
    completed: int = 0

    def arrive(self) -> None:
        self.arrivals += 1
        if self.arrivals == self.count:
            self.arrivals, self.completed = 0, self.completed + 1

    def blocks(self, parity: int) -> bool:
        """Whether ``Wait phase parity`` blocks: the phase of that parity is the current, unfinished one."""
        return self.completed % 2 == parity

    def state(self) -> str:
        return f"{self.completed} phase(s) completed, {self.arrivals} of {self.count} arrival(s) in the current one"


@dataclass
class Blocked:
    """A role stopped at a Wait whose phase has not completed."""

    wait: n.Wait
    label: str  # the slot, e.g. k_ready[1]
    slot: Slot
    phase: int

    def still(self) -> bool:
        return self.slot.blocks(self.phase)


@dataclass
class RoleRun:
    """One role of the running program instance."""

    name: str
    steps: Iterator[Blocked | None]
    blocked: Blocked | None = None
    done: bool = False
    pending: dict[str, n.Gemm] = field(default_factory=dict)  # async GEMM results not waited for, by name (staged)


class RoleLocals(MutableMapping):
    """A role's names: its own register tiles, and the instance's global views, shared tiles, ring
    stages (shared by every role; a Copy into one replaces it there)."""

    def __init__(self, shared: dict[str, Tile]):
        self.shared = shared
        self.own: dict[str, Tile] = {}

    def __getitem__(self, key: str) -> Tile:
        return self.own[key] if key in self.own else self.shared[key]

    def __setitem__(self, key: str, tile: Tile) -> None:
        (self.shared if key in self.shared else self.own)[key] = tile

    def __delitem__(self, key: str) -> None:
        del (self.own if key in self.own else self.shared)[key]

    def __iter__(self):
        return iter({**self.shared, **self.own})

    def __len__(self) -> int:
        return len({**self.shared, **self.own})


class RoleSteps:
    """Roles, barriers, rings and asynchronous statements, for ``interpreter._Kernel``."""

    def prepare_roles(self) -> None:
        # Shared tiles a TMA copy fills start as NaN, so a read before their copy landed shows.
        self.async_filled = {s.dst for s in n.walk(self.k.body) if isinstance(s, n.Copy) and s.signal is not None}
        self.rings: dict[str, int] = {}
        self.barriers: dict[str, tuple[list[Slot], bool]] = {}  # name -> (slots, scalar)
        self.runs: list[RoleRun] = []
        self.current: RoleRun | None = None
        self.empty: set[str] = set()  # ring stages and TMA-filled tiles no copy has written yet

    # -- one program instance
    def run_instance(self, env: dict) -> None:
        self.rings, self.barriers, self.empty = {}, {}, set()
        roles = n.roles(self.k)
        if not roles:
            self.schedule([RoleRun(self.k.name, self.block(self.k.body, env, {}))])
            return
        # Twice, from the same outputs: the consumer first (a reader without its Wait runs ahead of
        # the copy), then the producer first (a producer without its Wait, or a slot released too
        # early, is refilled under its reader). A correct program computes the same either way.
        outputs = [name for name in self.tensors if name not in INPUT_TENSORS]
        before = {name: self.tensors[name].copy() for name in outputs}
        first = None
        for order in (roles, roles[::-1]):
            for name in outputs:
                self.tensors[name][...] = before[name]
            self._run_roles(order, env)
            if first is None:
                first = {name: self.tensors[name].copy() for name in outputs}
        for name in outputs:
            if not np.array_equal(first[name], self.tensors[name], equal_nan=True):
                self.fail(roles[-1], f"{name} differs when role {roles[-1].name} runs ahead of role {roles[0].name}: the roles race "
                          "(a slot refilled before its reader is done, or a tile read before it is written)",
                          "give each slot back with an Arrive after its last reader is done (after Wait GEMM), and wait for it before refilling it")

    def _run_roles(self, order: list[n.Role], env: dict) -> None:
        self.rings, self.barriers, self.empty = {}, {}, set()
        shared: dict[str, Tile] = {}
        outside = tuple(s for s in self.k.body if not isinstance(s, n.Role))  # allocations, shared by the roles
        self.schedule([RoleRun(self.k.name, self.block(outside, env, shared))])
        self.schedule([RoleRun(r.name, self.block(r.body, env, RoleLocals(shared))) for r in order])

    def schedule(self, runs: list[RoleRun]) -> None:
        """Run the roles to their end, always resuming the first that can make progress."""
        self.runs = runs
        while True:
            run = next((r for r in runs if not r.done and (r.blocked is None or not r.blocked.still())), None)
            if run is None:
                stuck = [r for r in runs if not r.done]
                if not stuck:
                    return
                self.deadlock(stuck)
            self.current = run
            try:
                run.blocked = next(run.steps)
            except StopIteration:
                run.done = True

    def deadlock(self, stuck: list[RoleRun]) -> NoReturn:
        waits = "; ".join(f"role {r.name} waits at line {r.blocked.wait.line} on {r.blocked.label} for phase {r.blocked.phase} "
                          f"({r.blocked.slot.state()})" for r in stuck)
        self.fail(stuck[0].blocked.wait, f"deadlock: every unfinished role is blocked: {waits}", _PHASE_HINT)

    # -- allocations
    def allocate_barrier(self, s: n.Allocate, env: dict) -> None:
        shape = self.shape(s.shape, env)
        if len(shape) > 1:
            self.fail(s, f"barrier {s.name} has {len(shape)} dimensions", "allocate one barrier or a row of them: Allocate ready in barrier (stages)")
        count = 1 if s.count is None else self.ev_int(s.count, env, "an arrival count")
        if count < 1:
            self.fail(s.count, f"barrier {s.name} completes a phase after {count} arrivals", "count at least 1 arrival")
        slots = shape[0] if shape else 1
        self.charge(s, slots)  # one step per barrier: a mutated row of 10**12 meets the budget, not the memory limit
        self.barriers[s.name] = ([Slot(count) for _ in range(slots)], not shape)

    def allocate_async(self, s: n.Allocate, shape: tuple[int, ...], dtype: str, env: dict, local) -> None:
        """A ring (stages ``NAME[i]``) or a shared tile a TMA copy fills: NaN until written."""
        if s.ring is None:
            local[s.name] = Tile(np.full(shape, np.nan), s.level, dtype)
            self.empty.add(s.name)
            return
        stages = self.ev_int(s.ring, env, "a ring size")
        if stages < 1:
            self.fail(s.ring, f"ring {s.name} has {stages} stages", "a ring has at least 1 stage")
        if stages * math.prod(shape) > MAX_ELEMENTS:
            self.too_large(s.ring, f"ring {s.name} of {stages} stages of shape {shape}", stages * math.prod(shape))
        self.charge(s, stages)  # one step per stage, as for a barrier row
        self.rings[s.name] = stages
        for i in range(stages):
            local[f"{s.name}[{i}]"] = Tile(np.full(shape, np.nan), s.level, dtype)
            self.empty.add(f"{s.name}[{i}]")

    # -- names of ring stages and barrier slots
    def stage_name(self, name: str, index: n.Expr | None, env: dict, node: n.Node) -> str:
        """The key of ``name[index]`` in the tile dictionary (``name`` itself for a plain tile)."""
        if index is None:
            if name in self.rings:
                self.fail(node, f"{name} is a ring of {self.rings[name]} tiles; name one stage", f"write {name}[j % {self.rings[name]}]")
            return name
        if name not in self.rings:
            self.fail(node, f"{name}[{show(index)}] indexes {name}, which is not a ring", f"index only a ring: Allocate {name} in shared (...) : qkv ring STAGES")
        i = self.ev_int(index, env, "a ring stage")
        if not 0 <= i < self.rings[name]:
            self.fail(index, f"stage {show(index)} = {i} is outside ring {name} of {self.rings[name]} stages", f"write {name}[... % {self.rings[name]}]")
        return f"{name}[{i}]"

    def slot(self, ref: n.BarrierRef, env: dict, node: n.Node) -> tuple[Slot, str]:
        if ref.name not in self.barriers:
            self.fail(node, f"{ref.name} is not a barrier", f"Allocate {ref.name} in barrier")
        slots, scalar = self.barriers[ref.name]
        if scalar != (ref.index is None):
            self.fail(node, f"{ref.name} is {'one barrier' if scalar else f'a row of {len(slots)} barriers'}",
                      f"write {ref.name}" if scalar else f"write {ref.name}[j % {len(slots)}]")
        i = 0 if scalar else self.ev_int(ref.index, env, "a barrier index")
        if not 0 <= i < len(slots):
            self.fail(ref.index, f"barrier {ref.name}[{i}] is outside its {len(slots)} slots", f"write {ref.name}[... % {len(slots)}]")
        return slots[i], (ref.name if scalar else f"{ref.name}[{i}]")

    # -- statements
    def sync(self, s: n.Wait | n.Arrive | n.WaitGemm, env: dict) -> Iterator[Blocked | None]:
        """Wait (yields while it blocks), Arrive (yields after arriving) and Wait GEMM."""
        if isinstance(s, n.WaitGemm):
            if self.current is not None:
                self.current.pending.pop(s.name, None)
            return
        slot, label = self.slot(s.barrier, env, s)
        if isinstance(s, n.Arrive):
            slot.arrive()
            yield None
            return
        phase = self.ev_int(s.phase, env, "a phase")
        if phase not in (0, 1):
            self.fail(s.phase, f"phase {show(s.phase)} = {phase} is not a parity", "a phase is 0 or 1: write (j // R) % 2")
        while slot.blocks(phase):
            yield Blocked(s, label, slot, phase)

    def stage(self, s: n.Stmt, env: dict, local) -> n.Stmt:
        """``s`` with its ring stages named by key (``Ks[1]``), after refusing a read of a pending
        asynchronous GEMM result and a TMA copy into a stage a pending GEMM still reads."""
        pending = self.current.pending if self.current is not None else {}
        early = sorted(stmt_reads(s) & set(pending))
        if early:
            gemm = pending[early[0]]
            self.fail(s, f"{early[0]} is read before the asynchronous GEMM at line {gemm.line} that writes it has finished",
                      f"add 'Wait GEMM {early[0]}' before this statement")
        if isinstance(s, n.Copy):
            src = self.stage_name(s.src, s.src_index, env, s)
            dst = self.stage_name(s.dst, s.dst_index, env, s)
            self.check_filled(s, (src,))
            self.check_overwrite(s, dst)
            self.empty.discard(dst)
            return replace(s, src=src, dst=dst, src_index=None, dst_index=None, signal=None)
        if isinstance(s, n.Gemm):
            a, b = self.stage_name(s.a, s.a_index, env, s), self.stage_name(s.b, s.b_index, env, s)
            self.check_filled(s, (a, b))
            return replace(s, a=a, b=b, a_index=None, b_index=None, is_async=False)
        return s

    def check_filled(self, s: n.Stmt, keys: tuple[str, ...]) -> None:
        """A shared tile that TMA fills may be read only after a copy has landed in it (else NaN)."""
        for key in keys:
            if key in self.empty:
                role = f"role {self.current.name}" if self.current is not None else "the kernel"
                self.fail(s, f"{role} reads {key} before any copy has landed in it",
                          "first wait on the barrier that its async Copy signals, for the phase that copy completes ('attnforge tl check' says which)")

    def check_overwrite(self, s: n.Copy, key: str) -> None:
        """wgmma reads its shared operands until it is waited for: a copy may not replace one before."""
        for run in self.runs:
            for out, gemm in run.pending.items():
                if key in (gemm.a, gemm.b):
                    self.fail(s, f"this copy overwrites {key} while the asynchronous GEMM at line {gemm.line} (role {run.name}) still reads it",
                              f"in role {run.name}, 'Wait GEMM {out}' before releasing the stage (Arrive)")

    def finish(self, s: n.Stmt, staged: n.Stmt, env: dict) -> bool:
        """After ``s`` executed: an async GEMM's result becomes pending; an async copy arrives on its
        barrier (True: a signal, other roles may now run)."""
        if isinstance(s, n.Gemm) and s.is_async and self.current is not None:
            self.current.pending[s.out] = staged
        if isinstance(s, n.Copy) and s.signal is not None:
            self.slot(s.signal, env, s)[0].arrive()
            return True
        return False

    if TYPE_CHECKING:  # provided by interpreter._Kernel
        def fail(self, node: n.Node, message: str, hint: str | None = None) -> NoReturn: ...
        def ev_int(self, e: n.Expr, env: dict, what: str) -> int: ...
        def shape(self, dims: tuple[n.Expr, ...], env: dict) -> tuple[int, ...]: ...
        def block(self, body: tuple[n.Stmt, ...], env: dict, local) -> Iterator[Blocked | None]: ...
