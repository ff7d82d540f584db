"""The statements of the Hopper form in the body check (docs/TL.md, section 11): barriers and
rings (TL414, TL415), TMA copies, waits before reads (TL416), asynchronous GEMMs and their waits
(TL417), roles, and the target they need (TL508). The rules over whole roles (warps, registers,
phases) are in ``check_roles``.

``HopperChecks`` holds methods of ``check_body.KernelCheck``, which mixes it in; they report
through its ``add`` and read names through its ``names``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from ..errors import TLRuntimeError
from . import nodes as n
from .check_info import Info
from .check_roles import check_phases
from .evaluate import evaluate
from .printer import expr as show
from .resources import stmt_reads, stmt_writes

MBARRIER_MAX_COUNT = (1 << 20) - 1  # the PTX mbarrier's expected-arrival count field
# Loop trips at which two slot indices are compared (TL416): two rounds of a 16-slot ring for one
# loop; for nested loops, fewer per loop (their product is evaluated).
SAMPLE_TRIPS, SAMPLE_TRIPS_NESTED = 33, 9

if TYPE_CHECKING:
    from .check_body import KernelCheck


def stage_text(name: str, index: n.Expr | None) -> str:
    return name if index is None else f"{name}[{show(index)}]"


class HopperChecks:
    """Rings, barriers, TMA copies, waits and async GEMMs, for ``KernelCheck``."""

    def hopper_init(self: KernelCheck) -> None:
        body = tuple(n.walk(self.k.body))
        # The async copies into each tile, for the wait-before-read rule (the producer may come later).
        self.fills: dict[str, list[n.Copy]] = {}
        for s in body:
            if isinstance(s, n.Copy) and s.signal is not None:
                self.fills.setdefault(s.dst, []).append(s)
        self.async_outs = {s.out for s in body if isinstance(s, n.Gemm) and s.is_async}
        self.waited: list[set[tuple[str, n.Expr | None]]] = [set()]  # Waits of the enclosing blocks, innermost last
        self.pending: dict[str, n.Gemm] = {}  # async GEMM results not yet waited for
        self.hopper_said = False

    def require_hopper(self: KernelCheck, node: n.Node, what: str) -> None:
        """TL508, once per kernel: the Hopper form needs TMA and an asynchronous MMA (sm_90 and newer)."""
        t = self.target
        if t is None or self.hopper_said or (t.has_tma and (t.has_wgmma or t.has_tcgen05)):
            return
        self.hopper_said = True
        self.add("TL508", node, f"{what} is the Hopper form, which needs TMA and an asynchronous MMA (wgmma, sm_90 and newer); {t.name} ({t.sm}) lacks them",
                 "check for sm_90 or newer (h100, h200, b200), or write the kernel without roles, barriers, rings and async statements")

    # -- allocations
    def alloc_barrier(self: KernelCheck, s: n.Allocate, env: dict) -> None:
        self.require_hopper(s, f"the barrier {s.name}")
        self.compile_time(s.shape, f"the barrier {s.name}'s slot count")
        shape = self.shape(s.shape, env, f"slot count of {s.name}")
        if s.shape and shape is None:
            return  # a row without a valid slot count is refused (reported); its uses are passed over
        if len(s.shape) > 1:
            self.add("TL415", s, f"barrier {s.name} has {len(s.shape)} dimensions", f"allocate one barrier or a row of them: Allocate {s.name} in barrier (stages)")
        if s.count is not None:
            count = self.value(s.count, env, "arrival count")
            if isinstance(count, int) and count < 1:
                self.add("TL415", s.count, f"barrier {s.name} completes a phase after {count} arrivals", "count at least 1 arrival per phase")
            elif isinstance(count, int) and count > MBARRIER_MAX_COUNT:
                self.add("TL415", s.count, f"barrier {s.name} counts {count} arrivals; an mbarrier counts at most {MBARRIER_MAX_COUNT}",
                         "count the arrivals of one phase: one per arriving role (or warpgroup), one per async copy")
        self.names[s.name] = Info(n.BARRIER, shape or (), s.shape, "barrier", s)

    def ring_size(self: KernelCheck, s: n.Allocate, env: dict) -> int | None:
        if s.ring is None:
            return None
        self.require_hopper(s, f"the ring {s.name}")
        self.compile_time((s.ring,), f"the ring {s.name}'s stage count")
        stages = self.value(s.ring, env, "ring stage count")
        if isinstance(stages, int) and stages < 1:
            self.add("TL414", s.ring, f"ring {s.name} has {stages} stages", "a ring has at least 1 stage")
            return None
        return stages

    # -- names with a stage or slot
    def index_ok(self: KernelCheck, what: str, index: n.Expr, size: int | None, env: dict, code: str) -> bool:
        """An index into ``size`` slots: ``e % SIZE``, or a value in [0, size) at this probe."""
        if size is None:
            return True
        if isinstance(index, n.Binary) and index.op == "%":  # in range whatever the left side (Python's %)
            try:
                if evaluate(index.right, env) == size:
                    return True
            except TLRuntimeError:  # reported below, by self.value
                pass
        i = self.value(index, env, f"index of {what}")
        if isinstance(i, int) and not 0 <= i < size:
            instance = "first" if self.probe == 0 else "last"
            self.add(code, index, f"{what}[{show(index)}] is {what}[{i}] in the {instance} program instance and loop iteration, outside its {size} slots",
                     f"write {what}[... % {size}]: an index is taken modulo the ring's stages, or stays in 0 .. {size - 1}")
            return False
        return i is not None

    def stage_ok(self: KernelCheck, name: str, index: n.Expr | None, node: n.Node, env: dict) -> bool:
        """TL414: a ring is named with a stage, anything else without one."""
        info = self.names.get(name)
        if info is None:
            return True  # TL200 from the statement's own check
        if info.ring is not None and index is None:
            self.add("TL414", node, f"{name} is a ring of {info.ring} tiles; name one stage", f"write {name}[j % {show(info.node.ring)}]")
            return False
        if index is not None and info.ring is None:
            self.add("TL414", index, f"{name}[{show(index)}] indexes {name}, which is not a ring", f"allocate a ring, 'Allocate {name} in shared (...) : T ring STAGES', or drop the index")
            return False
        if index is not None:
            self.require_hopper(node, f"the ring stage {name}[{show(index)}]")
            return self.index_ok(name, index, info.ring, env, "TL414")
        return True

    def barrier_ok(self: KernelCheck, ref: n.BarrierRef, node: n.Node, env: dict) -> bool:
        """TL415: a barrier exists, and is named with a slot exactly when it is a row of them."""
        info = self.names.get(ref.name)
        if info is None and ref.name in self.refused:
            self.silenced += 1
            return False
        if info is None or info.level != n.BARRIER:
            where = "is not defined" if info is None else f"is a {info.level} tile"
            self.add("TL415", ref, f"{ref.name} {where}, not a barrier", f"Allocate {ref.name} in barrier")
            return False
        size = info.shape[0] if info.shape else None
        if (size is None) != (ref.index is None):
            fix = f"write {ref.name}" if size is None else f"write {ref.name}[j % {show(info.dims[0])}]"
            self.add("TL415", ref, f"{ref.name} is {'one barrier' if not info.dims else 'a row of barriers'}", fix)
            return False
        return ref.index is None or self.index_ok(ref.name, ref.index, size, env, "TL415")

    def same_index(self: KernelCheck, a: n.Expr | None, b: n.Expr | None, env: dict) -> bool:
        """Whether two slot indices name the same slot wherever they are evaluated here: written
        alike, or equal at the probe's values for every trip of the enclosing loops sampled (so
        ``k_ready[j % 2]`` guards ``Ks[j % stages]`` at stages = 2, and ``(j + 1) % 2`` does not)."""
        if a is None or b is None or a == b:
            return a == b
        loop_vars = [lp.var for lp, _, _ in self.loops][-3:]  # the innermost three: a role nests one or two
        samples = range(SAMPLE_TRIPS) if len(loop_vars) <= 1 else range(SAMPLE_TRIPS_NESTED)
        for values in itertools.product(samples, repeat=len(loop_vars)):
            point = {**env, **dict(zip(loop_vars, values))}
            try:
                if evaluate(a, point) != evaluate(b, point):
                    return False
            except TLRuntimeError:  # an index that does not evaluate is reported where it stands
                return False
        return True

    def check_read(self: KernelCheck, name: str, index: n.Expr | None, node: n.Node, env: dict) -> None:
        """TL416: a tile that TMA fills is read only after a Wait on the barrier its copy signals,
        earlier in this block or an enclosing one, for the same slot (``same_index``)."""
        copies = self.fills.get(name)
        if not copies:
            return
        expected = []
        for c in copies:
            # A copy into X[d] that signals B[d] guards stage e of the read with B[e].
            bar = index if index is not None and c.signal.index is not None and self.same_index(c.signal.index, c.dst_index, env) else c.signal.index
            expected.append((c.signal.name, bar))
        if any(w == e[0] and self.same_index(i, e[1], env) for scope in self.waited for w, i in scope for e in expected):
            return
        name_text, (bar, bar_index) = stage_text(name, index), expected[0]
        self.add("TL416", node, f"{name_text} is read before its barrier {stage_text(bar, bar_index)} is waited on",
                 f"add 'Wait {stage_text(bar, bar_index)} phase ...' before this statement, in the same role (the async Copy at line {copies[0].line} signals it)")

    # -- statements
    def copy_refs_ok(self: KernelCheck, s: n.Copy, env: dict) -> bool:
        ok = self.stage_ok(s.src, s.src_index, s, env) and self.stage_ok(s.dst, s.dst_index, s, env)
        if s.signal is not None:
            self.require_hopper(s, "an async Copy")
            if (s.src_level, s.dst_level) != ("global", "shared"):
                self.add("TL415", s.signal, f"a {s.src_level} -> {s.dst_level} Copy cannot be asynchronous: only TMA copies from global to shared memory signal a barrier",
                         "drop 'async ...', or copy from global to shared")
                ok = False
            ok = self.barrier_ok(s.signal, s, env) and ok
        if s.src_level == "shared":
            self.check_read(s.src, s.src_index, s, env)
        return ok

    def gemm_refs_ok(self: KernelCheck, s: n.Gemm, env: dict) -> bool:
        if s.is_async:
            self.require_hopper(s, "an async GEMM")
        ok = self.stage_ok(s.a, s.a_index, s, env) and self.stage_ok(s.b, s.b_index, s, env)
        for name, index in ((s.a, s.a_index), (s.b, s.b_index)):
            self.check_read(name, index, s, env)
        return ok

    def c_Wait(self: KernelCheck, s: n.Wait, env: dict, loop) -> None:
        self.require_hopper(s, "a Wait")
        if not self.barrier_ok(s.barrier, s, env):
            return  # its phase is checked once the barrier is right
        phase = self.value(s.phase, env, "phase")
        if isinstance(phase, int) and phase not in (0, 1):
            self.add("TL418", s.phase, f"phase {show(s.phase)} is {phase}, not a parity", "a phase is 0 or 1: write (j // R) % 2")
        self.waited[-1].add((s.barrier.name, s.barrier.index))

    def c_Arrive(self: KernelCheck, s: n.Arrive, env: dict, loop) -> None:
        self.require_hopper(s, "an Arrive")
        self.barrier_ok(s.barrier, s, env)

    def c_WaitGemm(self: KernelCheck, s: n.WaitGemm, env: dict, loop) -> None:
        self.require_hopper(s, "a Wait GEMM")
        if s.name not in self.async_outs:
            self.add("TL417", s, f"no asynchronous GEMM writes {s.name}", f"write 'Compute GEMM ... and get {s.name} async', or drop this Wait GEMM")
        self.pending.pop(s.name, None)

    def c_Role(self: KernelCheck, s: n.Role, env: dict, loop) -> None:
        self.require_hopper(s, f"role {s.name}")
        outer = (self.waited, self.pending)
        self.waited, self.pending = [set()], {}  # a role sees only its own Waits
        try:
            self.block(s.body, env, None)
        finally:
            self.waited, self.pending = outer
        check_phases(self, s.name, s.body, env)

    def pending_read(self: KernelCheck, s: n.Stmt) -> None:
        """TL417: an async GEMM's result is read, or accumulated into, only after its Wait GEMM, and
        its operands are not written while it may still read them."""
        for name in sorted(stmt_reads(s) & set(self.pending)):
            gemm = self.pending.pop(name)  # one finding per missing Wait GEMM
            self.add("TL417", s, f"{name} is read before the asynchronous GEMM at line {gemm.line} that writes it is waited on",
                     f"add 'Wait GEMM {name}' before this statement")
        for out, gemm in sorted(self.pending.items()):
            for name in sorted(stmt_writes(s) & {gemm.a, gemm.b} - {out}):
                self.add("TL417", s, f"{name} is written while the asynchronous GEMM at line {gemm.line} may still read it",
                         f"add 'Wait GEMM {out}' before this statement")

    def issued(self: KernelCheck, s: n.Stmt) -> None:
        if isinstance(s, n.Gemm) and s.is_async:
            if s.out in self.pending and self.pending[s.out] is not s:
                self.add("TL417", s, f"{s.out} is written by a second asynchronous GEMM before the one at line {self.pending[s.out].line} is waited on",
                         f"add 'Wait GEMM {s.out}' between them")
            self.pending[s.out] = s

    def loop_end(self: KernelCheck, loop: n.Loop) -> None:
        """TL417: an async GEMM issued in a loop body is waited on in that body; otherwise the next
        trip reads or reissues it while it runs (a body is checked once, so this is said here)."""
        inside = {id(g) for g in n.walk(loop.body) if isinstance(g, n.Gemm)}
        for out, gemm in sorted(self.pending.items()):
            if id(gemm) in inside:
                self.add("TL417", gemm, f"the asynchronous GEMM writing {out} is still pending at the end of the loop over {loop.var}: "
                         "the next trip would reissue it or read it while it runs", f"add 'Wait GEMM {out}' inside the loop")
                del self.pending[out]
