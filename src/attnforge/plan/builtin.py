"""Stage 1 without an LLM: an AttentionSpec and a Target become a TL program, by rules.

The program is the canonical forward schedule of ``tl/library`` (FlashAttention's online softmax:
one program per BM query rows of one head, K/V streamed in BN-row tiles) composed from the spec's
features, so causal + window + ALiBi + softcap + custom modifiers combine in one kernel. Decode
(one query per sequence) gets the split-KV pair of kernels. Parameters come from the target's
facts (tensor-core generation, shared memory per block) and are offered as an ordered list of
candidates: the first one the TL checker (and later the compiler) accepts wins.

Performance choices are explicit parameters or explicit program structure, never hidden:
BM, BN, warps, stages (software pipelining of the K/V loop), the loop bounds that skip K/V tiles
a query block cannot see (causal, window), and decode's split count NSPLIT, a launch-time value
(``launch NSPLIT = splits(...)``) that the host computes per call by ``attnforge.splits``, so one
decode kernel serves every batch and KV length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection, Iterator

from ..abi import scalar_values
from ..dtypes import FORMATS, KERNEL_DTYPES
from ..errors import SpecError, TLCheckError, TLSyntaxError
from ..spec import AttentionSpec
from ..splits import DEFAULT_PER_SM, split_count
from ..targets import Target, tma_can_read
from ..tl import nodes as n
from ..tl.checker import check
from ..tl.findings import CheckResult
from ..tl.parser import parse, parse_expr
from ..tl.printer import expr as show_expr

if TYPE_CHECKING:
    from ..backends.base import Backend


@dataclass(frozen=True)
class Plan:
    """A TL program for a spec on a target, and why its parameters are what they are."""

    program: n.Program
    source: str
    params: dict[str, int]
    kind: str  # "prefill" or "decode"
    reasons: tuple[str, ...]
    check: CheckResult
    rejected: tuple[str, ...] = field(default=())  # candidates the checker refused, and why


@dataclass(frozen=True)
class Candidate:
    params: dict[str, int]
    reason: str
    kind: str | None = None  # "prefill" or "decode" where it came from elsewhere (a tuning entry); the planner's own are the spec's kind


# ------------------------------------------------------------------------------ TL text

# Packed GQA: the query heads of one K/V head hk and their positions are the rows of one tile,
# row r = (head hk * G + r % G, position r // G) with G = Hq // Hkv (heads fastest, as
# FlashAttention-3's pack_gqa and FlashInfer order them: a tile spans few positions, so causal and
# window loop bounds stay tight, and padding rows still name heads of the group). K/V tiles are then
# read once per group instead of once per query head. Used where a head's own rows would leave
# most of an MMA tile empty: decode and small Sq (speculative decoding), when G > 1.
PACK_MAX_SQ = 16
_G = "Hq // Hkv"
_PACKED_ROWS = f"{_G} * Sq"  # the M extent of a packed view: every (head, position) pair of the group
_GROUP_HEAD = f"hk * ({_G})"  # the first query head of K/V head hk


def packs_gqa(spec: AttentionSpec) -> bool:
    """Whether the planner packs the query heads of a K/V group into the rows of a tile: group
    size > 1 and Sq <= PACK_MAX_SQ (decode, speculative decoding)."""
    return spec.group_size > 1 and spec.seqlen_q <= PACK_MAX_SQ


def _positions(packed: bool) -> tuple[str, str]:
    """The first query position of block m and one past its last (packed: rows r // G)."""
    if packed:
        return f"m * BM // ({_G})", f"cdiv((m + 1) * BM, {_G})"
    return "m * BM", "(m + 1) * BM"


def _rename_h(e: n.Expr) -> n.Expr:
    """``e`` with the query head ``h`` read as ``h_idx`` (each packed row's head)."""
    return n.substitute(e, "h", n.Name("h_idx"))


def _per_row_head(text: str, packed: bool) -> str:
    """A spec modifier as the kernel reads it: with packed rows the head is each row's h_idx."""
    return show_expr(_rename_h(parse_expr(text))) if packed else text


def _diag(spec: AttentionSpec) -> str:
    """Where query i's diagonal meets the keys: bottom-right (i + Sk - Sq) or top-left (i)."""
    return "q_idx + Sk - Sq" if spec.causal_align == "bottom_right" or not spec.causal else "q_idx"


def _features(spec: AttentionSpec) -> list[str]:
    feats = []
    if spec.causal:
        feats.append(f"causal = {spec.causal_align}")
    if spec.windowed:
        side = "both" if spec.window_left is not None and spec.window_right is not None else ("left" if spec.window_left is not None else "right")
        feats.append("window" if side == "both" else f"window = {side}")
    if spec.alibi_slopes is not None:
        feats.append("alibi")
    if spec.softcap is not None:
        feats.append("softcap")
    if spec.score_mod is not None:
        feats.append(f"score_mod = ({spec.score_mod})")
    if spec.mask_mod is not None:
        feats.append(f"mask_mod = ({spec.mask_mod})")
    return feats


def _scalars(spec: AttentionSpec) -> list[str]:
    """The runtime scalars the spec gives values to, in the ABI's order."""
    return list(scalar_values(spec))


def _key_range(spec: AttentionSpec, packed: bool = False) -> tuple[str, str]:
    """First and one-past-last K/V rows query block m can see: tiles outside are never loaded."""
    first, end = _positions(packed)
    lo = "0"
    if spec.window_left is not None:
        lo = f"max(0, {first} + Sk - Sq - window_left)"
    his = []
    if spec.causal:
        his.append(f"{end} + Sk - Sq" if spec.causal_align == "bottom_right" else end)
    if spec.window_right is not None:
        his.append(f"{end} + Sk - Sq + window_right")
    hi = "Sk"
    for h in his:
        hi = f"min({hi}, {h})"
    return lo, hi


def keep_condition(spec: AttentionSpec, packed: bool = False) -> str:
    """The Mask condition: the keys row q_idx keeps (the K/V tail, causal, window, mask_mod)."""
    conds = ["kv_idx < Sk"]
    if spec.causal:
        conds.append(f"kv_idx <= {_diag(spec)}")
    if spec.window_left is not None:
        conds.append("kv_idx >= q_idx + Sk - Sq - window_left")
    if spec.window_right is not None:
        conds.append("kv_idx <= q_idx + Sk - Sq + window_right")
    if spec.mask_mod is not None:
        conds.append(f"({_per_row_head(spec.mask_mod, packed)})")
    return " and ".join(conds)


def score_mods(spec: AttentionSpec, packed: bool = False) -> list[str]:
    """In the reference's order: scale, softcap, ALiBi, score_mod (then the masks)."""
    mods = []
    if spec.softcap is not None:
        mods.append("softcap * tanh(score / softcap)")
    if spec.alibi_slopes is not None:
        mods.append(f"score - alibi_slopes[{'h_idx' if packed else 'h'}] * abs(q_idx + Sk - Sq - kv_idx)")
    if spec.score_mod is not None:
        mods.append(_per_row_head(spec.score_mod, packed))
    return mods


def kernel_header(name: str, spec: AttentionSpec, target: Target, params: dict[str, int], scores: bool = True, launch: str | None = None) -> list[str]:
    """A kernel header; ``scores=False`` for a kernel that only merges partial results (decode's
    combine), which computes no feature and reads no scalar; ``launch``: its launch-time value line."""
    lines = [f"kernel {name}", f"target {target.sm}"]
    feats = _features(spec)
    if feats and scores:
        lines.append("computes " + ", ".join(feats))
    lines.append(f"dtype qkv = {spec.dtype}, acc = fp32, out = {spec.dtype}")
    lines.append("param " + ", ".join(f"{k} = {v}" for k, v in params.items()))
    if launch is not None:
        lines.append(launch)
    if scores:
        lines.append("scalar " + ", ".join(_scalars(spec)))
    return lines


def full_tiles(spec: AttentionSpec) -> str | None:
    """One past the last K/V tile that every row of query block m sees whole (no key masked, no
    key past Sk), when the spec's masks allow such a split: causal and the K/V tail only."""
    if spec.windowed or spec.mask_mod is not None:
        return None
    if not spec.causal:
        return "Sk // BN"
    # the block's first row m * BM sees keys j <= m * BM + (Sk - Sq) (bottom-right) or j <= m * BM
    diag = "m * BM + Sk - Sq + 1" if spec.causal_align == "bottom_right" else "m * BM + 1"
    return f"min(Sk // BN, max(0, {diag}) // BN)"


def _tile_loops(spec: AttentionSpec, first: str, last: str, split: bool = True) -> list[str]:
    """The K/V loop; split, where the masks allow, into tiles every row sees whole (no Mask: the
    off-diagonal blocks) and the rest (diagonal blocks and the ragged tail, masked)."""
    full = full_tiles(spec)
    if full is None or first != "0" or not split:
        return _tile_loop(spec, f"{first} : {last}")
    return _tile_loop(spec, f"0 : {full}", masked=False) + _tile_loop(spec, f"{full} : {last}")


def _tile_loop(spec: AttentionSpec, bounds: str, masked: bool = True, packed: bool = False) -> list[str]:
    """The K/V loop body: scores, modifiers, mask, online softmax, P @ V."""
    mma = "tf32" if spec.allow_tf32 else "qkv"
    body = [
        f"for j = {bounds} pipeline stages",
        "    Copy K (BN, D) at [j, 0] from global to shared Ks",
        "    Copy Ks from shared to register Kr",
    ]
    if spec.allow_tf32:
        body.append("    Compute Cast Kr to tf32")
    body += ["    Compute GEMM Qr, Kr^T and get S", "    Compute Multiply S, scale"]
    body += [f"    Compute ScoreMod S with {m}" for m in score_mods(spec, packed)]
    if masked:
        body.append(f"    Compute Mask S keep {keep_condition(spec, packed)}")
    body += [
        "    Compute OnlineSoftmax S state m_i, l_i rescale O_acc and get P",
        f"    Compute Cast P to {mma}",
        "    Reshape P from mma_c to mma_a",
        "    Copy V (BN, Dv) at [j, 0] from global to shared Vs",
        "    Copy Vs from shared to register Vr",
    ]
    if spec.allow_tf32:
        body.append("    Compute Cast Vr to tf32")
    body += ["    Compute GEMM P, Vr and accumulate O_acc", "end"]
    return body


def global_views(out_o: str, out_lse: str, packed: bool = False) -> list[str]:
    """The program's views of Q, K, V and its outputs (packed: a K/V head's query heads as rows)."""
    if packed:  # the rows of K/V head hk's query heads, packed (see PACK_MAX_SQ)
        views = [
            f"Allocate Q in global ({_PACKED_ROWS}, D) at q[b, {_GROUP_HEAD}] pack {_G}",
            "Allocate K in global (Sk, D) at k[b, hk]",
            "Allocate V in global (Sk, Dv) at v[b, hk]",
            f"Allocate O in global ({_PACKED_ROWS}, Dv) at {out_o} pack {_G}",
            f"Allocate LSE in global ({_PACKED_ROWS}) at {out_lse} pack {_G}",
        ]
    else:
        views = [
            "Allocate Q in global (Sq, D) at q[b, h]",
            "Allocate K in global (Sk, D) at k[b, h // (Hq // Hkv)]",
            "Allocate V in global (Sk, Dv) at v[b, h // (Hq // Hkv)]",
            f"Allocate O in global (Sq, Dv) at {out_o}",
            f"Allocate LSE in global (Sq) at {out_lse}",
        ]
    return views


def _views(out_o: str, out_lse: str, packed: bool = False) -> list[str]:
    return global_views(out_o, out_lse, packed) + [
        "Allocate Qs in shared (BM, D) : qkv",
        "Allocate Ks in shared (BN, D) : qkv",
        "Allocate Vs in shared (BN, Dv) : qkv",
        "Allocate m_i in register (BM) : acc = -inf",
        "Allocate l_i in register (BM) : acc = 0",
        "Allocate O_acc in register (BM, Dv) : acc = 0",
        "Copy Q (BM, D) at [m, 0] from global to shared Qs",
        "Copy Qs from shared to register Qr",
    ]


EPILOGUE = [
    "Compute Normalize O_acc by l_i and get O_r",
    "Compute LogSumExp m_i, l_i and get lse_r",
    "Copy O_r (BM, Dv) at [m, 0] from register to global O",
    "Copy lse_r (BM) at [m] from register to global LSE",
]


def visible_tiles(spec: AttentionSpec, packed: bool = False) -> tuple[str, str]:
    """The first K/V tile and one past the last that query block m can see."""
    lo, hi = _key_range(spec, packed)
    first = "0" if lo == "0" else f"{lo} // BN"
    last = "cdiv(Sk, BN)" if hi == "Sk" else f"cdiv(max(0, {hi}), BN)"
    return first, last


def _query_block(spec: AttentionSpec, out_o: str, out_lse: str, packed: bool = False) -> list[str]:
    """Views, state and the query tile (cast for tf32 GEMMs when the spec allows them)."""
    return _views(out_o, out_lse, packed) + (["Compute Cast Qr to tf32"] if spec.allow_tf32 else [])


def prefill_source(spec: AttentionSpec, target: Target, params: dict[str, int], split: bool = True) -> str:
    first, last = visible_tiles(spec)
    lines = [f"# Forward attention for {spec.describe()}, planned for {target.name} by attnforge's built-in planner.",
             "# One program computes BM query rows of one (batch, query head) and streams K/V in BN-row tiles,",
             "# loading only the tiles its rows can see; tiles every row sees whole skip the mask.",
             *kernel_header("attn_fwd", spec, target, params), "grid b : B, h : Hq, m : cdiv(Sq, BM)", ""]
    lines += _query_block(spec, "o[b, h]", "lse[b, h]")
    lines += _tile_loops(spec, first, last, split)
    lines += EPILOGUE
    return "\n".join(lines) + "\n"


# The programs of one split: B x Hq (x row blocks) one head per program, B x Hkv (x row blocks) packed.
_PROGRAMS = "B * Hq * cdiv(Sq, BM)"
_PACKED_PROGRAMS = f"B * Hkv * cdiv({_PACKED_ROWS}, BM)"


def _split_launch(programs: str, per_sm: int) -> str:
    """The split count as a launch-time value: the host computes it per call from the real sizes
    and the device's SM count (``attnforge.splits.split_count``, aiming at ``per_sm`` programs per SM),
    so one kernel serves every batch and KV length. Both kernels declare it alike and share it."""
    return f"launch NSPLIT = splits({programs}, cdiv(Sk, BN){'' if per_sm == DEFAULT_PER_SM else f', {per_sm}'})"


def _combine_params(spec: AttentionSpec, params: dict[str, int]) -> dict[str, int]:
    """The combine kernel's parameters: its rows, and BN because its split rule reads it (so
    ``--param BN=32`` moves the split count of both kernels alike). Its merged accumulator and
    the partial output it reads are BM x Dv fp32 each, in registers: past 64 x 64 it takes 8
    warps (64 x 128 on 4 warps spilled on sm_90: 168 registers and 8 B of local memory)."""
    return {"BM": params["BM"], "BN": params["BN"], "warps": 8 if params["BM"] * spec.head_dim_v > 4096 else 4}


@dataclass(frozen=True)
class SplitKVLayout:
    """Split-KV decode's layout, the one description every partial kernel (this module's, and
    ``hopper``'s) and the combine kernel are written from: the K/V tiles split s takes, the
    launch-time NSPLIT, the grid, and the scratch the partial results go through."""

    packed: bool  # the rows of a program are a K/V head's query heads (see PACK_MAX_SQ)
    lo: str  # split s's first K/V tile (its share of the visible tiles)
    hi: str  # one past split s's last K/V tile
    launch: str  # the launch-time NSPLIT line, alike in both kernels
    heads: str  # the grid's batch and head axes (packed: K/V heads)
    rows: str  # the grid's row-block axis
    scratch: tuple[str, str]  # the partial O and LSE (packed: (B, NSPLIT, Hq, Sq), so the combine kernel reads them packed)
    o_part: str  # where a (row block, split)'s partial O lies in scratch
    lse_part: str  # where its partial LSE lies

    def grid(self, rows_first: bool = False) -> str:
        """The partial kernel's grid line: batch, head, split s, row block (``rows_first``: the
        row blocks first, as the Hopper form has them)."""
        return f"grid {self.rows}, {self.heads}, s : NSPLIT" if rows_first else f"grid {self.heads}, s : NSPLIT, {self.rows}"


def split_kv_layout(spec: AttentionSpec, packed: bool, per_sm: int = DEFAULT_PER_SM) -> SplitKVLayout:
    """The split-KV layout for ``spec``: split s of NSPLIT takes the s-th equal share of the key
    tiles its row block can see (``visible_tiles``); ``packed`` as ``packs_gqa``; ``per_sm``: the
    programs per SM the split count aims at."""
    first, last = visible_tiles(spec, packed)
    share = f"cdiv(max(0, {last} - {first}), NSPLIT)"
    lo, hi = f"{first} + s * {share}", f"min({last}, {first} + (s + 1) * {share})"
    if packed:
        return SplitKVLayout(packed, lo, hi, _split_launch(_PACKED_PROGRAMS, per_sm), heads="b : B, hk : Hkv", rows=f"m : cdiv({_PACKED_ROWS}, BM)",
                             scratch=("scratch o_part (B, NSPLIT, Hq, Sq, Dv) : acc", "scratch lse_part (B, NSPLIT, Hq, Sq) : acc"),
                             o_part=f"o_part[b, s, {_GROUP_HEAD}]", lse_part=f"lse_part[b, s, {_GROUP_HEAD}]")
    return SplitKVLayout(packed, lo, hi, _split_launch(_PROGRAMS, per_sm), heads="b : B, h : Hq", rows="m : cdiv(Sq, BM)",
                         scratch=("scratch o_part (B, Hq, NSPLIT, Sq, Dv) : acc", "scratch lse_part (B, Hq, NSPLIT, Sq) : acc"),
                         o_part="o_part[b, h, s]", lse_part="lse_part[b, h, s]")


def decode_source(spec: AttentionSpec, target: Target, params: dict[str, int]) -> str:
    """Split-KV decode: NSPLIT programs per (batch, head) each take a share of the visible key
    tiles and write a partial O and LSE; a combine kernel merges them with the online softmax."""
    if packs_gqa(spec):
        return packed_decode_source(spec, target, params)
    return _split_kv_pair(spec, target, params, [
        "# Split-KV: NSPLIT programs per (batch, head) each reduce a share of the visible K/V tiles to a",
        "# partial output and log-sum-exp; a second kernel merges the shares with the online softmax."])


def packed_decode_source(spec: AttentionSpec, target: Target, params: dict[str, int]) -> str:
    """Split-KV decode with packed GQA: the programs of K/V head hk hold all its query heads'
    rows (pack Hq // Hkv), so each K/V tile is read once per group; the partial results are
    laid out (B, NSPLIT, Hq, Sq) so that the combine kernel reads them packed too."""
    return _split_kv_pair(spec, target, params, [
        "# Packed GQA: one program holds the rows of every query head of K/V head hk (row r: head",
        "# hk * G + r % G at position r // G, G = Hq // Hkv), so each K/V tile is read once per group.",
        "# Split-KV: NSPLIT programs per (batch, K/V head) each reduce a share of the visible K/V tiles to",
        "# a partial output and log-sum-exp; a second kernel merges the shares with the online softmax."], packed=True)


def _split_kv_pair(spec: AttentionSpec, target: Target, params: dict[str, int], about: list[str], packed: bool = False) -> str:
    """The split-KV pair in the portable form: the partial kernel (comment lines ``about`` it
    first) and the combine kernel."""
    layout = split_kv_layout(spec, packed)
    lines = [f"# Decode attention for {spec.describe()}, planned for {target.name} by attnforge's built-in planner.", *about,
             "# NSPLIT is chosen at launch, for the call's sizes and GPU: one kernel serves every batch and KV length.",
             *kernel_header("attn_decode_partial", spec, target, params, launch=layout.launch), layout.grid(), *layout.scratch, ""]
    lines += _query_block(spec, layout.o_part, layout.lse_part, packed)
    lines += _tile_loop(spec, f"{layout.lo} : {layout.hi}", packed=packed)
    lines += EPILOGUE
    lines += ["", *combine_kernel(spec, target, params, layout)]
    return "\n".join(lines) + "\n"


def combine_kernel(spec: AttentionSpec, target: Target, params: dict[str, int], layout: SplitKVLayout) -> list[str]:
    """Split-KV's second kernel, whole: its header, grid and scratch from the partial kernel's
    ``layout``, then the merge of the NSPLIT partial results (plain or packed rows)."""
    top = [*kernel_header("attn_decode_combine", spec, target, _combine_params(spec, params), scores=False, launch=layout.launch),
              f"grid {layout.heads}, {layout.rows}", *layout.scratch, ""]
    if not layout.packed:
        return [*top, *_combine("(Sq, Dv)", "(Sq)", "o[b, h]", "lse[b, h]", layout.o_part, layout.lse_part)]
    pack = f" pack {_G}"
    return [*top, *_combine(f"({_PACKED_ROWS}, Dv)", f"({_PACKED_ROWS})", f"o[b, {_GROUP_HEAD}]{pack}", f"lse[b, {_GROUP_HEAD}]{pack}",
                               layout.o_part + pack, layout.lse_part + pack)]


def _combine(o_shape: str, lse_shape: str, o_at: str, lse_at: str, o_part_at: str, lse_part_at: str) -> list[str]:
    """The body of split-KV's combine kernel: merge the NSPLIT partial outputs of each row with the
    online softmax over their log-sum-exps, then normalise and store (views as given: plain or packed)."""
    return [
        f"Allocate O in global {o_shape} at {o_at}",
        f"Allocate LSE in global {lse_shape} at {lse_at}",
        "Allocate m_i in register (BM) : acc = -inf",
        "Allocate l_i in register (BM) : acc = 0",
        "Allocate O_acc in register (BM, Dv) : acc = 0",
        "for s = 0 : NSPLIT",
        f"    Allocate O_s in global {o_shape} at {o_part_at}",
        f"    Allocate LSE_s in global {lse_shape} at {lse_part_at}",
        "    Copy LSE_s (BM) at [m] from global to register lse_s",
        "    Copy O_s (BM, Dv) at [m, 0] from global to register o_s",
        "    Compute OnlineSoftmax lse_s state m_i, l_i rescale O_acc and get w",
        "    Compute Multiply o_s, w and get o_w",
        "    Compute Add O_acc, o_w",
        "end",
        *EPILOGUE,
    ]


def one_split_axis(program: n.Program) -> int | None:
    """Where ``program`` is a split-KV pair whose second kernel is this planner's merge (``_combine``) of
    exactly the scratch views its first kernel stores with this planner's epilogue (``EPILOGUE``), and that
    scratch is o's and lse's shape, (B, Hq, Sq, Dv) and (B, Hq, Sq), with the split's index inserted as one
    more dimension: that dimension's position. The merge of one split returns that split's partial result
    as it is (its weight is exp(lse - lse) = 1, the sum of weights 1; a row that saw no key, LSE -inf, is 0
    in the merge and in the epilogue's Normalize alike), so a launch of NSPLIT = 1 may
    let the partial kernel store O (in o's format) and the LSE straight into ``o`` and ``lse`` (views of them
    with that dimension added) and skip the second kernel: the same values, one launch and one round trip
    through scratch fewer. None for any other program: a second kernel that is not the planner's merge
    (an LLM's, say) runs as written."""
    if len(program.kernels) != 2 or not program.kernels[0].scratch:
        return None
    partial, merge = program.kernels
    launched = {v.name for v in partial.launch}
    split = next((ax for ax in partial.grid if isinstance(ax.extent, n.Name) and ax.extent.id in launched), None)
    if split is None:
        return None
    scratch = {sc.name: sc for sc in partial.scratch}
    views = [s for s in partial.body if isinstance(s, n.Allocate) and s.level == "global" and s.tensor in scratch]
    o_view = next((v for v in views if len(v.shape) == 2), None)
    lse_view = next((v for v in views if len(v.shape) == 1), None)
    if o_view is None or lse_view is None or len(views) != 2:
        return None
    rows = (n.Name("B"), n.Name("Hq"), n.Name("Sq"))
    o_shape, lse_shape = scratch[o_view.tensor].shape, scratch[lse_view.tensor].shape
    axis = next((i for i, e in enumerate(lse_shape) if e == split.extent), None)
    if (axis is None or lse_shape[:axis] + lse_shape[axis + 1:] != rows
            or o_shape[:axis] + o_shape[axis + 1:] != (*rows, n.Name("Dv")) or o_shape[axis] != split.extent
            or any(len(v.offset) <= axis or v.offset[axis] != n.Name(split.name) for v in views)):
        return None

    def at(view: n.Allocate, tensor: str, keep_split: bool) -> str:
        offset = view.offset if keep_split else view.offset[:axis] + view.offset[axis + 1:]
        return f"{tensor}[{', '.join(map(show_expr, offset))}]" + (f" pack {show_expr(view.pack)}" if view.pack is not None else "")

    def shape(view: n.Allocate) -> str:
        return f"({', '.join(map(show_expr, view.shape))})"

    lines = _combine(shape(o_view), shape(lse_view), at(o_view, "o", False), at(lse_view, "lse", False),
                     at(o_view, o_view.tensor, True), at(lse_view, lse_view.tensor, True))
    lines = [line.replace("for s = 0 : NSPLIT", f"for {split.name} = 0 : {show_expr(split.extent)}") for line in lines]
    epilogue = [line.replace("global O", f"global {o_view.name}").replace("global LSE", f"global {lse_view.name}") for line in EPILOGUE]
    try:
        canonical, stores = (parse("kernel k\n" + "\n".join(text) + "\n").kernels[0].body for text in (lines, epilogue))
    except TLSyntaxError:  # a view's expression that does not print back as TL: not the planner's merge
        return None
    return axis if merge.body == canonical and _holds_run(partial.body, stores) else None


def _holds_run(body: tuple[n.Stmt, ...], run: tuple[n.Stmt, ...]) -> bool:
    """Whether ``run`` stands, statement for statement, in ``body`` or in a block inside it."""
    if any(body[i:i + len(run)] == run for i in range(len(body) - len(run) + 1)):
        return True
    return any(_holds_run(s.body, run) for s in body if isinstance(s, (n.Loop, n.Role)))


# ------------------------------------------------------------------------------ parameters

def tma_usable(spec: AttentionSpec, target: Target) -> bool:
    """TMA on the target, and rows of q/k/v that are whole 16-byte units (contiguous BHSD and
    BSHD tensors then have every stride 16-byte aligned, as TMA requires)."""
    size = FORMATS[spec.dtype].bytes
    return target.has_tma and all(tma_can_read((d, 1), size) for d in (spec.head_dim, spec.head_dim_v))


# Which MMA the backend's kernels issue, for the tile rules: "target" (what the target has best:
# wgmma on sm_90, tcgen05 on sm_100, mma.sync before) or "mma_sync" (a backend that writes
# mma.sync on every target it builds for: the CUDA backend). ``Backend.mma``.
MMA_RULES = ("target", "mma_sync")


def _mma_sync_tiles(spec: AttentionSpec, target: Target) -> tuple[dict[str, int], str]:
    """First tiles for hand-written mma.sync kernels, where each warp ldmatrix's every K and V
    fragment from shared memory: a warp of two m16 row tiles feeds each fragment to twice the
    MMAs, which shared-memory bandwidth needs (measured on the H200, bench/RESULTS.md
    2026-12-01 run 6: 0.92x FlashAttention-2 at D=64 against 0.78x with one m16 tile a warp).
    Up to D=128 the two row tiles' accumulators fit beside a score tile of BN=32 (BN=64 spills at
    D=128: 192 registers of accumulators; the query tile then stays in shared memory), with 2
    stages: measured 0.94-1.01x FlashAttention-2 on six D=128 rows against 0.75-0.85x for eight
    warps of one row tile, and 1-2% ahead of 3 stages (2026-12-02 run 11). Past D=128 eight warps
    of one row tile each, BN=64, two stages (three do not fit at D=256; 64-row blocks and BN=32 with Q
    re-read measured slower; BN=32 with Q kept in registers was level through the whole bench, run 11)."""
    d = max(spec.head_dim, spec.head_dim_v)
    if d <= 64:
        return dict(BM=128, BN=64, warps=4, stages=3), "mma.sync kernels: BM=128 in 4 warps (two m16 row tiles a warp), BN=64, 3 stages"
    if d <= 128:
        return dict(BM=128, BN=32, warps=4, stages=2), "mma.sync kernels: BM=128 in 4 warps (two m16 row tiles a warp), BN=32 (64 would spill), 2 stages"
    return dict(BM=128, BN=64, warps=8, stages=2), "mma.sync kernels: BM=128 in 8 warps (one m16 row tile a warp: two would spill), BN=64, 2 stages"


def _prefill_candidates(spec: AttentionSpec, target: Target, mma: str = "target") -> list[Candidate]:
    d = max(spec.head_dim, spec.head_dim_v)
    big_smem = target.smem_per_block_optin >= 160 * 1024
    if mma == "mma_sync" and target.cc >= (8, 0):  # (Turing keeps the pre-Ampere rule: its 64 KiB take no 128-row blocks of these)
        first, why = _mma_sync_tiles(spec, target)
    elif target.has_wgmma or target.has_tcgen05:
        # Hopper/Blackwell: 128-row blocks are what wgmma (two warpgroups) and tcgen05 want; wide
        # K/V tiles pay off while the head dim is small (then 4 warps measured 4% faster on the
        # H200, bench/RESULTS.md).
        first = dict(BM=128, BN=128 if d <= 64 else 64, warps=4 if d <= 64 else 8, stages=3 if d <= 128 else 2)
        why = f"{'wgmma' if target.has_wgmma else 'tcgen05'} target: BM=128; BN and warps by head dim; 3 stages while tiles are small"
    elif target.cc >= (8, 0):
        first = dict(BM=128, BN=64, warps=8 if d > 64 else 4, stages=3 if big_smem and d <= 128 else 2)
        why = "mma.sync target: BM=128, BN=64 (FlashAttention-2's tiles); stages by shared memory"
    else:
        first = dict(BM=64, BN=64, warps=4, stages=2)
        why = "pre-Ampere target: no cp.async pipelining worth more than 2 stages; BM=BN=64"
    out = [Candidate(first, why)]
    # Fallbacks, in order: fewer stages, narrower K/V tiles, shorter query blocks.
    p = dict(first)
    while True:
        if p["stages"] > 1:
            p = {**p, "stages": p["stages"] - 1}
            why = "fewer pipeline stages to fit shared memory"
        elif p["BN"] > 16:
            p = {**p, "BN": p["BN"] // 2, "stages": first["stages"]}
            why = "narrower K/V tiles to fit shared memory and registers"
        elif p["BM"] > 16:
            p = {**p, "BM": p["BM"] // 2, "warps": max(4, p["warps"] // 2), "stages": first["stages"]}
            why = "shorter query blocks to fit registers"
        else:
            break
        out.append(Candidate(dict(p), why))
    if mma == "mma_sync" and target.cc >= (8, 0) and first["warps"] == 4 and d <= 128:
        # two m16 row tiles a warp that spill even with 2 stages (a modifier's registers): one row tile a warp in 8
        # warps, as before run 11, ahead of a 1-stage pipeline
        wide = dict(BM=128, BN=64, warps=8, stages=min(first["stages"], 3 if d <= 64 else 2))
        at = next((i for i, c in enumerate(out) if c.params["stages"] < 2), len(out))
        out.insert(at, Candidate(wide, "eight warps of one m16 row tile each (two row tiles a warp spill here), BN=64"))
    return out


def split_reason(spec: AttentionSpec, target: Target, programs: int, per_program: str, bn: int, per_sm: int = DEFAULT_PER_SM) -> str:
    """Why the split count is what it is: the rule, and what it gives for the spec's own sizes."""
    splits = split_count(programs, math.ceil(spec.seqlen_k / bn), target.sm_count, per_sm)
    times = {1: "once", 2: "twice"}.get(per_sm, f"{per_sm} times")
    return (f"split-KV with NSPLIT chosen at launch so {per_program}*NSPLIT programs cover the GPU's SMs about {times} "
            f"(at most one split per K/V tile, 64, a power of two): NSPLIT={splits} at B={spec.batch}, Sk={spec.seqlen_k} on {target.name}'s "
            f"{target.sm_count} SMs")


def _decode_bn(spec: AttentionSpec, mma: str) -> int:
    """K/V tile rows of a split-KV partial kernel. mma.sync kernels take 32: their one-warp blocks of
    16 rows need little shared memory then, so more of them share an SM (0.89x cuDNN's GB/s on the
    H200 against 0.77x at 64, bench/RESULTS.md 2026-12-01 run 6)."""
    if mma == "mma_sync":
        return 32
    return 64 if max(spec.head_dim, spec.head_dim_v) <= 128 else 32


def _decode_candidates(spec: AttentionSpec, target: Target, mma: str = "target") -> list[Candidate]:
    if packs_gqa(spec):
        return _packed_candidates(spec, target, mma)
    bn = _decode_bn(spec, mma)
    programs = spec.batch * spec.heads  # Sq = 1 here (a group of 1): one row block per head
    why = f"decode: BM=16 (the smallest MMA row count); {split_reason(spec, target, programs, 'B*Hq', bn)}"
    out = [Candidate(dict(BM=16, BN=bn, warps=4, stages=2), why)]
    if bn > 16:
        out.append(Candidate(dict(BM=16, BN=bn // 2, warps=4, stages=1), "narrower K/V tiles to fit shared memory"))
    return out


def _packed_candidates(spec: AttentionSpec, target: Target, mma: str = "target") -> list[Candidate]:
    """Packed GQA, split-KV: BM covers the group's G * Sq rows (16..64); NSPLIT, chosen at launch, fills the SMs."""
    bn = _decode_bn(spec, mma)
    rows = spec.group_size * spec.seqlen_q
    bm = min(64, max(16, 1 << (rows - 1).bit_length()))
    programs = spec.batch * spec.kv_heads * math.ceil(rows / bm)
    why = (f"packed GQA: the {spec.group_size} query heads of a K/V head x Sq={spec.seqlen_q} in BM={bm} rows, so K/V are read once per group; "
           + split_reason(spec, target, programs, "B*Hkv", bn))
    out = [Candidate(dict(BM=bm, BN=bn, warps=4, stages=2), why)]
    if bn > 16:
        out.append(Candidate(dict(BM=bm, BN=bn // 2, warps=4, stages=1), "narrower K/V tiles to fit shared memory"))
    while bm > 16:
        bm //= 2
        out.append(Candidate(dict(BM=bm, BN=max(16, bn // 2), warps=4, stages=1), "fewer packed rows per program to fit registers"))
    return out


def candidates(spec: AttentionSpec, target: Target, *, tma: bool = True, refused: Collection[str] = (),
               mma: str = "target") -> tuple[str, list[Candidate]]:
    """The kind of program and its parameter candidates, best first. With ``tma`` (and a target
    and head dims that allow it, and a backend that does not refuse it) q/k/v tiles are read
    through TMA descriptors: 0.72-0.78x cuDNN against 0.54-0.64x with pointer loads, measured on
    the H200 (bench/RESULTS.md). ``refused``: strategies the backend rules out on ``target``.
    ``mma``: the MMA the backend issues (``MMA_RULES``), which the tiles follow (prefill, and the split-KV partial kernel's BN)."""
    if mma not in MMA_RULES:
        raise ValueError(f"mma rules {mma!r}: one of {', '.join(MMA_RULES)}")
    kind = "decode" if spec.is_decode or packs_gqa(spec) else "prefill"  # packed small-Sq prefill: the split-KV pair too
    cands = _decode_candidates(spec, target, mma) if kind == "decode" else _prefill_candidates(spec, target, mma)
    if tma and tma_usable(spec, target) and "tma" not in refused:
        cands = [Candidate({**c.params, "tma": 1}, c.reason + "; q/k/v through TMA descriptors") for c in cands]
    return kind, cands


def source_for(spec: AttentionSpec, target: Target, kind: str, params: dict[str, int]) -> str:
    return decode_source(spec, target, params) if kind == "decode" else prefill_source(spec, target, params)


def plans(spec: AttentionSpec, target: Target, *, tma: bool = True, refused: Collection[str] = (),
          prefer: Candidate | None = None, mma: str = "target") -> Iterator[Plan]:
    """Every candidate whose TL program the checker accepts for ``target``, best first; each
    plan lists the candidates the checker refused since the previous one (``Plan.rejected``).
    The caller takes the next plan when the compiler finds one does not fit. ``prefer``: a
    candidate to offer first (the tuning database's), before the rules' own.

    Raises TLCheckError with a candidate's findings when the checker refuses it for a reason
    smaller tiles cannot fix (a dtype the target's tensor cores lack), or when no candidate passes."""
    if spec.dtype not in KERNEL_DTYPES:
        raise SpecError("dtype", spec.dtype, ", ".join(KERNEL_DTYPES) + " for generated kernels",
                        hint="fp8 attention needs per-tensor scales in the spec and its verification; not generated yet")
    kind, cands = candidates(spec, target, tma=tma, refused=refused, mma=mma)
    if prefer is not None and prefer.kind in (None, kind) and _kind_params(prefer.params) == _kind_params(cands[0].params) \
            and not (prefer.params.get("tma") and (not tma or "tma" in refused)):
        # (parameters of another kind of program -- a prefill choice offered for a decode spec by
        # a stale or hand-edited tuning database, or a decode choice that still fixes NSPLIT -- are
        # not offered: they were measured on another program, or its source would not build)
        cands = [prefer] + [c for c in cands if c.params != prefer.params]
    yield from checked_plans(spec, target, kind, cands, lambda params: source_for(spec, target, kind, params))


def checked_plans(spec: AttentionSpec, target: Target, kind: str, cands: list[Candidate],
                  source: Callable[[dict[str, int]], str]) -> Iterator[Plan]:
    """The candidates whose TL (``source(params)``) the checker accepts, in order, each with the
    candidates refused since the previous one; TLCheckError at a refusal smaller tiles cannot fix,
    or when none passes."""
    rejected: list[str] = []
    yielded = False
    last = None
    for cand in cands:
        text = source(cand.params)
        program = parse(text, file="kernel.tl")
        result = check(program, target, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl")
        if result.ok:
            yield Plan(program, text, cand.params, kind, (cand.reason,), result, tuple(rejected))
            yielded, rejected = True, []
            continue
        rejected.append(f"{_fmt(cand.params)}: " + "; ".join(f"{f.code} {f.message}" for f in result.errors[:2]))
        last = result
        if not any(f.code in ("TL503", "TL504") for f in result.errors):
            raise TLCheckError(result.errors, file="kernel.tl")  # not a resource problem: smaller tiles will not help
    if not yielded:
        raise TLCheckError(last.errors if last else [], file="kernel.tl")


def _kind_params(params: dict[str, int]) -> frozenset[str]:
    """The parameter names that say which kind of program (prefill, decode) a candidate is for;
    the strategy switches (TMA, persistent scheduling) may be on or off in either."""
    return frozenset(params) - {"tma", "persistent"}


def plans_for(backend: Backend, spec: AttentionSpec, target: Target, **options) -> Iterator[Plan]:
    """``plans`` for the kernels ``backend`` builds: the strategies it refuses on ``target`` and the
    tiles of the MMA it issues (``Backend.refused_strategies``, ``Backend.mma``)."""
    return plans(spec, target, refused=backend.refused_strategies(target), mma=backend.mma, **options)


def plan(spec: AttentionSpec, target: Target, *, tma: bool = True, refused: Collection[str] = (), mma: str = "target") -> Plan:
    """The first plan of ``plans`` (the planner's best candidate the checker accepts)."""
    return next(plans(spec, target, tma=tma, refused=refused, mma=mma))


class BuiltinPlanner:
    """Stage 1 by rules (this module), behind the interface ``generate`` drives: ``plans``."""

    name = "builtin"

    def __init__(self, *, tma: bool = True, prefer: Candidate | None = None, form: str = "portable", mma: str = "target"):
        self.tma, self.prefer, self.form, self.mma = tma, prefer, form, mma

    def plans(self, spec: AttentionSpec, target: Target, refused: Collection[str] = ()) -> Iterator[Plan]:
        if self.form == "hopper":  # the backend translates the Hopper form (roles, rings, barriers): plan/hopper.py
            from .hopper import hopper_plans

            return hopper_plans(spec, target, prefer=self.prefer)
        return plans(spec, target, tma=self.tma, refused=refused, prefer=self.prefer, mma=self.mma)


def _fmt(params: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())
