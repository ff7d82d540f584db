"""The built-in planner's Hopper form (sm_90, and sm_100 without the schedules): the same attention as ``builtin``'s prefill program,
written for a warp-specialised kernel. A load role streams K and V by TMA into a ring of ``stages``
shared-memory slots, each slot guarded by a "ready" barrier per tensor (the copy landed) and a
"free" barrier per tensor (the compute warpgroups' GEMMs are done reading it); the compute role issues asynchronous GEMMs
straight from shared memory and runs the online softmax on the accumulators.

Two schedule parameters say how the compute role's time overlaps (the interpreter ignores them;
the Gluon translator honours them): ``pingpong = 1`` splits the compute warps into warpgroups
that own a share of the BM rows each and take turns issuing their GEMMs, so one warpgroup's softmax
runs while another's GEMMs hold the tensor cores; ``overlap = 1`` issues the next tile's QK^T GEMM
before the softmax of the current one (FlashAttention-3's intra-warpgroup overlap). On sm_100 both
stay off: the gluon backend maps the same statements to tcgen05 MMAs into tensor memory. A third,
``persistent = 1``, has one program per SM walk the work tiles (``_persistent`` says where it is on).

Decode (and packed small-Sq GQA) is ``builtin``'s split-KV pair with the partial kernel in this form:
each split's K/V tiles stream through the ring into one compute warpgroup (docs/TL.md section 11.7).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..spec import AttentionSpec
from ..targets import Target
from .builtin import (EPILOGUE, Candidate, Plan, checked_plans, combine_kernel, full_tiles, global_views, keep_condition, kernel_header,
                      packs_gqa, score_mods, split_kv_layout, split_reason, visible_tiles)

# Measured on the H200 (bench/RESULTS.md, 2026-12-01): the best schedule per head dim on the
# 4k-token rows, with the ring as deep as shared memory allows at that tile. At D = 256 the overlap
# needs K's slot given back apart from V's (2026-12-02 run 10: +6-10% against the same tile without it).
_FIRST = {
    64: dict(BM=128, BN=128, warps=8, stages=3, pingpong=1, overlap=1),
    128: dict(BM=128, BN=128, warps=8, stages=3, pingpong=1, overlap=1),
    256: dict(BM=128, BN=64, warps=8, stages=2, pingpong=1, overlap=1),
}


def _persistent(spec: AttentionSpec, d: int, o_through_q: bool) -> bool:
    """Whether the first choice walks the work tiles persistently (sm_90; docs/TL.md section 11.5).
    Measured on the H200 against the same kernel launched one program per tile (bench/RESULTS.md,
    2026-12-01 run 5): faster without a mask whose bounds move with the row tile at D <= 128 (+1-9%)
    and at D = 256 up to 1k keys (+4-6% without the overlap, which it now has; neutral at 4k); under a causal mask at D = 64 up to 4k keys
    (+5-24%), slower at 16k keys and at D = 256 (a static share of unequal tiles), and at D = 128 it
    spilled (the compute warpgroups' registers were full). With O out through Q's tile (``o_through_q``: ``ostage = 2``)
    and the mask's key bounds folded per row, the causal D = 128 kernel spills no more; up to 1k keys it is then +3-4%
    against the same kernel launched per tile (run 8), at 4k and 16k keys 5% and 15-16% slower (the GQA 4k row: +4%). Since run
    11 that 1k kernel stores O from a staging tile of its own (``_o_staged``), measured persistent; ``o_through_q`` still
    says where O through Qs would be the alternative (up to 4k keys), which is where persistence was measured."""
    if spec.is_decode or spec.windowed:
        return False
    if spec.causal:
        return d <= 64 and spec.seqlen_k <= 4096 or d == 128 and spec.seqlen_k <= 1024 and o_through_q
    # (At D = 256 the first choice overlaps the next QK^T with the softmax, and persistent it spills: 8 bytes, run 10. The
    # persistent forms that do not spill ran slower, run 17: without the overlap 0.93x its speed (geomean, 8 rows), with O from
    # registers 0.94x (the 4 unmasked rows; it spills under the causal mask).)
    return d <= 128


def _o_staged(spec: AttentionSpec) -> bool:
    """Whether O goes out through a staging tile of its own and a TMA store (``ostage = 1``, docs/TL.md section 11.5).
    At D = Dv = 64 it fits beside the 3-slot ring (bench/RESULTS.md, 2026-12-01 run 7: a work tile's fixed cost
    2.1 -> 0.8 us, +15% at 1k tokens). At D = Dv = 128 the ring gives a slot up for it (K's slots given back after
    QK^T keep a 2-slot ring fed; 2026-12-02 run 10, against the 3-slot ring storing O through Qs, without a mask:
    +9% at 1k x 1k, +3-5% at 1k x 2-4k keys, +1% at 4k x 4k; a work tile's fixed cost 2.8 -> 1.5 us). Under the
    causal mask (run 11, against the tuning database's kernels, 3 slots with O through Qs up to 4k keys, from
    registers at 16k): +6-8% at 1k, +2% at 4k, +1-5% at 16k, GQA 32/8 at 4k even. Not measured under a window, nor
    past 4k keys without a mask: those keep the earlier choice."""
    if spec.is_decode or spec.head_dim != spec.head_dim_v:
        return False
    if spec.head_dim == 64:
        return True
    windowed = spec.windowed
    return spec.head_dim == 128 and not windowed and (spec.causal or spec.seqlen_k <= 4096)


# D = Dv = 64 with O's staging tile and no mask: the ring takes a fourth slot (164 KiB of shared memory with Q and
# the tile). Measured on the H200 against the 3-slot ring (bench/RESULTS.md, 2026-12-02 run 12, bf16, persistent):
# +4.8% at 1k x 1k, +3.2% at 1k x 2k, +1.2% at 1k x 4k, +1.8% at 4k x 4k; a work tile's fixed cost 1.62 -> 1.10 us.
# Under a mask (causal, window, mask_mod) not measured: 3 slots, as before.
_D64_STAGED_STAGES = 4


def _masked(spec: AttentionSpec) -> bool:
    return spec.causal or spec.windowed or spec.mask_mod is not None


def _o_through_q(spec: AttentionSpec) -> bool:
    """Whether O goes out through Q's shared tile (``ostage = 2``, docs/TL.md section 11.5) where a staging tile of
    its own does not fit (D = Dv above 64). Measured on the H200 against the same kernels storing O from registers
    (bench/RESULTS.md, 2026-12-02 run 8; every one verified by the gate first): +4 to +15% on every D = 256 row;
    at D = 128 +2 to +12% at 1k keys, -2 to +6% at 4k; at D = 128 and 16k keys -2 to -4% without a mask and -2 to
    +2% causal (the store is a small share of a long row, and Q's slot is held until O has gone out)."""
    if spec.is_decode or spec.head_dim != spec.head_dim_v or not 64 < spec.head_dim <= 256:
        return False
    return spec.head_dim > 128 or spec.seqlen_k <= 4096


def _three_warpgroups(spec: AttentionSpec, first: dict[str, int]) -> tuple[Candidate, bool] | None:
    """The candidate of three compute warpgroups in ping-pong (BM = 192, 12 warps; docs/TL.md section 11.5) over the
    two-warpgroup first choice ``first``, and whether it comes first, where one compiles for sm_90a without a spill at
    160 registers a thread and may pay: past 1k query rows, without a window, a mask_mod or a score modifier (a
    window's two bounds a row spill 112 bytes at D = 64; softcap's kernel 16, a score_mod's 200). None elsewhere. First
    where it was measured faster, else last (generate's fallbacks stay the measured two-warpgroup ones); the tuner times
    it second either way (``tune.search.hopper_order``), against two warpgroups. Measured on the H200, each kernel
    verified first:
    - D = Dv = 64 without a mask: first (bench/RESULTS.md 2026-12-03 run 14, call 2: 4k full +11% / +14%, bf16 / fp16,
      16k full +13-15%, 1k full -2% with a kernel that spilled 8 bytes; run 15 call 2: the tuner kept three at 4k full).
    - D = Dv = 64 under the causal mask past 4k keys (a program per work tile; its Mask compares the keys' indices with
      each row's bound, compute._keep, and spills none): first (run 15 call 2, head to head at 16k: 2.294 against
      2.500 ms fp16, 2.236 against 2.443 bf16). Up to 4k keys, where the two-warpgroup kernel is persistent: last, one
      program per work tile (persistent at BM = 192 it spills 32 bytes; bench/gluon_spills.py, 4k x 4k); with that Mask,
      run 18 call 8 (3 rounds, 4 x 32 x 4k x 4k): 0.983x fp16, 0.971x bf16 the shipped two-warpgroup kernel's speed (run 14's
      three-warpgroup kernels there, which spilled 40 bytes, were 8-11% slower persistent, 4-5% a program per work tile).
    - D = Dv = 128 without a mask: last, with BN = 64 and a 4-slot ring (BN = 128 with the overlap spills 360 bytes,
      BN = 64 with 3 slots 48 at 16k; 4 slots none, 225 KiB of shared memory with O's staging tile up to 4k keys); run 15
      call 2: slower than two warpgroups at 4k (fp16) and 16k."""
    if spec.is_decode or spec.windowed or spec.mask_mod is not None or score_mods(spec) or spec.seqlen_q <= 1024:
        return None
    d = max(spec.head_dim, spec.head_dim_v)
    params = {**first, "BM": 192, "warps": 12}
    if (spec.head_dim, spec.head_dim_v) == (64, 64):
        if not (spec.causal and first.get("persistent")):
            return Candidate(params, _hopper_reason(d, params)), True
        params.pop("persistent")
        return Candidate(params, _hopper_reason(d, params) + ", one program per work tile"), False
    if (spec.head_dim, spec.head_dim_v) == (128, 128) and not spec.causal:
        params.update(BN=64, stages=4)
        return Candidate(params, _hopper_reason(d, params)), False
    return None


# Four compute warpgroups at D = Dv = 64 (BM = 256, 16 compute warps at 112 registers a thread, BN = 64: BN = 128 does not
# fit them), with the overlap, persistent, 6 ring slots beside O's staging tile (164 KiB).
_FOUR_SETS = dict(BM=256, BN=64, warps=16, stages=6)


def _four_warpgroups(spec: AttentionSpec, target: Target, first: dict[str, int]) -> Candidate | None:
    """The first choice of four compute warpgroups in ping-pong (``_FOUR_SETS`` over the two-warpgroup first choice
    ``first``, without Q in registers: with it the kernel spills 96 bytes): on sm_90 at D = Dv = 64 without a mask, a
    mask_mod or a score modifier, 512 to 1024 query rows against at most 1024 keys, where 256-row tiles pad Sq no more than
    128-row ones do (Sq = 512, 641-768, 897-1024). Timed at 512 x 512 and 1k x 1k only; the lengths between, and fewer keys
    than query rows, are taken by the same count of tiles, not measured. Each warpgroup's softmax has three others' GEMMs to hide under, and 1k
    rows are four whole tiles (three warpgroups' 192 rows pad them by an eighth). Measured on the H200 against the
    two-warpgroup kernel (bench/RESULTS.md, 2026-12-04 run 21, each verified first, 3 rounds, 32 heads): 16 x 1k x 1k
    +4.0 / +3.2% (fp16 / bf16, call 4), +3.9 / +6.3% (call 5); 32 x 512 x 512 +3.3 / +3.3%; at 8 x 2k x 2k 4% slower than
    three warpgroups, and 4-8% at 4k and 16k keys (call 4). Under the causal mask it spills 8 bytes with the overlap and
    runs 14-24% slower without it (call 4)."""
    if (target.cc[0] != 9 or (spec.head_dim, spec.head_dim_v) != (64, 64) or spec.is_decode or _masked(spec) or score_mods(spec)
            or not 512 <= spec.seqlen_q <= 1024 or spec.seqlen_k > 1024 or first.get("ostage") != 1):
        return None
    if -(-spec.seqlen_q // 256) * 256 > -(-spec.seqlen_q // 128) * 128:  # 256-row tiles would pad more rows
        return None
    params = {**first, **_FOUR_SETS}
    params.pop("qreg", None)
    return Candidate(params, _hopper_reason(64, params))


def _o_via_kv(spec: AttentionSpec, target: Target, first: dict[str, int]) -> Candidate | None:
    """The first choice at D = Dv = 256 without a mask or a score modifier up to 1k keys: the two-warpgroup kernel walked
    persistently with O out through the work tile's last K/V ring slots (``ostage = 3``, docs/TL.md section 11.5), so that
    Qs goes back to the load warp after the last QK^T GEMM and the next work tile's Q loads under this one's last PV GEMM
    and epilogue (with O through Qs the load warp's next copy waits for O's store: Nsight Compute had warpgroup 1 at its
    wait for Q a tenth of its time at 1k keys). Measured on the H200 (bench/RESULTS.md, 2026-12-04 run 22 call 4, a text
    transform of the persistent kernel, every kernel verified first, 3 rounds) over the shipped kernel (O through Qs, one
    program per work tile): 1k x 1k +4.2% fp16, +6.1% bf16; 4k x 4k +0.6 / -0.2%; 16k even; under the causal mask -5.8 /
    -0.6% at 1k (the persistent causal kernel spills 32 bytes, and at 16k it runs at two thirds). From the translator (call 5)
    +6.4 / +5.5% at 1k x 1k. Past 1k keys: not offered (the tuner's neighbours may time it)."""
    if (target.cc[0] != 9 or (spec.head_dim, spec.head_dim_v) != (256, 256) or spec.is_decode or _masked(spec) or score_mods(spec)
            or spec.seqlen_k > 1024 or first.get("ostage") != 2 or first["BN"] * 2 != first["BM"]):
        return None
    params = {**first, "persistent": 1, "ostage": 3}
    return Candidate(params, _hopper_reason(256, params))


def _chained(spec: AttentionSpec, target: Target, first: dict[str, int]) -> bool:
    """Whether the planner offers the first choice with its work tiles chained (``chain = 1``, docs/TL.md section 11.5:
    the next work tile's first QK^T GEMM in the turn of this one's last PV GEMM, Q in a slot per tile parity), as its
    last candidate: on sm_90, for the persistent two-warpgroup kernel at D = Dv = 64 without a mask (its tile loop's
    bounds the same for every work tile). Compiled for sm_90a it spills nothing there (180 KiB of shared memory with the
    4-slot ring and O's staging tile); at D = 128 it spilled 16 bytes (the translator takes two warpgroups only). Measured on
    the H200 against the same kernel unchained (bench/RESULTS.md, 2026-12-03 run 16, each verified first): 0.996x fp16,
    0.987x bf16 at 16 x 32 x 1k x 1k: the fixed cost of a work tile is not the tensor cores left idle between tiles."""
    return (target.cc[0] == 9 and (spec.head_dim, spec.head_dim_v) == (64, 64) and not _masked(spec)
            and first.get("persistent") == 1 and first.get("overlap") == 1 and first["warps"] == 8 and first.get("ostage") != 2)


# sm_100 (compile-checked on the CPU, never timed: no Blackwell GPU at hand): the same tiles, the tile
# loop as written (the wgmma schedules are not mapped to tcgen05). S and a 16-bit P live in tensor
# memory; 4 warps hold a 128-column S tile plus O's rescale without spilling up to D = 64 (255
# registers), 8 warps above (168; with 4 warps D = 128 spills 576 bytes).
_FIRST_SM100 = {
    64: dict(BM=128, BN=128, warps=4, stages=3),
    128: dict(BM=128, BN=128, warps=8, stages=3),
    256: dict(BM=128, BN=64, warps=8, stages=2),
}


HOPPER_PARAMS = frozenset({"BM", "BN", "warps", "stages", "pingpong", "overlap", "persistent", "chain", "ostage", "qreg", "occupancy"})


def _q_in_registers(spec: AttentionSpec, first: dict[str, int]) -> bool:
    """Whether the first choice keeps Q in registers for its QK^T GEMMs (``qreg = 1``, docs/TL.md section 11.5): each QK^T
    GEMM then reads only K from shared memory, and a persistent kernel's next work tile's Q loads under this one's whole
    tile loop. Measured on the H200 against the same kernels reading Q from Qs (bench/RESULTS.md, 2026-12-04 run 18 call 1,
    bf16 and fp16, each verified first), where the two-warpgroup first choice is persistent at D = Dv <= 128: +4 to +6% at
    1k keys (D = 64 and 128, causal and not), +1% at D = 128 and 16k keys; at 4k keys even (call 1: D = 128 full +1 / +3%,
    GQA -2%, D = 64 causal -2 / -1%; call 4, 3 rounds: +1.0 / -0.6%, GQA +0.8%, D = 64 causal -0.4 / +0.4%), so left off
    under a mask past 1k keys, where call 1 had it slower (the causal D = 128 kernels of one program per work tile, which
    spilled 8 bytes until their Mask compared the keys' indices, compute._by_key_index: call 5, 3 rounds, +1.1% at 16k keys,
    -1.3 / +0.3% at 4k; the tuning database takes the 16k ones). Not where it spills (three warpgroups at D = 64: 88-104
    bytes; the persistent D = 128 kernel with ALiBi: 488, 64 without qreg), nor at
    D = 256 (Q's 64 registers a thread do not fit beside the accumulator: the checker refuses it), nor with a score
    modifier or a mask_mod."""
    return (first.get("persistent") == 1 and first["warps"] == 8 and first.get("ostage") != 2 and spec.head_dim == spec.head_dim_v <= 128
            and not score_mods(spec) and spec.mask_mod is None and not (_masked(spec) and spec.seqlen_k > 1024))


def _hopper_reason(d: int, p: dict[str, int]) -> str:
    """Why the planner writes an sm_90 Hopper-form candidate with parameters ``p``, in words, from ``p`` alone."""
    sets = {2: "two", 3: "three", 4: "four"}[p["warps"] // 4]  # (the sm_90 form is in ping-pong: 8, 12 or 16 warps)
    who = "two compute warpgroups" if sets == "two" else f"{sets} compute warpgroups (BM = {p['BM']}, BN = {p['BN']})"
    why = f"Hopper form for head dim {d}: {who} in ping-pong, a {p['stages']}-slot K/V ring"
    if p.get("overlap"):
        why += ", the next QK^T GEMM issued before the softmax"
    if p.get("persistent"):
        why += ", one program per SM walking the work tiles (the next tile's loads under this one's epilogue)"
    if p.get("chain"):
        why += ", the next work tile's first QK^T GEMM in the turn of this one's last PV GEMM (Q in a slot per tile parity)"
    if p.get("ostage") == 1:  # (at D = 128 the 2-slot ring gave its third slot to the staging tile)
        why += ", O stored by TMA from a shared tile" + (" (in place of a third ring slot)" if d > 64 and p["stages"] == 2 else " beside the ring")
    elif p.get("ostage") == 2:
        why += ", O stored by TMA from the warpgroup's rows of Q's shared tile"
    elif p.get("ostage") == 3:
        why += ", O stored by TMA from the last K/V tile's ring slots (Q's tile back to the load warp after the last QK^T GEMM)"
    if p.get("qreg"):
        why += ", Q in registers for every QK^T GEMM (Qs given back to the load warp once read)"
    return why


def hopper_candidates(spec: AttentionSpec, target: Target) -> list[Candidate]:
    """Parameters for the Hopper form, best first; fallbacks take ring slots away, then narrow BN."""
    d = max(spec.head_dim, spec.head_dim_v)
    key = next(k for k in sorted(_FIRST) if d <= k) if d <= 256 else 256
    if target.cc[0] == 10:
        first = dict(_FIRST_SM100[key])
        why = f"Hopper form for head dim {d} on {target.sm}: tcgen05 MMAs into tensor memory, a {first['stages']}-slot K/V ring"
    else:
        first = dict(_FIRST[key])
        if _persistent(spec, d, _o_through_q(spec)):
            first["persistent"] = 1
        # O through a staging tile and a TMA store (docs/TL.md section 11.5) where it was verified and timed faster
        # (_o_staged; at D = 128 in place of a ring slot), else through Q's tile (_o_through_q). The checker refuses
        # a tile that does not fit; the next candidates go back to the ring as measured without it.
        if _o_staged(spec):
            if spec.head_dim > 64:
                first["stages"] = 2
            elif not _masked(spec):
                first["stages"] = _D64_STAGED_STAGES
            first["ostage"] = 1
        elif _o_through_q(spec):
            first["ostage"] = 2
        why = _hopper_reason(d, first)
    out = [Candidate(first, why)]
    if target.cc[0] == 9 and _q_in_registers(spec, first):  # (the fallbacks are the kernels measured before it, Q read from Qs)
        out = [Candidate({**first, "qreg": 1}, _hopper_reason(d, {**first, "qreg": 1})), Candidate(first, f"{why}; Q read from Qs by each QK^T GEMM (as measured before qreg)")]
    chained = {**first, "chain": 1} if _chained(spec, target, first) else None  # (last: measured no faster)
    three, leads = (_three_warpgroups(spec, first) if target.cc[0] == 9 else None) or (None, False)
    if leads:  # first where measured faster, else after the two-warpgroup fallbacks (hopper_order times it second)
        out.insert(0, three)
        three = None
    four = _four_warpgroups(spec, target, first)
    if four is not None:  # first: faster where timed (512 and 1k rows), offered where it covers Sq in as few padded rows
        out.insert(0, four)
    via_kv = _o_via_kv(spec, target, first)
    if via_kv is not None:  # first: faster where timed (1k keys); the kernel of O through Qs its fallback
        out.insert(0, via_kv)
    if first.get("ostage") == 1 and first["stages"] > _FIRST[key]["stages"]:  # D = 64: the ring's slot beside the staging tile back
        first = {**first, "stages": _FIRST[key]["stages"]}
        out.append(Candidate(dict(first), f"a {first['stages']}-slot ring beside O's staging tile"))
    if first.get("ostage") == 1 and first["stages"] < _FIRST[key]["stages"]:  # D = 128: the staging tile's slot back to the ring
        first = {**first, "stages": _FIRST[key]["stages"]}
        del first["ostage"]
        if _o_through_q(spec):
            first["ostage"] = 2
        why = "the ring's third slot back" + (", O stored by TMA from Q's shared tile" if first.get("ostage") else "")
        out.append(Candidate(dict(first), why))
    if first.get("ostage"):
        first = {k: v for k, v in first.items() if k != "ostage"}
        why = "O stored from registers (no staging tile in shared memory)"
        if first.get("persistent") and not _persistent(spec, d, False):  # (persistent only with O out through Qs: without it, it spilled)
            first.pop("persistent")
            why += ", one program per work tile"
        out.append(Candidate(dict(first), why))
    p = dict(first)
    while p["stages"] > 2 or p["BN"] > 64:
        if p["stages"] > 2:
            p = {**p, "stages": p["stages"] - 1}
            why = "one ring slot fewer to fit shared memory"
        else:
            p = {**p, "BN": p["BN"] // 2, "stages": first["stages"]}
            why = "narrower K/V tiles to fit shared memory and registers"
        out.append(Candidate(dict(p), why))
    return out + ([three] if three else []) + ([Candidate(chained, _hopper_reason(d, chained))] if chained else [])


def _ring(j: str, first: str) -> tuple[str, str, str]:
    """Slot, fill phase and free phase of tile ``j`` when the loop's tiles start at ``first``: the
    n-th use of a slot waits for the n-th fill (phase n % 2) and for the (n-1)-th release (a slot
    starts free, so its first wait is on phase 1)."""
    t = j if first == "0" else f"({j} - ({first}))"
    return f"{t} % stages", f"({t} // stages) % 2", f"({t} // stages + 1) % 2"


def _compute_loop(spec: AttentionSpec, bounds: str, first: str, masked: bool, packed: bool = False, k_apart: bool = True) -> list[str]:
    """The compute role's loop over K/V tiles; ``k_apart``: K's slot given back after QK^T (``_KV_BARRIERS``)."""
    slot, full, _ = _ring("j", first)
    body = [f"    for j = {bounds}",
            f"        Wait k_ready[{slot}] phase {full}",
            f"        Compute GEMM Qs, Ks[{slot}]^T and get S async",
            "        Wait GEMM S",
            *([f"        Arrive k_free[{slot}]"] if k_apart else []),
            "        Compute Multiply S, scale"]
    body += [f"        Compute ScoreMod S with {m}" for m in score_mods(spec, packed)]
    if masked:
        body.append(f"        Compute Mask S keep {keep_condition(spec, packed)}")
    body += ["        Compute OnlineSoftmax S state m_i, l_i rescale O_acc and get P",
             "        Compute Cast P to qkv",
             "        Reshape P from mma_c to mma_a",
             f"        Wait v_ready[{slot}] phase {full}",
             f"        Compute GEMM P, Vs[{slot}] and accumulate O_acc async",
             "        Wait GEMM O_acc",
             f"        Arrive {'v_free' if k_apart else 'kv_free'}[{slot}]",
             "    end"]
    return body


def hopper_source(spec: AttentionSpec, target: Target, params: dict[str, int]) -> str:
    """The Hopper-form TL program for a prefill ``spec`` with ``params`` (see ``hopper_candidates``)."""
    first, last = visible_tiles(spec)
    full = full_tiles(spec)
    lines = [f"# Forward attention for {spec.describe()}, planned for {target.name} by attnforge's built-in planner (Hopper form).",
             "# A load warp streams K and V by TMA into a ring of `stages` shared-memory slots; the compute warpgroups",
             "# wait for a slot, run both GEMMs from shared memory asynchronously and give K's slot back after QK^T, V's after PV.",
             # a schedule switch that is off is left out (parameters are positive)
             *kernel_header("attn_fwd", spec, target, {k: v for k, v in params.items() if v}), "grid m : cdiv(Sq, BM), b : B, h : Hq", "",
             *global_views("o[b, h]", "lse[b, h]"),
             "Allocate Qs in shared (BM, D) : qkv", *_KV_RINGS,
             "Allocate q_ready in barrier", *_KV_BARRIERS,
             "role compute warps 0 : warps", *_ROW_STATE,
             "    Wait q_ready phase 0"]
    if full is not None and first == "0":
        lines += _compute_loop(spec, f"0 : {full}", first, masked=False)
        lines += _compute_loop(spec, f"{full} : {last}", first, masked=True)
    else:
        lines += _compute_loop(spec, f"{first} : {last}", first, masked=True)
    lines += [f"    {line}" for line in EPILOGUE] + ["end"] + _load_role(first, last, q_async=True)
    return "\n".join(lines) + "\n"


_KV_RINGS = ["Allocate Ks in shared (BN, D) : qkv ring stages", "Allocate Vs in shared (BN, Dv) : qkv ring stages"]
# K's slot and V's are given back apart: K's once the QK^T GEMMs reading it are done, so that the load warp refills it
# while the tile's softmax and PV GEMM run. Measured on the H200 (bench/RESULTS.md, 2026-12-02 run 10): with one
# barrier for both, a 2-slot ring starved FlashAttention-3's overlap at D = 256 (0.76-0.78x cuDNN); apart, 0.98-1.01x.
# Decode's partial kernel keeps one free barrier for both: measured on the H200 with K's given back apart (run 10), the
# 32k-key decode row fell from 0.96x to 0.89x cuDNN's GB/s (the 4k-key one did not move); why was not looked into.
_KV_READY = ["Allocate k_ready in barrier (stages)", "Allocate v_ready in barrier (stages)"]
_KV_BARRIERS = [*_KV_READY, "Allocate k_free in barrier (stages)", "Allocate v_free in barrier (stages)"]
_KV_BARRIERS_ONE_FREE = [*_KV_READY, "Allocate kv_free in barrier (stages)"]
_ROW_STATE = ["    Allocate m_i in register (BM) : acc = -inf",
              "    Allocate l_i in register (BM) : acc = 0",
              "    Allocate O_acc in register (BM, Dv) : acc = 0"]


def _load_role(first: str, last: str, q_async: bool, k_apart: bool = True) -> list[str]:
    """The load warp: Q once by TMA (``q_async``; else the compute role gathers it), then K and V
    of tiles ``first`` .. ``last`` - 1 into their rings, each slot refilled once it is given back
    (``k_apart``: K's and V's slots each by their own barrier)."""
    slot, _, free = _ring("j", first)
    return ["role load warps warps : warps + 1 regs 24",
            *(["    Copy Q (BM, D) at [m, 0] from global to shared Qs async q_ready"] if q_async else []),
            f"    for j = {first} : {last}",
            f"        Wait {'k_free' if k_apart else 'kv_free'}[{slot}] phase {free}",
            f"        Copy K (BN, D) at [j, 0] from global to shared Ks[{slot}] async k_ready[{slot}]",
            *([f"        Wait v_free[{slot}] phase {free}"] if k_apart else []),
            f"        Copy V (BN, Dv) at [j, 0] from global to shared Vs[{slot}] async v_ready[{slot}]",
            "    end",
            "end"]


# ---------------------------------------------------------------------- decode (split-KV)

# Decode is memory-bound: what counts is K/V bytes in flight. The ring takes about this much shared
# memory. With Q and the barriers a program then holds 104-128 KiB, one per SM (the split rule
# launches about two per SM): measured slower than Triton's decode on short KV (bench/RESULTS.md).
_DECODE_RING_BYTES = 96 * 1024
_DECODE_MAX_STAGES = 8
# The split count aims at one program per SM, not the portable form's two: with its ring the one program keeps
# enough K/V in flight, and fewer splits are less merge work. Measured on the H200 (bench/RESULTS.md, 2026-12-02
# run 12, two device calls alike): 8 x 32/8 x 32k keys 0.961x -> 0.980x cuDNN (NSPLIT 8 -> 4: the partial kernel
# 248 -> 243 us, the combine 7.5 -> 5.0 us); 64 x 32/8 x 4k keys takes one split either way.
_DECODE_PER_SM = 1
# Two programs an SM (TL ``param occupancy = 2``: each at 128 registers a thread, its ring near 64 KiB): measured on
# the H200 (bench/RESULTS.md, 2026-12-02 run 13, one call, the split rule as above), BN = 64, 2 slots against the
# one-program kernel's 3: 64 x 32/8 x 4k keys 0.984x -> 0.998x cuDNN, 8 x 32/8 x 32k keys 0.994x -> 1.004x.
_DECODE_OCCUPANCY = 2
_DECODE_SHARED_RING_BYTES = 64 * 1024


def hopper_decode_candidates(spec: AttentionSpec, target: Target) -> list[Candidate]:
    """Split-KV decode in the Hopper form: one compute warpgroup (wgmma M = 64 over the rows, packed
    GQA's query heads x positions where the group has several), two programs an SM, each with a
    K/V ring near 64 KiB; then one program an SM with a ring near 96 KiB; fallbacks take ring slots
    away, then narrow BN."""
    bn = 64 if max(spec.head_dim, spec.head_dim_v) <= 128 else 32
    per_stage = bn * (spec.head_dim + spec.head_dim_v) * 2  # fp16 / bf16 K and V tiles
    stages = max(2, min(_DECODE_MAX_STAGES, _DECODE_RING_BYTES // per_stage))
    shared_stages = max(2, min(_DECODE_MAX_STAGES, _DECODE_SHARED_RING_BYTES // per_stage))
    packed = packs_gqa(spec)
    rows = spec.group_size * spec.seqlen_q if packed else spec.seqlen_q
    programs = spec.batch * (spec.kv_heads if packed else spec.heads) * -(-rows // 64)
    what = f"packed GQA ({spec.group_size} query heads x Sq={spec.seqlen_q} as the rows)" if packed else "decode"
    why = (f"Hopper-form {what}: {_DECODE_OCCUPANCY} programs an SM, in each a load warp keeps a {shared_stages}-slot K/V ring in flight "
           f"for one compute warpgroup (wgmma M = 64); " + split_reason(spec, target, programs, "B*Hkv" if packed else "B*Hq", bn, _DECODE_PER_SM))
    out = [Candidate(dict(BM=64, BN=bn, warps=4, stages=shared_stages, occupancy=_DECODE_OCCUPANCY), why),
           Candidate(dict(BM=64, BN=bn, warps=4, stages=stages), f"one program an SM with a {stages}-slot K/V ring")]
    p = dict(out[1].params)
    while p["stages"] > 2 or p["BN"] > 32:
        p = {**p, "stages": p["stages"] - 1} if p["stages"] > 2 else {**p, "BN": p["BN"] // 2, "stages": stages}
        out.append(Candidate(dict(p), "a smaller K/V ring to fit shared memory"))
    return out


def hopper_decode_source(spec: AttentionSpec, target: Target, params: dict[str, int]) -> str:
    """Split-KV decode in the Hopper form: the partial kernel (program s of a row block takes the
    s-th share of the visible K/V tiles through the ring and stores its normalised O and LSE in
    scratch) and the combine kernel (the portable form: it only reads scratch), as ``builtin``'s."""
    layout = split_kv_layout(spec, packs_gqa(spec), _DECODE_PER_SM)
    lines = [f"# Decode attention for {spec.describe()}, planned for {target.name} by attnforge's built-in planner (Hopper form).",
             "# Split-KV: NSPLIT programs per row block (chosen at launch) each stream a share of the visible K/V tiles",
             "# through a TMA ring into one compute warpgroup and store a partial output and log-sum-exp; the second",
             "# kernel merges the shares with the online softmax."
             + (" Packed GQA: the rows are a K/V head's query heads x positions." if layout.packed else ""),
             *kernel_header("attn_decode_partial", spec, target, params, launch=layout.launch), layout.grid(rows_first=True), *layout.scratch, "",
             *global_views(layout.o_part, layout.lse_part, packed=layout.packed),
             "Allocate Qs in shared (BM, D) : qkv", *_KV_RINGS, *_KV_BARRIERS_ONE_FREE,
             "role compute warps 0 : warps", *_ROW_STATE,
             "    Copy Q (BM, D) at [m, 0] from global to shared Qs",  # a few rows (packed: gathered head by head): no TMA box
             *_compute_loop(spec, f"{layout.lo} : {layout.hi}", layout.lo, masked=True, packed=layout.packed, k_apart=False),
             *(f"    {line}" for line in EPILOGUE), "end",
             *_load_role(layout.lo, layout.hi, q_async=False, k_apart=False),
             "", *combine_kernel(spec, target, params, layout)]
    return "\n".join(lines) + "\n"


def offers_tile(spec: AttentionSpec, target: Target, params: dict[str, int]) -> bool:
    """Whether the planner offers ``spec`` a prefill candidate of the row tile and warps of ``params`` (the tuner's
    neighbours keep both, so an entry of the tuning database has a pair the planner offered the shape it was timed on)."""
    return any((c.params["BM"], c.params["warps"]) == (params.get("BM"), params.get("warps")) for c in hopper_candidates(spec, target))


def hopper_plans(spec: AttentionSpec, target: Target, prefer: Candidate | None = None) -> Iterator[Plan]:
    """Every Hopper-form candidate the checker accepts for ``target``, best first (as ``builtin.plans``)."""
    if spec.is_decode or packs_gqa(spec):  # (builtin's rule: packed small-Sq prefill is the split-KV pair too)
        cands = hopper_decode_candidates(spec, target)
        if prefer is not None and prefer.kind in (None, "decode") and set(prefer.params) - {"occupancy"} == set(cands[1].params):  # the database's
            cands = [prefer] + [c for c in cands if c.params != prefer.params]
        yield from checked_plans(spec, target, "decode", cands, lambda params: hopper_decode_source(spec, target, params))
        return
    cands = hopper_candidates(spec, target)
    if prefer is not None and set(prefer.params) <= HOPPER_PARAMS and {"BM", "BN", "warps", "stages"} <= set(prefer.params):
        # (the tuning database's choice for the gluon backend: a switch that is off is absent)
        cands = [prefer] + [c for c in cands if c.params != prefer.params]
    yield from checked_plans(spec, target, "prefill", cands, lambda params: hopper_source(spec, target, params))
