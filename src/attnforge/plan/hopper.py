"""The built-in planner's Hopper form (sm_90, and sm_100 without the schedules): the same attention as ``builtin``'s prefill program,
written for a warp-specialised kernel. A load role streams K and V by TMA into a ring of ``stages``
shared-memory slots, each slot guarded by a "ready" barrier per tensor (the copy landed) and one
"free" barrier (the compute warpgroups are done with it); the compute role issues asynchronous GEMMs
straight from shared memory and runs the online softmax on the accumulators.

Two schedule parameters say how the compute role's time overlaps (the interpreter ignores them;
the Gluon translator honours them): ``pingpong = 1`` splits the compute warps into two warpgroups
that own half of the BM rows each and take turns issuing their GEMMs, so one warpgroup's softmax
runs while the other's GEMMs hold the tensor cores; ``overlap = 1`` issues the next tile's QK^T GEMM
before the softmax of the current one (FlashAttention-3's intra-warpgroup overlap). On sm_100 both
stay off: the gluon backend maps the same statements to tcgen05 MMAs into tensor memory.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import SpecError
from ..spec import AttentionSpec
from ..targets import Target
from .builtin import Candidate, Plan, _full_tiles, _header, _keep, _score_mods, _visible_tiles, checked_plans, packs_gqa

# Measured on the H200 (bench/RESULTS.md, 2026-12-01): the best schedule per head dim on the
# 4k-token rows, with the ring as deep as shared memory allows at that tile.
_FIRST = {
    64: dict(BM=128, BN=128, warps=8, stages=3, pingpong=1, overlap=1),
    128: dict(BM=128, BN=128, warps=8, stages=3, pingpong=1, overlap=1),
    256: dict(BM=128, BN=64, warps=8, stages=2, pingpong=1),
}


# sm_100 (compile-checked on the CPU, never timed: no Blackwell GPU at hand): the same tiles, the tile
# loop as written (the wgmma schedules are not mapped to tcgen05). S and a 16-bit P live in tensor
# memory; 4 warps hold a 128-column S tile plus O's rescale without spilling up to D = 64 (255
# registers), 8 warps above (168; with 4 warps D = 128 spills 576 bytes).
_FIRST_SM100 = {
    64: dict(BM=128, BN=128, warps=4, stages=3),
    128: dict(BM=128, BN=128, warps=8, stages=3),
    256: dict(BM=128, BN=64, warps=8, stages=2),
}


HOPPER_PARAMS = frozenset({"BM", "BN", "warps", "stages", "pingpong", "overlap"})


def hopper_candidates(spec: AttentionSpec, target: Target) -> list[Candidate]:
    """Parameters for the Hopper form, best first; fallbacks take ring slots away, then narrow BN."""
    d = max(spec.head_dim, spec.head_dim_v)
    key = next(k for k in sorted(_FIRST) if d <= k) if d <= 256 else 256
    if target.cc[0] == 10:
        first = dict(_FIRST_SM100[key])
        why = f"Hopper form for head dim {d} on {target.sm}: tcgen05 MMAs into tensor memory, a {first['stages']}-slot K/V ring"
    else:
        first = dict(_FIRST[key])
        why = (f"Hopper form for head dim {d}: two compute warpgroups in ping-pong, a {first['stages']}-slot K/V ring"
               + (", the next QK^T GEMM issued before the softmax" if first.get("overlap") else ""))
    out = [Candidate(first, why)]
    p = dict(first)
    while p["stages"] > 2 or p["BN"] > 64:
        if p["stages"] > 2:
            p = {**p, "stages": p["stages"] - 1}
            why = "one ring slot fewer to fit shared memory"
        else:
            p = {**p, "BN": p["BN"] // 2, "stages": first["stages"]}
            why = "narrower K/V tiles to fit shared memory and registers"
        out.append(Candidate(dict(p), why))
    return out


def _ring(j: str, first: str) -> tuple[str, str, str]:
    """Slot, fill phase and free phase of tile ``j`` when the loop's tiles start at ``first``: the
    n-th use of a slot waits for the n-th fill (phase n % 2) and for the (n-1)-th release (a slot
    starts free, so its first wait is on phase 1)."""
    t = j if first == "0" else f"({j} - ({first}))"
    return f"{t} % stages", f"({t} // stages) % 2", f"({t} // stages + 1) % 2"


def _compute_loop(spec: AttentionSpec, bounds: str, first: str, masked: bool) -> list[str]:
    slot, full, _ = _ring("j", first)
    body = [f"    for j = {bounds}",
            f"        Wait k_ready[{slot}] phase {full}",
            f"        Compute GEMM Qs, Ks[{slot}]^T and get S async",
            "        Wait GEMM S",
            "        Compute Multiply S, scale"]
    body += [f"        Compute ScoreMod S with {m}" for m in _score_mods(spec)]
    if masked:
        body.append(f"        Compute Mask S keep {_keep(spec)}")
    body += ["        Compute OnlineSoftmax S state m_i, l_i rescale O_acc and get P",
             "        Compute Cast P to qkv",
             "        Reshape P from mma_c to mma_a",
             f"        Wait v_ready[{slot}] phase {full}",
             f"        Compute GEMM P, Vs[{slot}] and accumulate O_acc async",
             "        Wait GEMM O_acc",
             f"        Arrive kv_free[{slot}]",
             "    end"]
    return body


def hopper_source(spec: AttentionSpec, target: Target, params: dict[str, int]) -> str:
    """The Hopper-form TL program for a prefill ``spec`` with ``params`` (see ``hopper_candidates``)."""
    first, last = _visible_tiles(spec)
    full = _full_tiles(spec)
    lines = [f"# Forward attention for {spec.describe()}, planned for {target.name} by attnforge's built-in planner (Hopper form).",
             "# A load warp streams K and V by TMA into a ring of `stages` shared-memory slots; the compute warpgroups",
             "# wait for a slot, run both GEMMs from shared memory asynchronously and give the slot back.",
             # a schedule switch that is off is left out (parameters are positive)
             *_header("attn_fwd", spec, target, {k: v for k, v in params.items() if v}), "grid m : cdiv(Sq, BM), b : B, h : Hq", "",
             "Allocate Q in global (Sq, D) at q[b, h]",
             "Allocate K in global (Sk, D) at k[b, h // (Hq // Hkv)]",
             "Allocate V in global (Sk, Dv) at v[b, h // (Hq // Hkv)]",
             "Allocate O in global (Sq, Dv) at o[b, h]",
             "Allocate LSE in global (Sq) at lse[b, h]",
             "Allocate Qs in shared (BM, D) : qkv",
             "Allocate Ks in shared (BN, D) : qkv ring stages",
             "Allocate Vs in shared (BN, Dv) : qkv ring stages",
             "Allocate q_ready in barrier",
             "Allocate k_ready in barrier (stages)",
             "Allocate v_ready in barrier (stages)",
             "Allocate kv_free in barrier (stages)",
             "role compute warps 0 : warps",
             "    Allocate m_i in register (BM) : acc = -inf",
             "    Allocate l_i in register (BM) : acc = 0",
             "    Allocate O_acc in register (BM, Dv) : acc = 0",
             "    Wait q_ready phase 0"]
    if full is not None and first == "0":
        lines += _compute_loop(spec, f"0 : {full}", first, masked=False)
        lines += _compute_loop(spec, f"{full} : {last}", first, masked=True)
    else:
        lines += _compute_loop(spec, f"{first} : {last}", first, masked=True)
    slot, _, free = _ring("j", first)
    lines += ["    Compute Normalize O_acc by l_i and get O_r",
              "    Compute LogSumExp m_i, l_i and get lse_r",
              "    Copy O_r (BM, Dv) at [m, 0] from register to global O",
              "    Copy lse_r (BM) at [m] from register to global LSE",
              "end",
              "role load warps warps : warps + 1 regs 24",
              "    Copy Q (BM, D) at [m, 0] from global to shared Qs async q_ready",
              f"    for j = {first} : {last}",
              f"        Wait kv_free[{slot}] phase {free}",
              f"        Copy K (BN, D) at [j, 0] from global to shared Ks[{slot}] async k_ready[{slot}]",
              f"        Copy V (BN, Dv) at [j, 0] from global to shared Vs[{slot}] async v_ready[{slot}]",
              "    end",
              "end"]
    return "\n".join(lines) + "\n"


def hopper_plans(spec: AttentionSpec, target: Target, prefer: Candidate | None = None) -> Iterator[Plan]:
    """Every Hopper-form candidate the checker accepts for ``target``, best first (as ``builtin.plans``)."""
    if spec.is_decode or packs_gqa(spec):
        raise SpecError("seqlen_q", spec.seqlen_q, "a prefill (the Hopper form has no split-KV decode yet)",
                        hint="decode goes to --backend triton")
    cands = hopper_candidates(spec, target)
    if prefer is not None and set(prefer.params) <= HOPPER_PARAMS and {"BM", "BN", "warps", "stages"} <= set(prefer.params):
        # (the tuning database's choice for the gluon backend: a switch that is off is absent)
        cands = [prefer] + [c for c in cands if c.params != prefer.params]
    yield from checked_plans(spec, target, "prefill", cands, lambda params: hopper_source(spec, target, params))
