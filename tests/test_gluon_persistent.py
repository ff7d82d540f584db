"""The gluon backend's persistent kernels (``persistent = 1``: one program per SM walks the work
tiles, each role carrying its ring position and Q's barrier phase over) without a GPU.

The roles of a generated module run here as plain Python, one program after another, over fakes
of Gluon that do no arithmetic on tiles but record what synchronises: each barrier wait with its
slot and phase, each arrival, each TMA copy with its coordinates and ring slot, and which ring slot
each GEMM reads. The protocol is then replayed as the hardware keeps it -- per barrier slot, the
n-th wait of a filling barrier is on phase n % 2, of a freeing one on (n + 1) % 2 -- and the data
checked: the K/V tile a compute warpgroup's GEMM reads from a slot is the one the load warp copied
there for the same work tile, and Q is the work tile's own. That is what a GPU run checks only when
a program takes several work tiles (verify's ``_more_tiles_than_sms`` case); the mutants that plant
a ring restarting at each tile or a stuck Q phase fail here too.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections import defaultdict

import pytest
from hypothesis import given, settings, strategies as st

from attnforge import AttentionSpec, get_target
from attnforge.backends.gluon import translate
from attnforge.errors import TranslateError
from attnforge.plan.hopper import hopper_plans, hopper_source
from attnforge.tl.parser import parse

H200 = get_target("h200")
FIRST = dict(BM=128, BN=128, warps=8, stages=3, pingpong=1, overlap=1)


class _Any:
    """A tile, layout or pointer: every operation gives another one (nothing of it is checked)."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __getitem__(self, key):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __call__
    __lt__ = __le__ = __gt__ = __ge__ = __and__ = __or__ = __neg__ = __call__


ANY = _Any()


class _Slot(_Any):
    """One stage of a shared ring (or a plain shared tile): what a GEMM reads is recorded by it, and
    its role's register stores into it (``events``: the role's record)."""

    def __init__(self, ring: str, index: int | None, events: list | None = None):
        self.ring, self.slot, self.events = ring, index, events

    def index(self, i):
        return _Slot(self.ring, int(i), self.events)

    def store(self, value):
        self.events.append(("sstore", self.ring, self.slot))

    def load(self, layout):  # qreg: Q's rows into registers, which the QK^T GEMMs then read (not Qs)
        if self.ring == "Qs":
            self.events.append(("qread", self.slot))
        return ANY

    def reshape(self, *a, **k):
        return self

    permute = slice = reshape


class _Recorder:
    """The fakes of one role's run: mbarrier, tma, the wgmma calls and the scores function."""

    def __init__(self, scores_params: list[str]):
        self.events: list[tuple] = []
        self.scores_params = scores_params

    # mbarrier
    def wait(self, bar, phase, *a, **k):
        self.events.append(("wait", bar.ring, bar.slot, int(phase)))

    def arrive(self, bar, count=1, **k):
        self.events.append(("arrive", bar.ring, bar.slot))

    def expect(self, *a, **k):
        pass

    def init(self, *a, **k):
        pass

    # tma
    def async_copy_global_to_shared(self, desc, coord, bar, dst):
        self.events.append(("copy", dst.ring, dst.slot, tuple(int(c) for c in coord), bar.ring, bar.slot))

    def async_copy_shared_to_global(self, desc, coord, src):  # O's TMA store (ostage)
        self.events.append(("ostore", src.slot, tuple(int(c) for c in coord), src.ring))

    def store_wait(self, pending):
        self.events.append(("store_wait", int(pending)))

    # wgmma
    def warpgroup_mma(self, a, b, acc, **k):
        if isinstance(a, _Slot) and a.ring == "Qs":  # a QK^T GEMM: which slot of Qs it reads
            self.events.append(("qread", a.slot))
        self.events.append(("gemm", b.ring, b.slot))
        return ANY

    def warpgroup_mma_wait(self, n, deps=()):
        self.events.append(("mma_wait", int(n)))
        return (ANY,) * len(deps)  # (as Gluon: the deps, each made ready)

    # the ping-pong turn (a named barrier per warpgroup): taken by this warpgroup, passed to the next of ``sets``
    def take_turn(self, wg):
        self.events.append(("wait", "turn", int(wg), 0))

    def pass_turn(self, wg):
        self.events.append(("arrive", "turn", (int(wg) + 1) % self.sets))

    # ostage = 3: a named barrier one set passes (bar.arrive) and the other waits on (bar.sync)
    def pair_sync(self, bar_id):
        self.events.append(("wait", "pair", int(bar_id), 0))

    def pair_arrive(self, bar_id):
        self.events.append(("arrive", "pair", int(bar_id)))

    def scores(self, *args):
        named = dict(zip(self.scores_params, args))
        self.events.append(("scores", int(named["j"]), int(named["m"]), int(named["b"]), int(named["h"])))
        # the scores of a tile at or past split (a tile some row sees only in part) must take the Mask
        assert named["MASKED"] or int(named["j"]) < int(named["split"]), f"tile {int(named['j'])} scored without the Mask, split {named['split']}"
        return ANY, ANY, ANY, ANY


class _Gl:
    """``gl``: integers where the kernel computes on scalars (bounds, slots, phases, tile numbers)."""

    def __init__(self, pid: int, programs: int):
        self.pid, self.programs = pid, programs

    def __getattr__(self, name):  # layouts, dtypes, tile constructors and reductions
        return ANY

    constexpr = staticmethod(lambda x: x)
    cdiv = staticmethod(lambda a, b: -(-a // b))
    static_range = staticmethod(range)

    def program_id(self, axis):
        return self.pid

    def num_programs(self, axis):
        return self.programs

    @staticmethod
    def minimum(a, b):
        return a if isinstance(a, _Any) or isinstance(b, _Any) else min(a, b)

    @staticmethod
    def maximum(a, b):
        return a if isinstance(a, _Any) or isinstance(b, _Any) else max(a, b)

    @staticmethod
    def where(c, a, b):
        return (a if c else b) if isinstance(c, bool) else ANY


def _roles(source: str, pid: int, programs: int):
    """The module's _load and _compute (and the helpers they call), executed over the fakes."""
    text = source.replace(").to(gl.int64)", ")")  # (b).to(gl.int64): b is a Python int here
    gl = _Gl(pid, programs)
    scores_params = re.search(r"^def _scores\((.*?)\):", source, re.M).group(1)
    scores_params = [p.split(":")[0].strip() for p in scores_params.split(",")]
    rec = _Recorder(scores_params)
    rec.sets = _sets(source)
    names = {"gl": gl, "gluon": type("G", (), {"jit": staticmethod(lambda f: f)}), "mbarrier": rec, "tma": rec,
             "warpgroup_mma": rec.warpgroup_mma, "warpgroup_mma_wait": rec.warpgroup_mma_wait, "fence_async_shared": lambda: None}
    for line in re.findall(r"^\w+ = gl\.constexpr\(.*\)$", source, re.M):
        exec(line, names)
    for block in re.findall(r"^def (?:floordiv|floormod|_work_tile|_compute|_load)\(.*?(?=^@|^def |\Z)", text, re.M | re.S):
        exec(block, names)
    names.update(_scores=rec.scores, _take_turn=rec.take_turn, _pass_turn=rec.pass_turn, _pair_sync=rec.pair_sync, _pair_arrive=rec.pair_arrive)
    return names["_load"], names["_compute"], rec


def _sets(source: str) -> int:
    """The module's compute warpgroup sets (ping-pong: each its own role here)."""
    return int(re.search(r"^SETS = gl\.constexpr\((\d+)\)", source, re.M).group(1))


def _run(source: str, spec: AttentionSpec, B: int, Sq: int, Sk: int, programs: int) -> dict[int, dict[str, list]]:
    """Each program's events, per role: {pid: {"load": [...], "compute0": [...], ...}}."""
    hq, hkv = spec.heads, spec.kv_heads
    values = dict(B=B, Hq=hq, Hkv=hkv, Sq=Sq, Sk=Sk, SCALE_POSITIVE=True, **spec.runtime_scalars())
    kernel = re.search(r"^def attn_fwd\(.*?\):\n(.*?)    # TL:", source, re.M | re.S).group(1)  # its grid coordinates, if it computes them
    runs = {}
    for pid in range(programs):
        names = {"gl": _Gl(pid, programs), **values}
        for line in re.findall(r"^\w+ = gl\.constexpr\(.*\)$", source, re.M):
            exec(line, names)
        exec(textwrap.dedent(kernel), names)
        values.update({a: names[a] for a in ("m", "b", "h") if a in names})
        roles = {}
        for role in ("load", *(f"compute{wg}" for wg in range(_sets(source)))):
            load, compute, rec = _roles(source, pid, programs)
            fn = load if role == "load" else compute
            args = {}
            for p in inspect.signature(fn).parameters:
                if p in values:
                    args[p] = values[p]
                elif p == "WG":
                    args[p] = int(role[-1])
                elif p.endswith("_desc") or p in ("o", "lse", "alibi_slopes"):
                    args[p] = ANY
                elif p.startswith(("so_", "sl_", "sq_")) or p == "sa":
                    args[p] = 1
                else:  # shared tiles, rings and barriers (the translator's q_free too)
                    args[p] = _Slot(p, None, rec.events)
            fn(**args)
            roles[role] = rec.events
        runs[pid] = roles
    return runs


def _check_protocol(runs: dict, stages: int, bm: int, bn: int, group: int) -> set[tuple[int, int, int]]:
    """Assert the roles of every program agree (see the module docstring); return the work tiles
    (m, b, h) the programs took, each once."""
    seen: set[tuple[int, int, int]] = set()
    for pid, roles in runs.items():
        load = roles["load"]
        fills: dict[tuple[str, int | None], list[tuple]] = defaultdict(list)  # (ring, slot) -> coordinates copied there, in order
        q_tiles = []
        waits: dict[tuple[str, str, int | None], int] = defaultdict(int)
        for e in load:
            if e[0] == "copy":
                _, ring, slot, coord, bar, bar_slot = e
                fills[(ring, slot)].append(coord)
                sets = len(roles) - 1
                if ring == "Qs" and slot is not None and slot % sets:  # ping-pong: a box per warpgroup set, slot w (of a
                    # parity's sets, chained) its rows of the last tile's
                    w = slot % sets
                    assert coord[:2] + (coord[2] - w * (bm // sets),) == q_tiles[-1][1:] + (q_tiles[-1][0] * bm,), (
                        f"program {pid}: Q's box into slot {slot} at {coord}, not rows {w} * {bm // sets} on of work tile {q_tiles[-1]}")
                elif ring == "Qs":
                    q_tiles.append((coord[2] // bm, coord[0], coord[1]))
            elif e[0] == "wait":  # the load warp waits on freeing barriers only: the n-th on phase (n + 1) % 2
                _, bar, slot, phase = e
                n = waits[("load", bar, slot)]
                waits[("load", bar, slot)] += 1
                assert phase == (n + 1) % 2, f"program {pid}: the load warp's wait #{n} on {bar}[{slot}] is on phase {phase}"
        for role, events in roles.items():
            if role == "load":
                continue
            used: dict[tuple[str, int | None], int] = defaultdict(int)
            tile, pending = None, []
            q_fill, q_read = _q_fills_read(events), None  # (slot, fill) of each read of Qs; the last read's
            tiles_done, count = [], defaultdict(int)
            for i, e in enumerate(events):
                if e[0] == "wait":
                    _, bar, slot, phase = e
                    if bar in ("turn", "pair"):  # (named barriers: no phase)
                        continue
                    n = count[(bar, slot)]
                    count[(bar, slot)] += 1
                    assert phase == n % 2, f"program {pid} {role}: wait #{n} on {bar}[{slot}] is on phase {phase}, not {n % 2}"
                elif e[0] == "gemm":
                    _, ring, slot = e
                    k = used[(ring, slot)]
                    used[(ring, slot)] += 1
                    assert k < len(fills[(ring, slot)]), f"program {pid} {role}: reads {ring}[{slot}] a {k + 1}th time; the load filled it {len(fills[(ring, slot)])} times"
                    pending.append((ring, fills[(ring, slot)][k]))
                elif e[0] == "qread":
                    q_read = q_fill[i]
                elif e[0] == "scores":
                    _, j, m, b, h = e
                    if tile != (m, b, h):
                        tile = (m, b, h)
                        tiles_done.append(tile)
                    sets = len(roles) - 1
                    q_slot, k = q_read  # the fill of Qs the scores' GEMM read must be this tile's Q
                    fill = fills[("Qs", q_slot)][k: k + 1]
                    rows = m * bm + (int(role[-1]) if sets > 1 else 0) * (bm // sets)
                    assert fill == [(b, h, rows, 0)], (f"program {pid} {role}: the scores of {tile} read Qs[{q_slot}], whose fill for them "
                                                       f"is {fill}, not this warpgroup's rows of the tile's Q")
                    ks = [c for r, c in pending if r == "Ks"]
                    assert ks and ks[-1] == (b, h // group, j * bn, 0), f"program {pid} {role}: the scores of tile {j} of {tile} came from K at {ks[-1:]}"
                    pending = [(r, c) for r, c in pending if r != "Ks"]
            for ring, coord in pending:  # V tiles of the last scores, each the K tile's partner
                assert ring == "Vs"
            _check_o_stores(pid, role, events, q_tiles, bm, len(roles) - 1)
            assert tiles_done == [t for t in q_tiles if t in tiles_done], f"program {pid} {role}: tiles out of the load warp's order"
        assert not seen & set(q_tiles), f"program {pid} takes a work tile another took"
        seen |= set(q_tiles)
    return seen


def _check_progress(runs: dict) -> None:
    """Play each program's recorded roles against each other as the barriers allow: a wait blocks
    until its phase has completed (a phase: the barrier's count of arrivals; a TMA copy's landing is
    its barrier's arrival, taken as immediate), and every role must run to its end. A reordering of
    the copies or waits that can deadlock (a role waiting for an arrival another role makes only
    after it waits itself) stops here with the blocked waits. A role yields after each arrival, so the
    load warp moves as soon as a slot is given back: a K/V slot (or Qs) refilled while a compute warpgroup's
    GEMM reading its previous tile is still in flight (issued, not yet retired by a warpgroup_mma_wait)
    is a race that stops here too, and so are (``ostage = 3``) a compute warpgroup's rows of O written into a K/V slot while
    another's GEMM reading it is in flight, and the load warp's refill of a slot whose O store has not been waited for."""
    for pid, roles in runs.items():
        computes = [r for r in roles if r != "load"]
        # the load warp waits on barriers that start free only (_check_protocol): the n-th wait passes once n phases
        # have completed (the first at once), each phase one arrival per compute warpgroup set; the others (ready,
        # the ping-pong turns) pass their n-th wait once n + 1 have
        freeing = {e[1] for e in roles["load"] if e[0] == "wait"}
        count = defaultdict(lambda: 1, dict.fromkeys(freeing, len(computes)))
        # Q's barrier completes a phase once all of a work tile's boxes of Q have landed (ping-pong: a box per warpgroup set)
        # (its slots: a set per work tile's parity where chained, Q's barrier then one per parity)
        q_slots = {e[2] for e in roles["load"] if e[:2] == ("copy", "Qs")}
        parities = 2 if any(e[:2] == ("wait", "q_ready") and e[2] is not None for r in computes for e in roles[r]) else 1
        count["q_ready"] = max(1, len(q_slots) // parities)
        arrivals: dict[tuple[str, int | None], int] = defaultdict(int)  # (warpgroup 1 passes the first turn in its record)
        at = dict.fromkeys(roles, 0)
        waits_made: dict[tuple[str, str, int | None], int] = defaultdict(int)
        fills: dict[tuple[str, int | None], int] = defaultdict(int)  # ring slot (K, V, Q) -> copies into it so far
        q_fill = {r: _q_fills_read(roles[r]) for r in computes}  # event index of a QK^T GEMM's read of Qs -> (slot, fill it must read)
        q_parity = next((e[2] for r in computes for e in roles[r] if e[:2] == ("wait", "q_ready")), None)  # (chained: its index)
        in_flight: dict[str, list[list[tuple[str, int | None]]]] = {r: [] for r in computes}  # GEMMs issued, not retired: what each reads
        retired: dict[tuple[str, str, int | None], int] = defaultdict(int)  # (role, ring, slot) -> GEMM reads retired
        # happens-before, whatever order this replay runs the roles in (vector clocks): a role's clock ticks at each of its
        # events; an arrival adds the role's clock to its barrier phase's, a wait that passes takes in the phases it waited
        # for. "X happened before this role's present" is then clock[role][X's role] >= X's tick (ostage = 3's checks).
        clock = {r: defaultdict(int) for r in roles}
        phase_clock: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # (barrier, slot, phase) -> clock
        retired_at: dict[tuple, int] = {}  # (role, ring, slot, its n-th read there) -> tick of the wait that retired the GEMM
        stores_from: dict[tuple[str, int | None], int] = defaultdict(int)  # K/V slot -> O stores that read it so far
        unwaited: dict[str, list[tuple]] = defaultdict(list)  # role -> its O stores from K/V slots not waited for yet
        waited_at: dict[tuple, tuple[str, int]] = {}  # (ring, slot, n-th store from it) -> (role, tick of its store_wait)

        def arrived(role, bar, slot):
            phase = arrivals[(bar, slot)] // count[bar]
            for r, t in clock[role].items():
                phase_clock[(bar, slot, phase)][r] = max(phase_clock[(bar, slot, phase)][r], t)
            arrivals[(bar, slot)] += 1

        while True:
            moved = False
            for role, events in roles.items():
                while at[role] < len(events):
                    e = events[at[role]]
                    clock[role][role] += 1
                    if e[0] == "wait":
                        _, bar, slot, _ = e
                        k = waits_made[(role, bar, slot)]
                        if arrivals[(bar, slot)] // count[bar] < (k if bar in freeing else k + 1):
                            clock[role][role] -= 1  # (not run yet)
                            break
                        waits_made[(role, bar, slot)] += 1
                        for phase in range(k if bar in freeing else k + 1):  # the phases this wait saw complete
                            for r, t in phase_clock[(bar, slot, phase)].items():
                                clock[role][r] = max(clock[role][r], t)
                    elif e[0] == "arrive":
                        arrived(role, e[1], e[2])
                        if e[1] in ("turn", "pair"):  # a named barrier banks no second pass: passed twice untaken, the next take hangs
                            taken = sum(n for (_, bar, slot), n in waits_made.items() if (bar, slot) == (e[1], e[2]))
                            assert arrivals[(e[1], e[2])] - taken <= 1, f"program {pid}: {role} passes {e[1]} {e[2]} twice before it is taken"
                        at[role] += 1
                        moved = True
                        break  # the others may move on this arrival before this role goes on
                    elif e[0] == "qread" and at[role] in q_fill.get(role, {}):  # Q's fill for this tile copied, waited for, not yet overwritten
                        slot, k = q_fill[role][at[role]]
                        assert fills[("Qs", slot)] == k + 1, (
                            f"program {pid}: {role}'s QK^T GEMM reads Qs[{slot}] for its fill #{k}, when {fills[('Qs', slot)]} copies have gone there")
                        ready = None if q_parity is None or slot is None else slot // len(computes)  # (chained: a barrier per parity)
                        assert waits_made[(role, "q_ready", ready)] >= k + 1, (
                            f"program {pid}: {role}'s QK^T GEMM reads Qs[{slot}] for its fill #{k} after {waits_made[(role, 'q_ready', ready)]} "
                            f"waits on q_ready[{ready}]")
                    elif e[0] == "copy":
                        ring, slot = e[1], e[2]
                        if ring == "Qs":
                            for reader in computes:  # (a QK^T GEMM reads Qs while in flight, as it reads K)
                                assert ("Qs", slot) not in {r for reads in in_flight[reader] for r in reads}, (
                                    f"program {pid}: the load warp refills Qs[{slot}] while {reader}'s QK^T GEMM reading it is still in flight")
                            fills[(ring, slot)] += 1
                        if ring in ("Ks", "Vs"):
                            for i in range(stores_from[(ring, slot)]):  # every O store that read the slot was waited for, before this
                                who, t = waited_at.get((ring, slot, i), (None, None))
                                assert who is not None and clock[role][who] >= t, (
                                    f"program {pid}: the load warp refills {ring}[{slot}] with no sync after the O store from it "
                                    f"({who or 'not'} waited for)")
                            for reader in computes:
                                assert retired[(reader, ring, slot)] >= fills[(ring, slot)], (
                                    f"program {pid}: the load warp refills {ring}[{slot}] while {reader}'s GEMM reading its "
                                    f"tile #{fills[(ring, slot)]} there is still in flight")
                            fills[(ring, slot)] += 1
                        arrived(role, e[4], e[5])
                    elif e[0] == "sstore" and e[1] in ("Ks", "Vs"):  # ostage = 3: O into a slot whose every GEMM read happened before
                        fill = fills[(e[1], e[2])] - 1
                        for reader in computes:
                            t = retired_at.get((reader, e[1], e[2], fill))
                            assert t is not None and clock[role][reader] >= t, (
                                f"program {pid}: {role} writes O into {e[1]}[{e[2]}] with no sync after {reader}'s GEMM reading its tile there")
                    elif e[0] == "ostore" and e[3] in ("Ks", "Vs"):
                        unwaited[role].append((e[3], e[1], stores_from[(e[3], e[1])]))
                        stores_from[(e[3], e[1])] += 1
                    elif e[0] == "store_wait" and e[1] == 0:
                        for key in unwaited.pop(role, []):
                            waited_at[key] = (role, clock[role][role])
                    elif e[0] == "gemm":  # what the GEMM reads from shared memory: its B operand, and Qs where its A came from there
                        a = events[at[role] - 1]
                        in_flight[role].append([(e[1], e[2])] + ([("Qs", a[1])] if a[0] == "qread" else []))
                    elif e[0] == "mma_wait":  # at most e[1] GEMM groups left in flight, the newest; they retire in order
                        keep = len(in_flight[role]) - min(e[1], len(in_flight[role]))
                        for reads in in_flight[role][:keep]:
                            ring, slot = reads[0]
                            retired_at[(role, ring, slot, retired[(role, ring, slot)])] = clock[role][role]
                            retired[(role, ring, slot)] += 1
                        in_flight[role] = in_flight[role][keep:]
                    at[role] += 1
                    moved = True
            if all(at[r] == len(ev) for r, ev in roles.items()):
                break
            blocked = {r: ev[at[r]] for r, ev in roles.items() if at[r] < len(ev)}
            assert moved, f"program {pid}: the roles deadlock, each waiting: {blocked}"


def _q_fills_read(events: list[tuple]) -> dict[int, tuple[int | None, int]]:
    """For each read of Qs in a compute role's record (its event index: a QK^T GEMM's, or with qreg the read into registers),
    the slot and which of the slot's fills it reads: the k-th work tile that reads a slot reads its k-th fill (the tile: that
    of the scores the read feeds, the next scores event; a qreg work tile without K/V tiles reads Q and scores nothing, its
    read then a tile of its own)."""
    out, tiles = {}, defaultdict(list)
    for i, e in enumerate(events):
        if e[0] != "qread":
            continue
        fed = next((x for x in events[i:] if x[0] == "scores" or x[:2] == ("wait", "q_ready")), None)
        tile = fed[2:] if fed is not None and fed[0] == "scores" else ("a work tile without K/V tiles", i)
        if not tiles[e[1]] or tiles[e[1]][-1] != tile:
            tiles[e[1]].append(tile)
        out[i] = (e[1], len(tiles[e[1]]) - 1)
    return out


def _check_o_stores(pid: int, role: str, events: list[tuple], tiles: list[tuple[int, int, int]], bm: int, sets: int) -> None:
    """An ostage kernel's O leaves by TMA stores from shared memory: one per work tile, at the tile's
    rows of this warpgroup. The shared tile a store reads is written again (or the program ends) only
    after a wait for that store; Qs (ostage = 2) is written only after a wait for every GEMM once
    the last QK^T GEMM has been issued, and given back to the load warp only after the store from it
    was waited for."""
    stores = [e for e in events if e[0] == "ostore"]
    if not stores:
        return
    wg = int(role[-1])  # (warpgroup sets past 0 exist in ping-pong only, where each set owns BM / sets rows)
    want = [(b, h, m * bm + wg * (bm // sets), 0) for m, b, h in tiles]
    got = [e[2] for e in stores]
    assert got == want, f"program {pid} {role}: O stored at {got}, not the work tiles' rows {want}"
    unread: set[tuple] = set()  # shared tiles a store has not been waited for yet
    gemms_done = True
    for e in events:
        if e[0] == "ostore":
            unread.add((e[3], e[1]))
        elif e[0] == "store_wait" and e[1] == 0:
            unread.clear()
        elif e[0] == "sstore":
            assert (e[1], e[2]) not in unread, f"program {pid} {role}: {e[1]}[{e[2]}] written before the store before it was waited for"
            if e[1] == "Qs":
                assert gemms_done, f"program {pid} {role}: O written into Qs before the QK^T GEMMs reading it were waited for"
        elif e[0] == "gemm" and e[1] == "Ks":
            gemms_done = False
        elif e[0] == "mma_wait" and e[1] == 0:
            gemms_done = True
        elif e[0] == "arrive" and e[1] == "q_free":  # (per store: with ostage = 3 only a work tile without keys stores from Qs)
            assert not any(ring == "Qs" for ring, _ in unread), f"program {pid} {role}: Qs given back before O's store from it was waited for"
    assert not unread, f"program {pid} {role}: the program ends with an O store not waited for"


def _source(spec: AttentionSpec, params: dict[str, int]) -> str:
    program = parse(hopper_source(spec, H200, params), file="kernel.tl")
    return translate(program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source


SPECS = {
    "causal-d64": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True), FIRST),
    "full-d128": (AttentionSpec(heads=4, kv_heads=4, head_dim=128, dtype="fp16"), FIRST),
    "window-gqa": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", window_left=200, window_right=0), FIRST),
    "d256-plain": (AttentionSpec(heads=2, kv_heads=1, head_dim=256, dtype="bf16", causal=True),
                   dict(BM=128, BN=64, warps=8, stages=2, pingpong=1)),
    "d256-overlap": (AttentionSpec(heads=2, kv_heads=2, head_dim=256, dtype="fp16"), dict(BM=128, BN=64, warps=8, stages=2, pingpong=1, overlap=1)),
    "no-schedules": (AttentionSpec(heads=2, kv_heads=2, head_dim=64, dtype="bf16", causal=True), dict(BM=128, BN=64, warps=8, stages=2)),
    # three warpgroups in ping-pong (BM = 192: Q in a TMA box per warpgroup, the turns passed round)
    "three-sets-d64": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True),
                       dict(BM=192, BN=128, warps=12, stages=4, pingpong=1)),
    "three-sets-overlap": (AttentionSpec(heads=2, kv_heads=2, head_dim=128, dtype="fp16"),
                           dict(BM=192, BN=64, warps=12, stages=4, pingpong=1, overlap=1)),
    # four (BM = 256, the planner's first choice at D = 64 up to 1k rows without a mask: plan/hopper._four_warpgroups)
    "four-sets-d64": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16"),
                      dict(BM=256, BN=64, warps=16, stages=6, pingpong=1, overlap=1)),
}


@settings(max_examples=25, deadline=None)
@given(key=st.sampled_from(sorted(SPECS)), B=st.integers(1, 3), Sq=st.integers(1, 700), Sk=st.integers(1, 900),
       programs=st.integers(1, 7), persistent=st.booleans(), ostage=st.sampled_from([0, 1, 2]), qreg=st.booleans())
def test_every_program_reads_the_tiles_its_load_warp_copied(key, B, Sq, Sk, programs, persistent, ostage, qreg):
    spec, params = SPECS[key]
    qreg = qreg and ostage != 2 and spec.window_left is None  # (Q in registers with O through Qs or a window: refused, test_backend_gluon's)
    source = _source(spec, {**params, **({"persistent": 1} if persistent else {}), **({"ostage": ostage} if ostage else {}),
                            **({"qreg": 1} if qreg else {})})
    assert ("async_copy_shared_to_global" in source) == bool(ostage)
    assert ("warpgroup_mma(q_r, k_t" in source) == qreg and ("warpgroup_mma(q_t, k_t" in source) != qreg
    nm = -(-Sq // params["BM"])
    if not persistent:  # one program per work tile
        programs = nm * B * spec.heads
    runs = _run(source, spec, B, Sq, Sk, programs)
    tiles = _check_protocol(runs, params["stages"], params["BM"], params["BN"], spec.heads // spec.kv_heads)
    assert tiles == {(m, b, h) for m in range(nm) for b in range(B) for h in range(spec.heads)}
    _check_progress(runs)


# chain = 1: where the translator takes it (persistent, overlap, ping-pong, no bound moving with the row tile, O not through Qs)
CHAINED = {
    "full-d64": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16"), dict(FIRST, stages=4, ostage=1)),
    "full-d128": (SPECS["full-d128"][0], FIRST),
    "d256-overlap": SPECS["d256-overlap"],
    "alibi-softcap": (AttentionSpec(heads=4, kv_heads=1, head_dim=64, dtype="fp16", alibi_slopes="auto", softcap=20.0), FIRST),
}


@settings(max_examples=25, deadline=None)
@given(key=st.sampled_from(sorted(CHAINED)), B=st.integers(1, 3), Sq=st.integers(1, 700), Sk=st.integers(1, 900),
       programs=st.integers(1, 7), ostage=st.sampled_from([0, 1]))
def test_chained_programs_read_the_tiles_their_load_warp_copied(key, B, Sq, Sk, programs, ostage):
    """``chain = 1``: the next work tile's first QK^T GEMM in the turn of this one's last PV GEMM, Q in a set of slots per
    work tile's parity. Each warpgroup's scores read the Q and K its load warp copied for that work tile (``qread``: the
    slot of Qs, whose fills for the tiles read from it go in order), and the roles played against each other run to the end."""
    spec, params = CHAINED[key]
    source = _source(spec, {**params, "persistent": 1, "chain": 1, **({"ostage": ostage} if ostage else {})})
    assert "q_n = Qs.index(((tiles + 1) % 2) * SETS + WG)" in source
    nm = -(-Sq // params["BM"])
    runs = _run(source, spec, B, Sq, Sk, programs)
    tiles = _check_protocol(runs, params["stages"], params["BM"], params["BN"], spec.heads // spec.kv_heads)
    assert tiles == {(m, b, h) for m in range(nm) for b in range(B) for h in range(spec.heads)}
    _check_progress(runs)


@pytest.mark.parametrize("over, words", [
    (dict(persistent=0), "without persistent = 1"), (dict(overlap=0), "without overlap = 1"), (dict(pingpong=0, warps=4), "pingpong = 1"),
    (dict(ostage=2), "ostage = 2"),
])
def test_a_chain_the_translator_cannot_keep_is_refused(over, words):
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16")
    params = {k: v for k, v in {**FIRST, "persistent": 1, "chain": 1, **over}.items() if v}
    with pytest.raises(TranslateError, match=words):
        translate(parse(hopper_source(spec, H200, params), file="kernel.tl"), head_dim=64, head_dim_v=64)
    causal = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True)
    with pytest.raises(TranslateError, match="bounded by m"):
        translate(parse(hopper_source(causal, H200, {**FIRST, "persistent": 1, "chain": 1}), file="kernel.tl"), head_dim=64, head_dim_v=64)
    # the split between the unmasked and the masked loop moving with m, the loops' outer bounds not (review, stop 31)
    text = hopper_source(causal, H200, {**FIRST, "persistent": 1, "chain": 1})
    stop = "cdiv(max(0, min(Sk, (m + 1) * BM + Sk - Sq)), BN)"  # the masked loop's and the load loop's: every key from the split on
    assert text.count(stop) == 2
    text = text.replace(stop, "cdiv(Sk, BN)")
    with pytest.raises(TranslateError, match="bounded by m"):
        translate(parse(text, file="kernel.tl"), head_dim=64, head_dim_v=64)
    three = {**SPECS["three-sets-overlap"][1], "persistent": 1, "chain": 1}  # (wrong output on the H200: review, stop 31)
    with pytest.raises(TranslateError, match="3 compute warpgroups"):
        translate(parse(hopper_source(SPECS["three-sets-overlap"][0], H200, three), file="kernel.tl"), head_dim=128, head_dim_v=128)


_NEXT_Q_WAIT = r"^ *mbarrier\.wait\(q_ready\.index\(\(tiles \+ 1\) % 2\).*\n"
_BOTH_GEMMS_WAITED = "            S, acc, _, _, _, _ = warpgroup_mma_wait(0"
_Q_GIVEN_BACK = r"^ *mbarrier\.arrive\(q_free\.index\(tiles % 2\), count=1\).*\n"
_TILE_LOOP = "        for j in range(lo, hi - 1):"
# Q's protocol in a chained kernel broken four ways (the review's plants, stop 31), each one edit of the source
CHAINED_PLANTS = {
    "the next tile's Q not waited for": lambda src: re.sub(_NEXT_Q_WAIT, "", src, flags=re.M),
    "the next tile's Q waited for after its GEMM": lambda src: re.sub(_NEXT_Q_WAIT, "", src, flags=re.M).replace(
        _BOTH_GEMMS_WAITED, re.search(_NEXT_Q_WAIT, src, re.M).group(0) + _BOTH_GEMMS_WAITED),
    "Q's slots given back before the tile loop": lambda src: re.sub(_Q_GIVEN_BACK, "", src, flags=re.M).replace(
        _TILE_LOOP, re.search(_Q_GIVEN_BACK, src, re.M).group(0) + _TILE_LOOP, 1),
    "the load warp not waiting for Q's slots": lambda src: re.sub(r"^ *mbarrier\.wait\(q_free\.index.*\n", "", src, flags=re.M),
}


@pytest.mark.parametrize("plant", sorted(CHAINED_PLANTS))
def test_the_replay_catches_q_read_before_it_is_waited_for_or_after_it_is_overwritten(plant):
    """Each QK^T GEMM's read of Qs must come after its fill's ``q_ready`` wait and before the slot's next fill: the replay
    (copies landing at once, the load warp moving as soon as it may) sees a read early or late where a GPU run rarely does.
    Short rows (one or two K/V tiles a work tile) let the load warp run ahead by several work tiles."""
    spec, params = CHAINED["full-d64"]
    source = _source(spec, {**params, "persistent": 1, "chain": 1})
    text = CHAINED_PLANTS[plant](source)
    assert text != source
    _check_progress(_run(source, spec, 2, 1000, 130, 3))
    with pytest.raises(AssertionError, match="reads Qs"):
        _check_progress(_run(text, spec, 2, 1000, 130, 3))


def test_qk_gemms_reading_qs_after_its_early_hand_back_are_caught():
    """``qreg = 1``, persistent: Qs goes back to the load warp once each warpgroup has read its rows into registers, so
    the next work tile's Q is copied under this one's tile loop. The mutant whose QK^T GEMMs still read Qs is a race
    that the replay (the load warp moving as soon as it may) sees: a GEMM reads Qs after the next fill."""
    from attnforge.selftest.mutants import GLUON_MUTANTS, SPECS as MUTANT_SPECS

    (mutant,) = [m for m in GLUON_MUTANTS if m.name == "gluon_qreg_qk_still_reads_qs"]
    spec, _ = MUTANT_SPECS[mutant.spec]
    plan = next(hopper_plans(spec, H200))
    assert plan.params.get("qreg") == 1 and plan.params.get("persistent") == 1  # the planner's first choice for the mutant's spec
    source = translate(plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
    early = source.index("mbarrier.arrive(q_free, count=1)  # Qs given back at once")
    assert source.index("q_r = q_t.load(") < early < source.index("warpgroup_mma(q_r, k_t")
    _check_progress(_run(source, spec, 2, 1000, 600, 3))
    with pytest.raises(AssertionError, match="reads Qs|refills Qs.* while .* QK\\^T GEMM reading it is still in flight"):
        _check_progress(_run(mutant.apply(source), spec, 2, 1000, 600, 3))


_Q_TO_REGISTERS = r"^ *q_r = q_t\.load\(.*\n"
_Q_BACK_AT_ONCE = r"^ *mbarrier\.arrive\(q_free, count=1\)  # Qs given back at once.*\n"
_Q_WAIT = r"^ *mbarrier\.wait\(q_ready, .*\n"
# qreg's early hand-back of Qs broken three ways (the review's plants, stop 34), each one edit of the source
QREG_PLANTS = {
    "Qs given back before it is read": lambda src: re.sub(_Q_TO_REGISTERS, "", src, flags=re.M).replace(
        re.search(_Q_BACK_AT_ONCE, src, re.M).group(0), re.search(_Q_BACK_AT_ONCE, src, re.M).group(0) + re.search(_Q_TO_REGISTERS, src, re.M).group(0)),
    "Qs given back twice a work tile": lambda src: re.sub(_Q_BACK_AT_ONCE, lambda mt: mt.group(0) * 2, src, flags=re.M),
    "Q read before its wait": lambda src: re.sub(_Q_WAIT, "", src, flags=re.M).replace(
        re.search(_Q_BACK_AT_ONCE, src, re.M).group(0), re.search(_Q_BACK_AT_ONCE, src, re.M).group(0) + re.search(_Q_WAIT, src, re.M).group(0)),
}


@pytest.mark.parametrize("plant", sorted(QREG_PLANTS))
def test_the_replay_catches_qs_given_back_early_or_twice_or_read_before_its_wait(plant):
    """``qreg = 1``, persistent: the read of Qs into registers must come after Q's wait and before the hand-back on q_free,
    once a work tile. Short rows (one or two K/V tiles a work tile) let the load warp run ahead to the next Q."""
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16")
    source = _source(spec, {**FIRST, "persistent": 1, "ostage": 1, "qreg": 1})
    text = QREG_PLANTS[plant](source)
    assert text != source
    _check_progress(_run(source, spec, 2, 1000, 130, 3))
    with pytest.raises(AssertionError, match="reads Qs|deadlock"):
        _check_progress(_run(text, spec, 2, 1000, 130, 3))


def test_a_chained_kernel_refuses_a_call_without_keys(tmp_path):
    """Without K/V tiles a chained work tile leaves its Q barrier unwaited (``compute._chained_tiles``): the module's
    launch refuses Sk = 0 before it builds a descriptor."""
    import torch

    from attnforge.backends.gluon import _import
    from attnforge.errors import LaunchError

    spec, params = CHAINED["full-d64"]
    path = tmp_path / "k.py"
    path.write_text(_source(spec, {**params, "persistent": 1, "chain": 1}))
    q = torch.zeros(1, 4, 8, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, 0, 64, dtype=torch.bfloat16)
    o, lse = torch.zeros_like(q), torch.zeros(1, 4, 8)
    with pytest.raises(LaunchError, match="no keys"):
        _import(path).launch(q, k, k, o, lse, scale=0.125)


def test_the_planner_offers_the_chained_d64_kernel_last():
    """``chain = 1`` as the last candidate (measured no faster, bench/RESULTS.md run 16) where it compiles without a spill
    (D = Dv = 64, two warpgroups, persistent, no mask): the first choice chained; not under a mask, at D = 128 (16 bytes
    spilled), with three warpgroups, nor on sm_100. The checker counts Q's second set of slots."""
    from attnforge.plan.hopper import hopper_candidates
    from attnforge.tl.checker import check

    def cands(target=H200, **kw):
        return [c.params for c in hopper_candidates(AttentionSpec(heads=16, kv_heads=16, dtype="bf16", **kw), target)]

    short = cands(head_dim=64, seqlen_q=1024, seqlen_k=1024)  # (first: four warpgroups, plan.hopper._four_warpgroups)
    assert short[0]["BM"] == 256 and short[1] == {**short[2], "qreg": 1}  # (the chain has Q in Qs: the next work tile's is read from its other slots)
    assert short[-1] == {**short[2], "chain": 1} and all("chain" not in c for c in short[:-1])
    assert all("chain" not in c for c in cands(head_dim=64, causal=True) + cands(head_dim=128) + cands(head_dim=64, window_left=64, window_right=0)
               + cands(get_target("b200"), head_dim=64))
    long = cands(head_dim=64, seqlen_q=4096, seqlen_k=4096)
    assert long[0]["BM"] == 192 and long[1] == {**long[2], "qreg": 1} and long[-1] == {**long[2], "chain": 1}
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16")
    sizes = [check(parse(hopper_source(spec, H200, p), file="kernel.tl"), H200, head_dim=64, head_dim_v=64).resources[0].smem_bytes
             for p in (short[-1], short[2])]
    assert sizes[0] - sizes[1] == 128 * 64 * 2  # Q's tile again: BM x D in bf16


@pytest.mark.parametrize("name", ["gluon_persistent_ring_restarts", "gluon_persistent_q_phase_stuck", "gluon_ostage_rows_of_one_warpgroup",
                                  "gluon_three_sets_mask_a_tile_late", "gluon_three_sets_q_boxes_at_one_row",
                                  "gluon_four_sets_mask_a_tile_late", "gluon_four_sets_q_boxes_at_one_row", "gluon_four_sets_o_rows_of_one_warpgroup",
                                  "gluon_chain_next_q_from_this_tiles_slots", "gluon_chain_next_q_wait_a_phase_early"])
def test_the_simulated_roles_kill_the_persistent_mutants(name):
    from attnforge.plan.builtin import Candidate
    from attnforge.selftest.mutants import GLUON_MUTANTS, SPECS as MUTANT_SPECS, base_params

    (mutant,) = [m for m in GLUON_MUTANTS if m.name == name]
    spec, _ = MUTANT_SPECS[mutant.spec]
    base = base_params(mutant.spec)  # (the GPU check's base: SPEC_PLAN's candidate where the spec has one)
    plan = next(hopper_plans(spec, H200, prefer=Candidate(base, "base") if base else None))
    assert plan.params.get("persistent") == 1
    source = translate(plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
    bm, bn, stages = plan.params["BM"], plan.params["BN"], plan.params["stages"]
    _check_protocol(_run(source, spec, 2, 600, 600, 3), stages, bm, bn, spec.heads // spec.kv_heads)
    with pytest.raises(AssertionError, match="phase|came from|filled it|O stored at|scored without the Mask|Q's box|read Qs"):
        sk = 500 if mutant.spec in ("hopper_three_sets", "hopper_four_sets") else 600  # (a partial tail tile: the tile past split)
        _check_protocol(_run(mutant.apply(source), spec, 2, 600, sk, 3), stages, bm, bn, spec.heads // spec.kv_heads)


def test_qs_given_back_before_the_store_from_it_has_read_it_is_caught():
    """``ostage = 2`` (O through Qs): the wait for the store moved after Qs' hand-back to the load warp,
    which could then copy the next work tile's Q over rows the store has not read yet."""
    spec, params = SPECS["full-d128"]
    source = _source(spec, {**params, "persistent": 1, "ostage": 2})
    pair = re.search(r"^(\s*tma\.store_wait\(0\)  # the store has read Qs\n)(\s*mbarrier\.arrive\(q_free.*\n)", source, re.M)
    early = source.replace(pair.group(0), pair.group(2) + pair.group(1))
    assert early != source
    _check_protocol(_run(source, spec, 2, 600, 600, 3), params["stages"], params["BM"], params["BN"], 1)
    with pytest.raises(AssertionError, match="Qs given back before"):
        _check_protocol(_run(early, spec, 2, 600, 600, 3), params["stages"], params["BM"], params["BN"], 1)


def test_an_o_store_into_a_slot_still_being_read_is_caught():
    """The wait before the staging slot is written again, dropped: a race on a GPU that verification
    may miss (the store before usually has read the slot by then); the replayed protocol sees it."""
    spec, params = SPECS["causal-d64"]
    source = _source(spec, {**params, "persistent": 1, "ostage": 1})
    unwaited = re.sub(r"^\s*tma\.store_wait\(0\)  # the previous work tile's O store.*\n", "", source, flags=re.M)
    assert unwaited != source
    _check_protocol(_run(source, spec, 2, 600, 600, 3), params["stages"], params["BM"], params["BN"], 2)
    with pytest.raises(AssertionError, match="written before the store before it was waited for"):
        _check_protocol(_run(unwaited, spec, 2, 600, 600, 3), params["stages"], params["BM"], params["BN"], 2)
    pair = re.search(r"^(\s*tma\.store_wait\(0\)  # the previous work tile's O store.*\n)(\s*o_stage\.index\(WG\).*\.store\(out\)\n)", source, re.M)
    moved = source.replace(pair.group(0), pair.group(2) + pair.group(1))  # the wait after the write: the write may race the store before
    assert moved != source
    with pytest.raises(AssertionError, match="written before the store before it was waited for"):
        _check_protocol(_run(moved, spec, 2, 600, 600, 3), params["stages"], params["BM"], params["BN"], 2)


def test_a_load_order_that_deadlocks_is_caught():
    """The load warp's copy of Q moved after its work tile's K/V loop: the compute warpgroups wait for Q before they
    give a slot back, the load warp for a slot before it copies Q. The recorded roles are each right on their own;
    played against each other they stop."""
    spec, params = SPECS["full-d128"]
    source = _source(spec, {**params, "persistent": 1, "ostage": 2})
    q_copy = re.search(r"^ *# TL: Copy Q .*\n(?: *mbarrier\.(?:wait|expect)\(q_.*\n)+(?: *for w in gl\.static_range\(SETS\):.*\n)? *tma\.async_copy_global_to_shared\(q_desc.*\n", source, re.M)
    kv_loop = re.search(r"^( *)for j in range\(0, gl\.cdiv\(Sk, BN\)\):\n(?:\1 .*\n)+", source[q_copy.end():], re.M)
    late = source[:q_copy.start()] + source[q_copy.end():q_copy.end() + kv_loop.end()] + q_copy.group(0) + source[q_copy.end() + kv_loop.end():]
    _check_progress(_run(source, spec, 2, 300, 900, 2))
    late_runs = _run(late, spec, 2, 300, 900, 2)
    _check_protocol(late_runs, params["stages"], params["BM"], params["BN"], 1)  # each role's own record is consistent
    with pytest.raises(AssertionError, match="deadlock"):
        _check_progress(late_runs)


@pytest.mark.parametrize("overlap", [0, 1])
def test_a_k_slot_given_back_before_its_gemm_is_done_is_caught(overlap):
    """K's slot given back (k_free) before the warpgroup_mma_wait that retires the QK^T GEMM reading it: the load warp
    may refill the slot under the GEMM. A GPU run rarely shows it (the TMA copy lands after the GEMM has read); the
    replay, where the load warp moves at each arrival, does."""
    spec, params = SPECS["full-d128"]
    source = _source(spec, {**params, "persistent": 1, "overlap": overlap})
    early = re.sub(r"^( *)(S, _, _ = warpgroup_mma_wait\(.*\n)( *# TL: Arrive k_free.*\n)( *mbarrier\.arrive\(k_free\.index\(.*\n)", r"\3\4\1\2",
                   source, flags=re.M)
    assert early.count("mbarrier.arrive(k_free") == source.count("mbarrier.arrive(k_free") == (2 if overlap else 1) and early != source
    _check_progress(_run(source, spec, 2, 300, 900, 2))
    with pytest.raises(AssertionError, match="refills Ks"):
        _check_progress(_run(early, spec, 2, 300, 900, 2))


def test_a_first_turn_never_passed_is_a_deadlock():
    """Ping-pong's turns are hardware named barriers: warpgroup 0 waits for its first turn until warpgroup 1 passes
    it up front. Without that pass each waits for the other (on a GPU: a hang the verifier's deadline stops)."""
    from attnforge.selftest.mutants import GLUON_MUTANTS

    spec, params = SPECS["full-d128"]
    source = _source(spec, {**params, "persistent": 1})
    (mutant,) = [m for m in GLUON_MUTANTS if m.name == "gluon_first_turn_never_passed"]
    _check_progress(_run(source, spec, 1, 300, 500, 1))
    with pytest.raises(AssertionError, match="deadlock"):
        _check_progress(_run(mutant.apply(source), spec, 1, 300, 500, 1))


@pytest.mark.parametrize("key", ["three-sets-d64", "four-sets-d64"])
def test_warpgroup_sets_pass_the_turn_round_and_the_last_passes_first(key):
    """With three (four) warpgroup sets each passes its turn to the next (the last to 0): the last one's up-front pass lets
    warpgroup 0 go first; without it every warpgroup waits for the one before it, and a pass back to the one before also stops."""
    from attnforge.selftest.mutants import GLUON_MUTANTS

    spec, params = SPECS[key]
    sets = params["warps"] // 4
    source = _source(spec, {**params, "persistent": 1, "ostage": 1})
    assert f"(_compute, ({sets - 1}, " in source and "if WG == SETS - 1:" in source
    runs = _run(source, spec, 2, 500, 700, 2)
    assert {r for roles in runs.values() for r in roles} == {"load", *(f"compute{wg}" for wg in range(sets))}
    _check_progress(runs)
    (mutant,) = [m for m in GLUON_MUTANTS if m.name == "gluon_first_turn_never_passed"]
    with pytest.raises(AssertionError, match="deadlock"):
        _check_progress(_run(mutant.apply(source), spec, 1, 300, 500, 1))


def test_three_warpgroups_score_the_tiles_before_split_without_the_mask_and_the_rest_with_it():
    """With three warpgroups the tile loop is two (compute._tile_loops): the replay's scores assert that no tile at or past
    split is scored without the Mask; the edge between the loops moved one tile late is caught."""
    spec, params = SPECS["three-sets-overlap"]
    source = _source(spec, {**params, "persistent": 1})
    assert source.count("SCALE_POSITIVE, False)") == 2 and "for j in range(gl.minimum(gl.maximum(lo, split - 1), hi - 1), hi - 1):" in source
    for sk in (700, 40):  # the tail tile last; one partial tile, the first (the overlap's scores before the loops)
        _check_progress(_run(source, spec, 1, 300, sk, 2))
    late = source.replace("gl.minimum(gl.maximum(lo, split - 1), hi - 1)", "gl.minimum(gl.maximum(lo, split), hi - 1)")
    first = source.replace("if lo < split:", "if lo <= split:")
    assert late != source and first != source
    for wrong, sk in ((late, 700), (first, 40)):
        with pytest.raises(AssertionError, match="scored without the Mask"):
            _run(wrong, spec, 1, 300, sk, 2)


def test_a_turn_passed_twice_before_it_is_taken_is_caught():
    """A hardware named barrier banks no second pass: warpgroup 1's up-front pass written twice completes warpgroup 0's
    barrier without it, and a later take waits for a pass that was spent (on a GPU: a hang, or the turns out of step)."""
    spec, params = SPECS["full-d128"]
    source = _source(spec, {**params, "persistent": 1})
    twice = re.sub(r"(# warpgroup 0 takes the first turn\n)(\s*_pass_turn\(WG\)\n)", r"\1\2\2", source, count=1)
    assert twice != source
    with pytest.raises(AssertionError, match="twice before it is taken"):
        _check_progress(_run(twice, spec, 1, 300, 500, 1))


def test_the_planner_walks_work_tiles_persistently_where_it_was_measured_faster():
    from attnforge.plan.hopper import hopper_candidates

    def first(**kw):
        return hopper_candidates(AttentionSpec(heads=16, kv_heads=16, dtype="bf16", **kw), H200)[0].params.get("persistent", 0)

    assert first(head_dim=128, seqlen_q=4096) == 1 and first(head_dim=64, seqlen_q=4096, causal=True) == 1
    # causal D = 128: persistent up to 1k keys with O out through Qs (without it, it spilled: bench/RESULTS.md runs 5, 8)
    assert first(head_dim=128, seqlen_q=1024, seqlen_k=1024, causal=True) == 1
    assert first(head_dim=128, seqlen_q=4096, seqlen_k=4096, causal=True) == 0
    assert first(head_dim=128, head_dim_v=64, seqlen_q=1024, seqlen_k=1024, causal=True) == 0
    causal_short = hopper_candidates(AttentionSpec(heads=16, head_dim=128, dtype="bf16", causal=True, seqlen_q=1024, seqlen_k=1024), H200)
    assert causal_short[0].params == {**causal_short[1].params, "qreg": 1}  # (Q in registers first: test_backend_gluon's)
    causal_short = causal_short[1:]
    assert [c.params.get("ostage") for c in causal_short[:2]] == [1, 2] and all("persistent" in c.params for c in causal_short[:2])
    assert all("persistent" not in c.params for c in causal_short[2:])  # the fallbacks storing O from registers
    assert first(head_dim=64, seqlen_q=16384, causal=True) == 0 and first(head_dim=256, seqlen_q=4096) == 0
    # D = 256 up to 1k keys: persistent with O out through the last K/V tile's slots (ostage = 3; with O through Qs it spills
    # persistent, bench/RESULTS.md run 10), the kernel of one program per work tile next
    d256 = hopper_candidates(AttentionSpec(heads=16, head_dim=256, dtype="bf16", seqlen_q=1024), H200)
    assert [(c.params.get("persistent", 0), c.params.get("ostage")) for c in d256[:2]] == [(1, 3), (0, 2)]
    assert hopper_candidates(AttentionSpec(heads=16, head_dim=128, dtype="bf16"), get_target("b200"))[0].params.get("persistent") is None


@pytest.mark.parametrize("kw, ostage", [
    (dict(head_dim=64), 1), (dict(head_dim=128, seqlen_q=4096, seqlen_k=4096), 1), (dict(head_dim=128, seqlen_q=4096, seqlen_k=4096, causal=True), 1),
    (dict(head_dim=128, seqlen_q=1024, seqlen_k=1024, window_left=100, window_right=0), 2),
    (dict(head_dim=128, seqlen_q=16384, seqlen_k=16384), 0),
    (dict(head_dim=128, seqlen_q=16384, seqlen_k=16384, causal=True), 1), (dict(head_dim=256, seqlen_q=16384, seqlen_k=16384), 2),
    (dict(head_dim=128, head_dim_v=64), 0), (dict(head_dim=256, head_dim_v=128), 0)
], ids=["d64", "d128-4k", "d128-4k-causal", "d128-window", "d128-16k", "d128-16k-causal", "d256-16k", "d128-dv64", "d256-dv128"])
def test_the_planner_stores_o_by_tma_where_it_was_measured_faster(kw, ostage):
    """``ostage``: 1 (a staging tile, beside a 4-slot ring, then the 3-slot one) at D = Dv = 64, and at D = Dv = 128 in place of the ring's third slot without a mask
    up to 4k keys (run 10) and under the causal mask at every length (run 11); 2 (through Qs, D = Dv) above 64 elsewhere
    but not at D = 128 past 4k keys without a mask (bench/RESULTS.md runs 7 and 8); never on sm_100. At D = 128 the staging tile's fallback is the 3-slot ring with O through Qs; the last
    fallbacks store O from registers, and are not persistent where only O through Qs made a persistent kernel fit."""
    from attnforge.plan.hopper import _FIRST, hopper_candidates

    cands = hopper_candidates(AttentionSpec(heads=16, kv_heads=16, dtype="bf16", **kw), H200)
    # the two-warpgroup chain: a three-warpgroup candidate after it (plan/hopper._three_warpgroups) is test_backend_gluon's
    cands = [c for i, c in enumerate(cands) if i == 0 or c.params["BM"] != 192]
    # the four-warpgroup first choice at D = 64 up to 1k rows (plan/hopper._four_warpgroups): test_backend_gluon's
    cands = [c for c in cands if c.params["BM"] != 256]
    cands = [c for c in cands if not c.params.get("chain")]  # (the chained kernel last at D = 64: test_the_planner_offers_...)
    cands = [c for c in cands if not c.params.get("qreg")]  # (Q in registers first where measured: test_backend_gluon's)
    assert cands[0].params.get("ostage", 0) == ostage
    if ostage == 1 and kw["head_dim"] == 128:
        assert cands[0].params["stages"] == 2 and cands[1].params["stages"] == _FIRST[128]["stages"]
        assert cands[1].params.get("ostage", 0) == (2 if kw["seqlen_k"] <= 4096 else 0)  # the 3-slot ring as measured before
        cands = cands[1:]
    if ostage == 1 and kw["head_dim"] == 64:  # without a mask a 4-slot ring beside the staging tile (run 12), then the 3-slot one with it
        assert cands[0].params["stages"] == 4 and cands[1].params == {**cands[0].params, "stages": _FIRST[64]["stages"]}
        cands = cands[1:]
        causal = hopper_candidates(AttentionSpec(heads=16, kv_heads=16, dtype="bf16", causal=True, **kw), H200)
        assert causal[0].params["stages"] == _FIRST[64]["stages"] and causal[0].params["ostage"] == 1  # not measured under a mask
    assert all("ostage" not in c.params for c in cands[1:])
    assert "ostage" not in hopper_candidates(AttentionSpec(heads=16, dtype="bf16", **kw), get_target("b200"))[0].params


def test_the_cache_plans_a_bucket_with_the_first_choice_for_the_calls_own_lengths(monkeypatch, tmp_path):
    """The cache builds one kernel per bucket, planned on a stand-in of 1k tokens; the Hopper form's first
    choice follows the KV length, so a call past 4k keys at D = 128 is planned (and keyed) with its own, and
    a choice equal to the stand-in's (the planner's or the tuning database's) shares the stand-in's entry."""
    import attnforge.cache as cache
    from attnforge.backends import get_backend
    from attnforge.errors import AttnforgeError
    from attnforge.tune import database

    monkeypatch.setenv("ATTNFORGE_TUNING", str(tmp_path / "none.json"))
    monkeypatch.setattr(database, "SHIPPED", tmp_path / "no-shipped.json")
    gluon = get_backend("gluon")
    spec = lambda s: AttentionSpec(heads=6, kv_heads=2, head_dim=128, dtype="fp16", causal=True, seqlen_q=s, seqlen_k=s)  # noqa: E731
    assert cache._first_choice(spec(1000), H200, gluon) is None  # the stand-in's own: the planner's order
    long = cache._first_choice(spec(9000), H200, gluon)  # past 1k keys the causal D = 128 kernel is not persistent
    assert long is not None and long.params.get("ostage") == 1 and "persistent" not in long.params and "Sk=9000" in long.reason
    assert cache._first_choice(spec(3000), H200, gluon).params == long.params
    assert len({cache.entry_key(spec(s), H200, backend=gluon) for s in (1000, 3000, 9000)}) == 2  # equal choices, one entry
    assert cache.entry_key(spec(1000), H200, backend=gluon) == cache.entry_key(spec(700), H200, backend=gluon)
    assert cache._first_choice(AttentionSpec(heads=6, kv_heads=2, head_dim=128, seqlen_q=1, seqlen_k=9000), H200, gluon) is None  # split-KV

    # a tuning entry that is the stand-in's own first choice: the same kernel, the same entry
    stand_in = cache._first_choice(spec(9000), H200, gluon)  # (not the stand-in's: recorded for the 16k bucket below)
    from attnforge.plan.hopper import hopper_candidates

    own = hopper_candidates(cache.spec_bucket(spec(1000)), H200)[0].params
    database.record(database.Entry(target="h200", backend="gluon", spec=database.spec_key(spec(9000)), seq=database.seq_bucket(spec(9000)),
                                   params=dict(own), ms=1.0, planner_ms=None, device="test", shape="-", measured="-", kind="prefill"))
    assert stand_in is not None and cache._first_choice(spec(9000), H200, gluon) is None
    assert cache.entry_key(spec(9000), H200, backend=gluon) == cache.entry_key(spec(1000), H200, backend=gluon)
    (tmp_path / "none.json").unlink()

    # the build plans with the candidate the key was made of
    seen = []

    def generate(bucket, target, out, **kw):
        seen.append((bucket.seqlen_k, kw["tuned"]))
        raise AttnforgeError("stop here")

    monkeypatch.setattr(cache, "generate", generate)
    with pytest.raises(AttnforgeError, match="stop here"):
        cache.build_or_load(spec(9000), H200, backend=gluon, root=tmp_path / "cache")
    assert seen[0][0] == 1024 and seen[0][1].params == long.params


def _edit(spec: AttentionSpec, old: str, new: str, params: dict[str, int] | None = None) -> str:
    text = hopper_source(spec, H200, {**(params or FIRST), "persistent": 1})
    assert old in text
    return text.replace(old, new)


@pytest.mark.parametrize("old, new, words", [
    ("Wait k_ready[j % stages] phase (j // stages) % 2\n        Compute GEMM Qs, Ks[j % stages]^T",
     "Wait k_ready[(j + 1) % stages] phase (j // stages) % 2\n        Compute GEMM Qs, Ks[j % stages]^T", "ring index must be the tile's position"),
    ("for j = 0 : cdiv(Sk, BN)\n        Wait k_free", "for j = 0 : cdiv(Sk, BN) - 1\n        Wait k_free", "walk the compute role's tiles"),
    ("target sm_90", "target sm_100", "sm_90 prefill kernel only"),
])
def test_a_persistent_program_the_translator_cannot_carry_over_is_refused(old, new, words):
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16")
    params = FIRST if "sm_100" not in new else dict(BM=128, BN=128, warps=8, stages=3)
    program = parse(_edit(spec, old, new, params), file="kernel.tl")
    with pytest.raises(TranslateError, match=words):
        translate(program, head_dim=64, head_dim_v=64)


def test_persistent_split_kv_decode_is_refused():
    from attnforge.plan.hopper import hopper_decode_source

    spec = AttentionSpec(heads=8, kv_heads=2, head_dim=64, dtype="bf16", seqlen_q=1, seqlen_k=1000)
    text = hopper_decode_source(spec, H200, dict(BM=64, BN=64, warps=4, stages=3, persistent=1))
    with pytest.raises(TranslateError, match="split-KV partial kernel"):
        translate(parse(text, file="kernel.tl"), head_dim=64, head_dim_v=64)


def test_the_gluon_backend_offers_persistent_on_sm_90_only():
    from attnforge.backends.gluon import GluonBackend

    assert "persistent" not in GluonBackend().refused_strategies(H200)
    assert "persistent" in GluonBackend().refused_strategies(get_target("b200"))
    assert {"tma", "ws"} <= set(GluonBackend().refused_strategies(H200))


O_VIA_KV = dict(BM=128, BN=64, warps=8, stages=2, pingpong=1, overlap=1, persistent=1, ostage=3)
O_VIA_KV_SPECS = {
    "full": AttentionSpec(heads=4, kv_heads=2, head_dim=256, dtype="bf16"),
    "causal": AttentionSpec(heads=4, kv_heads=2, head_dim=256, dtype="bf16", causal=True),
    "top-left": AttentionSpec(heads=2, kv_heads=1, head_dim=256, dtype="fp16", causal=True, causal_align="top_left"),
    "window": AttentionSpec(heads=4, kv_heads=2, head_dim=256, dtype="bf16", window_left=150, window_right=20),
}


@settings(max_examples=25, deadline=None)
@given(key=st.sampled_from(sorted(O_VIA_KV_SPECS)), B=st.integers(1, 3), Sq=st.integers(1, 700), Sk=st.integers(1, 900),
       programs=st.integers(1, 7), stages=st.sampled_from([2, 3]))
def test_o_through_the_kv_slots_keeps_the_protocol_under_any_mask(key, B, Sq, Sk, programs, stages):
    """ostage = 3 as the property test above, over masks whose row tiles start past key 0 or see no key at all."""
    spec = O_VIA_KV_SPECS[key]
    runs = _run(_source(spec, {**O_VIA_KV, "stages": stages}), spec, B, Sq, Sk, programs)
    tiles = _check_protocol(runs, stages, 128, 64, spec.heads // spec.kv_heads)
    assert tiles == {(m, b, h) for m in range(-(-Sq // 128)) for b in range(B) for h in range(spec.heads)}
    _check_progress(runs)


@pytest.mark.parametrize("causal, B, Sq, Sk, programs", [
    (False, 2, 600, 600, 3), (False, 1, 300, 64, 2), (False, 2, 129, 65, 5), (False, 3, 700, 900, 7), (False, 1, 1, 1, 1),
    (True, 2, 600, 300, 3),  # (bottom-right: the first row tiles see no key; their O leaves through Qs)
])
def test_o_through_the_last_kv_slots_keeps_the_protocol(causal, B, Sq, Sk, programs):
    """ostage = 3: each set's rows of O leave from its slot of the work tile's last K/V tile (set 0 K's, set 1 V's) after the
    other set's GEMM reading it is done, the slot goes back after the store has read it, Qs after the last QK^T GEMM; a work
    tile without keys stores through Qs. The roles replayed: every read is of the right fill, nothing deadlocks, no slot is
    written or refilled under a GEMM or a store reading it."""
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=256, dtype="bf16", causal=causal)
    source = _source(spec, O_VIA_KV)
    assert "o_t = Ks.index(" in source and "o_t = Vs.index(" in source
    runs = _run(source, spec, B, Sq, Sk, programs)
    stores = [e for r in runs.values() for role, ev in r.items() for e in ev if e[0] == "ostore"]
    assert {e[3] for e in stores} == ({"Ks", "Vs", "Qs"} if causal else {"Ks", "Vs"})
    tiles = _check_protocol(runs, 2, 128, 64, 2)
    assert tiles == {(m, b, h) for m in range(-(-Sq // 128)) for b in range(B) for h in range(4)}
    _check_progress(runs)


@pytest.mark.parametrize("edit, said", [
    # set 0 writes its O into the K slot without waiting for set 1's last QK^T GEMM (a race the GPU's order may hide)
    ((r"^\s*_pair_sync\(12\).*\n", ""), "writes O into Ks.* with no sync after compute1"),
    ((r"^\s*_pair_sync\(13\).*\n", ""), "writes O into Vs.* with no sync after compute0"),
    # the slot given back before the store from it has been waited for: the load warp may refill it under the store
    ((r"^(\s*)(tma\.store_wait\(0\)  # the store has read the slot\n)((?:\1.*\n){4})", r"\3\1\2"), "refills .* with no sync after the O store from it"),
    # set 0 says its last PV is done twice: the second pass is banked by nothing on the hardware
    ((r"^(\s*)(_pair_arrive\(13\).*\n)", r"\1\2\1\2"), "passes pair 13 twice before it is taken"),
])
def test_the_replay_catches_the_races_of_o_through_the_kv_slots(edit, said):
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=256, dtype="bf16")
    source = _source(spec, O_VIA_KV)
    bad = re.sub(*edit, source, count=1, flags=re.M)
    assert bad != source
    runs = _run(bad, spec, 2, 600, 600, 3)
    _check_protocol(runs, 2, 128, 64, 2)
    with pytest.raises(AssertionError, match=said):
        _check_progress(runs)


def test_a_work_tile_without_keys_gives_qs_back_only_after_its_store():
    """ostage = 3's fallback for a row tile that sees no key (O, zeros, through Qs): Qs given back before that store was
    waited for is caught (the check is per store: the set's other stores are from K/V slots)."""
    spec = O_VIA_KV_SPECS["causal"]
    source = _source(spec, O_VIA_KV)
    early = re.sub(r"^(\s*)(tma\.store_wait\(0\)  # the store has read Qs\n)(\1mbarrier\.arrive\(q_free, count=1\).*\n)", r"\3\1\2",
                   source, count=1, flags=re.M)
    assert early != source
    _check_protocol(_run(source, spec, 2, 600, 300, 3), 2, 128, 64, 2)
    with pytest.raises(AssertionError, match="Qs given back before O's store from it was waited for"):
        _check_protocol(_run(early, spec, 2, 600, 300, 3), 2, 128, 64, 2)


def test_a_q_refill_under_a_qk_gemm_still_in_flight_is_caught():
    """The first tile's QK^T GEMM left unwaited (one K/V tile a work tile): Qs goes back to the load warp while that GEMM,
    which reads Qs, is still in flight, and the next work tile's Q copy lands under it. The refill is checked against the
    GEMMs in flight for Qs as for K and V."""
    spec, params = SPECS["full-d128"]
    source = _source(spec, {**params, "persistent": 1})
    unwaited = re.sub(r"^\s*S, _, _ = warpgroup_mma_wait\(0, deps=\(S, q_t, k_t\)\)\n", "", source, count=1, flags=re.M)
    assert unwaited != source
    _check_progress(_run(source, spec, 1, 300, 64, 1))
    with pytest.raises(AssertionError, match=r"refills Qs\[\d\] while compute\d's QK\^T GEMM reading it is still in flight"):
        _check_progress(_run(unwaited, spec, 1, 300, 64, 1))
