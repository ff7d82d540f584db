"""The planted bugs the gate must catch: each is one edit of a planned TL program or of its
generated kernel, written as the text it replaces and the text it puts in its place.

A mutant that does not change what is computed is *equivalent*: it says so, with the reason,
and the suite expects it to survive. Every other mutant must be killed by some step of the gate
(the TL checker, the judge against the spec, the compiler, or kernel verification).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import AttnforgeError
from ..spec import AttentionSpec

# The specs the mutants are planted in, with the target each is planned for (h100 plans TMA
# loads and the causal loop split; a100 plans pointer loads), kept small for the interpreter.
SPECS: dict[str, tuple[AttentionSpec, str]] = {
    "causal": (AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="bf16", causal=True), "h100"),
    "window": (AttentionSpec(heads=2, head_dim=32, dtype="fp16", window_left=20, window_right=9), "a100"),
    "alibi": (AttentionSpec(heads=4, head_dim=32, dtype="fp16", causal=True, causal_align="top_left", alibi_slopes="auto", softcap=5.0), "a100"),
    "decode": (AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="bf16", seqlen_q=1, seqlen_k=256), "h100"),  # packed GQA (G = 2)
    # speculative decoding: Sq = 4 queries of G = 2 heads packed per K/V head, causal, ALiBi per packed row
    "speculative": (AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="fp16", seqlen_q=4, seqlen_k=200, causal=True, alibi_slopes="auto"), "a100"),
    # the gluon backend's Hopper form (two ping-pong warpgroups, the overlapped softmax: SPEC_PLAN, the planner's second
    # candidate here since run 15 made three warpgroups its first), for GLUON_MUTANTS; long enough (8k keys) that the
    # planner launches one program per work tile
    "hopper": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True, seqlen_q=8192), "h200"),
    # the same kernel persistent (1k keys: one program per SM walks the work tiles, the rings carried over), for GLUON_MUTANTS
    "hopper_persistent": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True), "h200"),
    # the persistent kernel chained (D = 64 without a mask: the next work tile's first QK^T in the turn of this one's last PV,
    # Q in a slot per tile parity; SPEC_PLAN: the planner's last candidate), for GLUON_MUTANTS
    "hopper_chain": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16"), "h200"),
    # a D = 128 kernel storing O through the warpgroups' rows of Qs (ostage = 2, the planner's choice under a window; the
    # persistent causal D = 128 kernel, this spec until run 11, now has a staging tile of its own), for GLUON_MUTANTS
    "hopper_o_via_q": (AttentionSpec(heads=4, kv_heads=2, head_dim=128, dtype="bf16", window_left=200, window_right=30), "h200"),
    # the Hopper form with a modifier reading the scores (the softmax in natural units), for GLUON_MUTANTS
    "hopper_alibi": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True, alibi_slopes="auto"), "h200"),
    # the gluon backend's split-KV decode (packed GQA, G = 4: the Hopper-form partial kernel, the Triton combine), for GLUON_MUTANTS;
    # (the verifier's own decode shapes, Sk up to 32769, take several splits on the H200: the combine mutant needs two)
    "hopper_decode": (AttentionSpec(heads=8, kv_heads=2, head_dim=64, dtype="bf16", seqlen_q=1, seqlen_k=1000), "h200"),
    # three compute warpgroups in ping-pong (BM = 192: the planner's choice at D = 64 without a mask past 1k query rows;
    # its tile loop written as two, unmasked then masked), for GLUON_MUTANTS
    "hopper_three_sets": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", seqlen_q=2048, seqlen_k=2048), "h200"),
    # three warpgroups under the causal mask (the planner's first choice past 4k keys: its Mask compares the keys'
    # indices with each row's bound), for GLUON_MUTANTS
    "hopper_three_sets_causal": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True, seqlen_q=8192), "h200"),
    # four compute warpgroups in ping-pong (BM = 256, BN = 64, persistent, O staged: the planner's choice at D = 64 without a
    # mask for 512-1024 query rows; two tile loops, 1000 keys ending in a partial tile), for GLUON_MUTANTS
    "hopper_four_sets": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", seqlen_q=1000, seqlen_k=1000), "h200"),
    # O out through the last K/V tile's ring slots (ostage = 3, persistent: the planner's choice at D = 256 without a mask up to
    # 1k keys), for GLUON_MUTANTS
    "hopper_o_via_kv": (AttentionSpec(heads=4, kv_heads=2, head_dim=256, dtype="bf16", seqlen_q=1000, seqlen_k=1000), "h200"),
    # the same Hopper form planned for sm_100 (tcgen05 into tensor memory), for GLUON_MUTANTS
    "blackwell": (AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="bf16", causal=True), "b200"),
    # the CUDA backend's kernels, as a model writes them with --translate llm (the model mutants below)
    "cuda": (AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="fp16", causal=True), "a100"),
}
# The backend a spec's base kernel is generated with, where it is not auto's choice (the Hopper form
# is the gluon backend's). Gluon and CUDA kernels run natively only: without a GPU to run them (and
# always with --quick) their mutants are judged by the gate's steps before verification, as is
# their control.
SPEC_BACKENDS: dict[str, str] = {"hopper": "gluon", "hopper_three_sets": "gluon", "hopper_three_sets_causal": "gluon", "hopper_four_sets": "gluon", "hopper_o_via_kv": "gluon", "hopper_persistent": "gluon", "hopper_chain": "gluon", "hopper_o_via_q": "gluon", "hopper_alibi": "gluon", "hopper_decode": "gluon", "blackwell": "gluon", "cuda": "cuda"}

# A base planned from the planner's first candidate with these parameters rather than its first choice (one generate
# falls back to, or the tuner times): gluon.gpucheck.base_kernel for GLUON_MUTANTS, selftest.run._base for the TL ones.
SPEC_PLAN: dict[str, dict[str, int]] = {"hopper": {"BM": 128, "warps": 8}, "hopper_chain": {"chain": 1}}


def base_params(key: str) -> dict[str, int] | None:
    """All the parameters of a spec's SPEC_PLAN base: the planner's first Hopper-form candidate with SPEC_PLAN's; None
    where the spec has no SPEC_PLAN (its base is generate's choice)."""
    if key not in SPEC_PLAN:
        return None
    from ..plan.hopper import hopper_candidates
    from ..targets import get_target

    spec, target = SPECS[key]
    want = SPEC_PLAN[key]
    return next(c.params for c in hopper_candidates(spec, get_target(target)) if all(c.params.get(k) == v for k, v in want.items()))


@dataclass(frozen=True)
class Mutant:
    name: str
    spec: str  # a key of SPECS
    # "tl" (kernel.tl, put through every gate), "kernel" (the generated source, verified) or
    # "model" (the generated source rewritten as a model writes it, ``model_style``, and judged as
    # a model's module is: the LLM path's static gate, then verification in the sandbox)
    where: str
    old: str  # a regular expression that must match exactly once in that text
    new: str  # its replacement (re.sub syntax)
    what: str  # the bug, in words
    equivalent: str | None = None  # why it computes the same thing, for a mutant that should survive
    every: bool = False  # edit every match (at least one), not exactly one

    def apply(self, text: str) -> str:
        found = len(re.findall(self.old, text, flags=re.MULTILINE))
        if found != 1 and not (self.every and found):
            raise AttnforgeError(f"mutant {self.name}: its pattern matches {found} times, not {'at least ' if self.every else ''}once", where=f"selftest {self.name}",
                                 hint="the planner's or translator's output changed: update the mutant's pattern in attnforge/selftest/mutants.py")
        return re.sub(self.old, self.new, text, flags=re.MULTILINE)


_SPLIT = r"min\(Sk // BN, max\(0, m \* BM \+ Sk - Sq \+ 1\) // BN\)"

MUTANTS: tuple[Mutant, ...] = (
    # ---- TL programs: loop bounds and masks
    Mutant("kv_loop_end_minus_one", "causal", "tl", r"(: cdiv\(max\(0, min\(Sk, \(m \+ 1\) \* BM \+ Sk - Sq\)\), BN\)) pipeline",
           r"\1 - 1 pipeline", "the masked K/V loop stops one tile early"),
    Mutant("causal_mask_off_by_one", "causal", "tl", r"kv_idx <= q_idx \+ Sk - Sq$", "kv_idx < q_idx + Sk - Sq",
           "the causal mask hides the diagonal key"),
    Mutant("causal_alignment_swapped", "causal", "tl", r"kv_idx <= q_idx \+ Sk - Sq$", "kv_idx <= q_idx",
           "the causal mask is aligned top-left where the spec says bottom-right"),
    # ---- TL programs in the Hopper form (the gluon backend): synchronisation
    Mutant("hopper_k_wait_dropped", "hopper", "tl", r"^        Wait k_ready\[j % stages\] phase \(j // stages\) % 2\n", "",
           "the compute role reads a K slot without waiting for its TMA copy", every=True),
    Mutant("hopper_free_wait_wrong_phase", "hopper", "tl", r"Wait k_free\[j % stages\] phase \(j // stages \+ 1\) % 2",
           "Wait k_free[j % stages] phase (j // stages) % 2", "the load role waits for a free K slot on the wrong phase (slots start free)"),
    Mutant("hopper_v_stage_wrong", "hopper", "tl", r"Compute GEMM P, Vs\[j % stages\]", "Compute GEMM P, Vs[(j + 1) % stages]",
           "the PV GEMM reads another ring slot than the one it waited for", every=True),
    Mutant("hopper_slot_released_early", "hopper", "tl", r"^(\s*)Wait GEMM O_acc\n(\s*)(Arrive v_free\[j % stages\])\n",
           r"\2\3\n\1Wait GEMM O_acc\n", "a V slot is given back before the PV GEMM that reads it has finished", every=True),
    Mutant("hopper_k_slot_released_early", "hopper", "tl", r"^(\s*)Wait GEMM S\n(\s*)(Arrive k_free\[j % stages\])\n",
           r"\2\3\n\1Wait GEMM S\n", "a K slot is given back before the QK^T GEMM that reads it has finished", every=True),
    Mutant("causal_split_plus_one", "causal", "tl", f"for j = 0 : {_SPLIT} pipeline(.*\\n(?:    .*\\n)*end\\nfor j = ){_SPLIT}",
           r"for j = 0 : min(Sk // BN, max(0, m * BM + Sk - Sq + 1) // BN) + 1 pipeline\1min(Sk // BN, max(0, m * BM + Sk - Sq + 1) // BN) + 1",
           "the unmasked loop runs into the diagonal tile"),
    Mutant("causal_split_minus_one", "causal", "tl", f"for j = 0 : {_SPLIT} pipeline(.*\\n(?:    .*\\n)*end\\nfor j = ){_SPLIT}",
           r"for j = 0 : max(0, min(Sk // BN, max(0, m * BM + Sk - Sq + 1) // BN) - 1) pipeline\1max(0, min(Sk // BN, max(0, m * BM + Sk - Sq + 1) // BN) - 1)",
           "the masked loop starts one tile earlier",
           equivalent="the extra tile goes through the masked loop, whose Mask keeps every key of a whole tile: only speed changes"),
    Mutant("window_left_off_by_one", "window", "tl", r"kv_idx >= q_idx \+ Sk - Sq - window_left", "kv_idx > q_idx + Sk - Sq - window_left",
           "the window hides its leftmost key"),
    Mutant("window_right_off_by_one", "window", "tl", r"kv_idx <= q_idx \+ Sk - Sq \+ window_right$", "kv_idx < q_idx + Sk - Sq + window_right",
           "the window hides its rightmost key"),
    Mutant("window_loop_start_plus_one", "window", "tl", r"for j = (max\(0, m \* BM \+ Sk - Sq - window_left\) // BN) :",
           r"for j = \1 + 1 :", "the K/V loop skips the first tile the window reaches"),
    Mutant("gqa_map_changed", "causal", "tl", r"at k\[b, h // \(Hq // Hkv\)\]", "at k[b, h % Hkv]",
           "query head h reads key head h % Hkv instead of h // (Hq // Hkv)"),
    # ---- TL programs: the online softmax and its epilogue
    Mutant("rescale_dropped", "causal", "tl", r"(Compute OnlineSoftmax S state m_i, l_i) rescale O_acc (and get P)\n(?=    Compute Cast P to qkv\n    Reshape P from mma_c to mma_a\n    Copy V \(BN, Dv\) at \[j, 0\] from global to shared Vs\n    Copy Vs from shared to register Vr\n    Compute GEMM P, Vr and accumulate O_acc\nend\nCompute)",
           r"\1 \2\n", "the accumulator is not rescaled when the running max grows (masked loop)"),
    Mutant("normalize_dropped", "causal", "tl", r"Compute Normalize O_acc by l_i and get O_r", "Compute Multiply O_acc, 1.0 and get O_r",
           "O is not divided by the softmax sum"),
    Mutant("lse_not_stored", "causal", "tl", r"^Copy lse_r \(BM\) at \[m\] from register to global LSE\n", "",
           "the log-sum-exp is never written"),
    Mutant("exp2_scaling", "causal", "tl", r"^(    Compute Multiply S, scale)\n(    Compute Mask)", r"\1 * 1.4426950408889634\n\2",
           "scores scaled by log2(e) as for an exp2 softmax, but exponentiated with exp"),
    Mutant("accumulator_in_bf16", "causal", "tl", r"Allocate O_acc in register \(BM, Dv\) : acc = 0", "Allocate O_acc in register (BM, Dv) : qkv = 0",
           "O is accumulated in bf16 instead of fp32"),
    # ---- TL programs: score modifiers
    Mutant("alibi_sign_flipped", "alibi", "tl", r"ScoreMod S with score - alibi_slopes", "ScoreMod S with score + alibi_slopes",
           "the ALiBi bias is added instead of subtracted", every=True),
    Mutant("softcap_dropped", "alibi", "tl", r"^    Compute ScoreMod S with softcap \* tanh\(score / softcap\)\n", "",
           "the softcap is never applied", every=True),
    Mutant("top_left_as_bottom_right", "alibi", "tl", r"kv_idx <= q_idx$", "kv_idx <= q_idx + Sk - Sq",
           "a top-left causal mask aligned bottom-right"),
    # ---- TL programs: split-KV decode
    Mutant("decode_combine_weights_dropped", "decode", "tl", r"Compute Multiply o_s, w and get o_w", "Compute Multiply o_s, 1.0 and get o_w",
           "the combine kernel adds the partial outputs without their softmax weights"),
    Mutant("decode_split_start_plus_one", "decode", "tl", r"for j = 0 \+ s \* (cdiv\(max\(0, cdiv\(Sk, BN\) - 0\), NSPLIT\)) :",
           r"for j = 0 + s * \1 + 1 :", "each split skips its first K/V tile"),
    Mutant("decode_combine_normalize_dropped", "decode", "tl", r"(lse_s\n(?:.*\n)*?end\n)Compute Normalize O_acc by l_i and get O_r",
           r"\1Compute Multiply O_acc, 1.0 and get O_r", "the combine kernel does not divide by the merged softmax sum"),
    # ---- TL programs: packed GQA (rows r = (head hk * G + r % G, position r // G))
    Mutant("packed_q_heads_wrong_group", "speculative", "tl", r"at q\[b, hk \* \(Hq // Hkv\)\] pack", "at q[b, hk] pack",
           "the packed Q rows of K/V head hk read query heads hk .. hk + G - 1 instead of its own group"),
    Mutant("packed_alibi_group_head", "speculative", "tl", r"alibi_slopes\[h_idx\]", "alibi_slopes[hk * (Hq // Hkv)]",
           "every packed row takes the ALiBi slope of its group's first head instead of its own"),
    Mutant("packed_o_view_unpacked", "decode", "tl", r"Allocate O in global \(Hq // Hkv \* Sq, Dv\) at o_part\[b, s, hk \* \(Hq // Hkv\)\] pack Hq // Hkv",
           "Allocate O in global (Sq, Dv) at o_part[b, s, hk * (Hq // Hkv)]",
           "the partial outputs of packed rows are stored through a view that is not packed"),
    # ---- generated kernels
    Mutant("running_max_not_subtracted", "causal", "kernel", r"(?s)(.*)P = tl\.math\.exp2\(S - m_i_safe\[:, None\]\)", r"\1P = tl.math.exp2(S)",
           "the masked loop exponentiates scores without subtracting the running max"),
    Mutant("decode_running_max_held_at_zero", "decode", "kernel", r"m_i_new = tl\.maximum\(m_i, tl\.max\(S, axis=1\)\)",
           "m_i_new = tl.maximum(m_i, tl.max(S, axis=1) * 0.0)",
           "the split-KV partial kernel's running max stays 0: exact but for overflow, caught only where a one-row query's logits are large", every=True),
    Mutant("exp_for_exp2", "causal", "kernel", r"(?s)(.*)P = tl\.math\.exp2\(S - m_i_safe\[:, None\]\)", r"\1P = tl.exp(S - m_i_safe[:, None])",
           "exp where the base-2 softmax needs exp2 (masked loop)"),
    Mutant("log2e_not_folded", "causal", "kernel", r"S = S \* \(scale \* 1\.4426950408889634\)", "S = S * scale",
           "the scores enter the base-2 softmax without log2(e)", every=True),
    Mutant("lse_without_max", "causal", "kernel", r"lse_r = tl\.where\(l_i > 0, m_i \* 0\.6931471805599453 \+ tl\.log\(l_i\)",
           "lse_r = tl.where(l_i > 0, tl.log(l_i)", "the log-sum-exp leaves out the running max"),
    Mutant("lse_max_left_in_base_2", "causal", "kernel", r"m_i \* 0\.6931471805599453 \+ tl\.log", "m_i + tl.log",
           "the log-sum-exp adds the base-2 running max as if it were in nats"),
    Mutant("empty_row_guard_dropped", "window", "kernel", r'm_i_safe = tl\.where\(m_i_new == float\("-inf"\), 0\.0, m_i_new\)',
           "m_i_safe = m_i_new", "a row that has seen no key yet computes exp(-inf + inf) = NaN"),
    Mutant("o_strides_swapped", "window", "kernel", r"(O_rows\[:, None\] \* )stride_o2( \+ O_cols\[None, :\] \* )stride_o3", r"\1stride_o3\2stride_o2",
           "O is written transposed (its row and column strides swapped)"),
    Mutant("v_tail_read_past_sk", "window", "kernel", r"(Vs = tl\.load\(V \+ .*), mask=\(Vs_rows < Sk\)\[:, None\], other=0\.0\)", r"\1)",
           "the last V tile is read whole: rows past Sk (another head's, or past the tensor) weighted by P = 0"),
    Mutant("rows_past_sq_written", "window", "kernel", r"tl\.store\(O \+ (.*), mask=\(O_rows < Sq\)\[:, None\]\)", r"tl.store(O + \1)",
           "the O store is not masked at Sq: rows past the end are written"),
    Mutant("last_16_rows_dropped", "causal", "kernel", r"mask=\(O_rows < Sq\)\[:, None\]\)", "mask=(O_rows < Sq - 16)[:, None])",
           "the last 16 rows of O are never written"),
    Mutant("accumulator_rounded_to_bf16", "causal", "kernel", r"O_acc = tl\.dot\(P, Vr, O_acc\)", "O_acc = tl.dot(P, Vr, O_acc).to(tl.bfloat16).to(tl.float32)",
           "O_acc is rounded to bf16 after every K/V tile (a 16-bit accumulator)", every=True),
    Mutant("packed_row_position_head_major", "speculative", "kernel", r"Qs_pos = Qs_rows // \(Hq // Hkv\)", "Qs_pos = Qs_rows % Sq",
           "packed Q rows take the position r % Sq (head-major order) while their head is r % G"),
    Mutant("packed_row_head_rotated", "decode", "kernel", r"Qs_slot = Qs_rows % \(Hq // Hkv\)", "Qs_slot = (Qs_rows + 1) % (Hq // Hkv)",
           "each packed Q row reads the next query head of its group"),
    # a launch of one split stores into o and lse itself (triton/launcher.py): taken at every split count, the splits overwrite each other
    Mutant("triton_decode_one_split_for_every_count", "decode", "kernel", r"one = NSPLIT == 1  #", "one = True  #",
           "the partial kernel stores into o and lse at every split count: each split's partial result overwrites the others', unmerged"),
    # ---- a model's kernel module (``--translate llm``, ``--mode direct``): the same bugs must not slip
    # through the LLM path's gate, and neither may a module that computes on the host
    Mutant("model_scale_dropped", "window", "model", r"^(\s*)S = S \* \(scale \* 1\.4426950408889634\)$", r"\1S = S * 1.4426950408889634",
           "a model's kernel forgets the softmax scale"),
    Mutant("model_lse_not_stored", "window", "model", r"^\s*tl\.store\(LSE \+ .*\n", "",
           "a model's kernel never writes the log-sum-exp"),
    Mutant("model_host_attention", "window", "model", r"^(\s*)(attn_fwd\[)",
           r"\1o.copy_(torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v)\n\1\2",
           "a model's module computes attention with torch on the host beside its kernel"),
    # ---- CUDA kernels a model wrote (--translate llm --backend cuda): the CUDA gate and the lint
    Mutant("model_cuda_inline_asm", "cuda", "model", r"^(    float scale\) \{)$", r'\1\n    asm volatile("membar.gl;");',
           "a model's CUDA kernel writes its own inline PTX"),
    Mutant("model_cuda_waits_dropped", "cuda", "model", r"^\s*af_cp_wait<\d+>\(\);[^\n]*\n", "",
           "a model's CUDA kernel waits for no cp.async group before reading shared memory", every=True),
    Mutant("model_cuda_wait_intercepted", "cuda", "model", r'^(extern "C" __global__)',
           r"template <> __device__ __forceinline__ void af_cp_wait<0>() {}\n\1",
           "a model's CUDA file specialises the prelude's af_cp_wait to wait for nothing (the lint's text still matches)"),
    Mutant("tma_box_wrong", "causal", "kernel", r'k_desc = tma_descriptor\(k, "k", \[1, 1, (\d+), (\d+)\](, checked=checked)?\)',
           r'k_desc = tma_descriptor(k, "k", [1, 1, \1 // 2, \2]\3)', "the K descriptor's box is half a tile"),
)


# Mutants of the CUDA backend's output (kernel_cuda.cu). Not in MUTANTS: ``attnforge selftest``
# plants kernel mutants in the default (Triton) kernel and verifies on the CPU, where CUDA kernels
# cannot run. ``python -m attnforge.backends.cuda.gpucheck --phase mutants`` plants them in the
# CUDA kernel of their spec and verifies on a GPU; the backend's static lint (``cuda.compile.lint``)
# also catches the missing wait before any GPU runs.
CUDA_MUTANTS: tuple[Mutant, ...] = (
    Mutant("cuda_fragment_rows_swapped", "causal", "kernel",
           r"\[0\] = af_pack\(P\[af_mt\]\[2 \* af_k\]\[0\], P\[af_mt\]\[2 \* af_k\]\[1\]\);\n(\s*af_P_a\[af_mt\]\[af_k\])\[1\] = af_pack\(P\[af_mt\]\[2 \* af_k\]\[2\], P\[af_mt\]\[2 \* af_k\]\[3\]\);",
           r"[0] = af_pack(P[af_mt][2 * af_k][2], P[af_mt][2 * af_k][3]);\n\1[1] = af_pack(P[af_mt][2 * af_k][0], P[af_mt][2 * af_k][1]);",
           "P's accumulator rows g and g+8 are swapped when packed into A fragments (a wrong fragment-to-row mapping)", every=True),
    Mutant("cuda_cp_async_wait_missing", "causal", "kernel",
           r"(// TL: Copy K \(BN, D\) at \[j, 0\] from global to shared Ks\n\s*)af_cp_wait<\d+>\(\);[^\n]*\n",
           r"\1", "the K tile is read without waiting for its cp.async group (the barrier alone does not wait for cp.async)", every=True),
    # the walking-pointer copies, the softmax's FFMA form and Normalize's reciprocal (2026-12-01 run 6)
    Mutant("cuda_copy_walks_a_row_short", "causal", "kernel",
           r"const long long af_step = \(long long\)(\d+) \* stride_k2;",
           r"const long long af_step = (long long)(\1 - 1) * stride_k2;",
           "a K copy thread's pointer steps one row short a pass: every trip after its first loads the wrong key rows", every=True),
    Mutant("cuda_folded_scale_without_log2e", "causal", "kernel",
           r"const float af_c_S = \(scale\) \* 1\.4426950408889634f;",
           "const float af_c_S = (scale);",
           "the scale folded into the softmax's exp2 FFMA leaves out log2(e): the weights are 2^(s * scale), not e^(s * scale)", every=True),
    # the lazy rescale (the max moves only when a row of the warp grew past 2^8)
    Mutant("cuda_lazy_rescale_keeps_the_row_sum", "causal", "kernel",
           r"^\s*l_i\[af_mt\]\[af_r\] \*= af_alpha;\n", "",
           "when the running max moves, O is rescaled but the row sum is not", every=True),
    Mutant("cuda_lazy_rescale_votes_all", "causal", "kernel",
           r"__any_sync\(0xffffffffu, af_grow\)", "__all_sync(0xffffffffu, af_grow)",
           "the warp moves its max only when every row grew past 2^8: a row that grew alone weighs its keys past 2^8, unbounded", every=True),
    Mutant("cuda_natural_shift_without_log2e", "alibi", "kernel",
           r"(const float af_shift = -\(m_i\[af_mt\]\[af_r\] == -INFINITY \? 0\.0f : m_i\[af_mt\]\[af_r\]\)) \* 1\.4426950408889634f;",
           r"\1;", "a softmax in natural units (a score modifier) subtracts its running max from a base-2 exponent unconverted",
           every=True),
    # the row predicate of a copy that may run past the view (verification's K and V sit inside NaN rows: a V row read past Sk
    # poisons P @ V even where P is 0)
    Mutant("cuda_v_tail_copy_unpredicated", "causal", "kernel",
           r"(const bool af_in = )af_r < af_rows && (af_col < \d+;\n\s*af_copy16\([^;]*: V, af_in\);)", r"\1\2",
           "V's copies that may cross Sk lose their row predicate: the tail tile reads the rows past the view", every=True),
    Mutant("cuda_normalize_reads_the_other_rows_sum", "causal", "kernel",
           r"\* af_inv_(\w+)\[af_mt\]\[af_e >> 1\];",
           r"* af_inv_\1[af_mt][af_e & 1];",
           "Normalize divides each output element by the sum of the row its column parity names, not its own row's"),
    # split-KV decode (packed GQA, the combine kernel): run by the CUDA GPU check
    Mutant("cuda_packed_q_rows_transposed", "decode", "kernel",
           r"Q \+ \(long long\)\(\(af_vr\) % \(Hq / Hkv\)\) \* stride_q1 \+ \(long long\)\(\(af_vr\) / \(Hq / Hkv\)\) \* stride_q2",
           "Q + (long long)((af_vr) / (Hq / Hkv)) * stride_q1 + (long long)((af_vr) % (Hq / Hkv)) * stride_q2",
           "a packed Q row's head and position swapped (row r read as head r // G at position r % G)"),
    Mutant("cuda_combine_rescale_dropped", "decode", "kernel",
           r"const float af_alpha = af_exp\(m_i\[af_mt\]\[af_r\] - af_safe\);(\n\s*const float af_p = af_exp\(af_x - af_safe\);\n\s*w\[)",
           r"const float af_alpha = 1.0f;\1",
           "the combine does not rescale its running sum and output when a later split's log-sum-exp raises the max"),
)


# Mutants of the gluon backend's output (kernel_gluon.py): the synchronisation bugs a Hopper kernel can
# have and the TL checker cannot see once the TL is right (a translator bug). Not in MUTANTS: Gluon
# kernels run natively on Hopper only. ``python -m attnforge.backends.gluon.gpucheck --phase mutants``
# plants each in its spec's kernel and verifies it on the GPU in a process with a deadline (a hang
# is a catch); the CPU tests check that each still compiles, so the verification is what must catch it.
# two or more tile loops (three or four warpgroups): the edge between the unmasked and the masked loop; a set's TMA box of Q
_LOOP_EDGE = r"gl\.minimum\(gl\.maximum\(lo, split - 1\), hi - 1\)"
_Q_BOX_ROWS = r"\(m\) \* BM \+ w \* HM, "

GLUON_MUTANTS: tuple[Mutant, ...] = (
    Mutant("gluon_first_k_wait_dropped", "hopper", "kernel",
           r"^\s*mbarrier\.wait\(k_ready\.index\(\(lo % stages\)\), \(\(lo // stages\) % 2\)\)\n", "",
           "the first K tile is read by the QK^T GEMM without waiting for its TMA copy to land"),
    Mutant("gluon_v_wait_wrong_phase", "hopper", "kernel",
           r"mbarrier\.wait\(v_ready\.index\(\(j % stages\)\), \(\(j // stages\) % 2\)\)",
           "mbarrier.wait(v_ready.index((j % stages)), (((j // stages) + 1) % 2))",
           "the V slot's wait checks the other phase: it passes before the copy lands (or never)"),
    Mutant("gluon_v_wrong_stage", "hopper", "kernel",
           r"v_t = Vs\.index\(\(j % stages\)\)", "v_t = Vs.index(((j + 1) % stages))",
           "the PV GEMM reads the next ring slot's V tile instead of tile j's"),
    Mutant("gluon_overlap_k_of_this_tile", "hopper", "kernel",
           r"k_t = Ks\.index\(\(\(j \+ 1\) % stages\)\)", "k_t = Ks.index((j % stages))",
           "the overlapped loop's QK^T for tile j + 1 reads tile j's K slot (the j + 1 substitution lost)"),
    Mutant("gluon_k_free_one_warpgroup", "hopper", "kernel",
           r"mbarrier\.init\(k_free\.index\(i\), count=\(1\) \* 2\)", "mbarrier.init(k_free.index(i), count=1)",
           "a K slot is free after the first warpgroup's QK^T: the load warp may refill it under the second's"),
    Mutant("gluon_v_free_one_warpgroup", "hopper", "kernel",
           r"mbarrier\.init\(v_free\.index\(i\), count=\(1\) \* 2\)", "mbarrier.init(v_free.index(i), count=1)",
           "a V slot is free after the first warpgroup's release: the load warp may refill it under the second"),
    Mutant("gluon_turns_not_taken", "hopper", "kernel",
           r"^\s*_take_turn\(WG\)[^\n]*\n", "",
           "the two warpgroups issue their GEMMs without taking turns", every=True,
           equivalent="the turns only order the warpgroups' GEMM issue (speed): each warpgroup's own data flow is unchanged"),
    Mutant("gluon_first_turn_never_passed", "hopper", "kernel",
           r"^(\s*)if WG == SETS - 1:  # warpgroup 0 takes the first turn\n\s*_pass_turn\(WG\)\n", "",
           "the last warpgroup never passes the first turn: each warpgroup waits on its named barrier for the one before (a hang)"),
    Mutant("gluon_softmax_max_units_mixed", "hopper_alibi", "kernel",
           r"P = gl\.exp2\(S \* 1\.4426950408889634 - gl\.expand_dims\(m_use, 1\)\)\n(\s*)alpha = gl\.exp2\(m_i - m_use\)"
           r"([\s\S]*?)\(m_i \+ gl\.log2\(l_i\)\) \* 0\.6931471805599453",
           r"P = gl.exp2(S * 1.4426950408889634 - gl.expand_dims(m_use * 1.4426950408889634, 1))\n\1alpha = gl.exp2((m_i - m_use) * 1.4426950408889634)"
           r"\2m_i + gl.log2(l_i) * 0.6931471805599453",
           "the pre-fix natural-units softmax (bec40cc, caught by the GPU grid): its running max, kept as max(S) * log2(e), used as a "
           "natural-units shift; exact in O and the LSE until a row's scores are far below zero, then exp2 overflows"),
    # persistent (one program per SM walks the work tiles): the ring position and Q's phase carried from tile to tile
    Mutant("gluon_persistent_ring_restarts", "hopper_persistent", "kernel", r"^(\s*)it \+= hi - \(lo\)$", r"\1it += 0",
           "the compute warpgroups start each work tile at ring position 0 while the load warp carries on: they wait on slots "
           "and phases of another tile's copies"),
    Mutant("gluon_persistent_q_phase_stuck", "hopper_persistent", "kernel", r"mbarrier\.wait\(q_ready, \(\(0\) \+ tiles\) % 2\)",
           "mbarrier.wait(q_ready, 0)",
           "the wait for Q keeps phase 0: from the second work tile on it passes at once and the GEMMs read the previous tile's Q"),
    # chained work tiles: the next tile's Q in the other parity's slots, on the other parity's barrier
    Mutant("gluon_chain_next_q_from_this_tiles_slots", "hopper_chain", "kernel",
           r"q_n = Qs\.index\(\(\(tiles \+ 1\) % 2\) \* SETS \+ WG\)", "q_n = Qs.index(((tiles) % 2) * SETS + WG)",
           "the next work tile's first QK^T GEMM reads this tile's slots of Qs: every work tile after a program's first scores its "
           "first K/V tile against the tile before's Q"),
    Mutant("gluon_chain_next_q_wait_a_phase_early", "hopper_chain", "kernel",
           r"mbarrier\.wait\(q_ready\.index\(\(tiles \+ 1\) % 2\), \(\(0\) \+ \(tiles \+ 1\) // 2\) % 2\)",
           "mbarrier.wait(q_ready.index((tiles + 1) % 2), ((0) + (tiles + 1) // 2 + 1) % 2)",
           "the wait for the next work tile's Q is on the phase before: from the third work tile on it passes at once (or hangs "
           "once the copies run ahead), and the first QK^T GEMM may read Q before its copy lands"),
    # the Mask as per-row key bounds: the causal bound one key late
    Mutant("gluon_causal_bound_a_key_late", "hopper", "kernel", r"gl\.minimum\(\(Sk\) - 1, \(\(\(rows \+ Sk\) - Sq\)\)\)\)",
           "gl.minimum((Sk) - 1, (((rows + Sk) - Sq)) + 1))",
           "each row's upper key bound one past its diagonal: every row also sees the next query's key"),
    # Q in registers (qreg = 1; the persistent kernel gives Qs back to the load warp once it has read it)
    Mutant("gluon_qreg_qk_still_reads_qs", "hopper_persistent", "kernel", r"warpgroup_mma\(q_r, k_t", "warpgroup_mma(q_t, k_t",
           "the QK^T GEMMs read Q from Qs after Qs was given back at the work tile's start: the load warp's copy of the next work "
           "tile's Q may overwrite it under this tile's loop", every=True),
    Mutant("gluon_ostage_rows_of_one_warpgroup", "hopper_persistent", "kernel", r"\(m\) \* BM \+ WG \* HM, ", "(m) * BM, ",
           "both warpgroup sets' TMA stores of O go to the first set's rows: the second half of every row tile is never written"),
    Mutant("gluon_ostage2_stores_the_other_warpgroups_rows", "hopper_o_via_q", "kernel", r"o_desc, \[(.*)\], Qs\.index\(WG\)\)",
           r"o_desc, [\1], Qs.index((WG + 1) % SETS))",
           "with O out through Qs, each warpgroup set's TMA store takes the next set's rows of Qs: the row tile's shares swapped round"),
    # three warpgroups (BM = 192): the edge between the unmasked and the masked tile loop, and Q's box per warpgroup
    Mutant("gluon_three_sets_mask_a_tile_late", "hopper_three_sets", "kernel", _LOOP_EDGE,
           "gl.minimum(gl.maximum(lo, split), hi - 1)",
           "the unmasked loop runs a tile past split: the tail tile is scored without the Mask (keys past Sk, read as zeros, weigh in)", every=True),
    Mutant("gluon_three_sets_causal_bound_a_key_late", "hopper_three_sets_causal", "kernel",
           r"kv_idx <= gl\.expand_dims\(gl\.minimum\(\(Sk\) - 1, \(\(\(rows \+ Sk\) - Sq\)\)\), 1\)",
           "kv_idx <= gl.expand_dims(gl.minimum((Sk) - 1, (((rows + Sk) - Sq)) + 1), 1)",
           "three warpgroups' causal bound (against the keys' indices) one past each row's diagonal"),
    Mutant("gluon_three_sets_q_boxes_at_one_row", "hopper_three_sets", "kernel", _Q_BOX_ROWS, "(m) * BM, ",
           "each warpgroup's TMA box of Q reads the first warpgroup's rows: warpgroups 1 and 2 score the first 64 rows' queries"),
    # four warpgroups (BM = 256): the same edges with four sets of rows, and each set's slot of the O staging tile
    Mutant("gluon_four_sets_mask_a_tile_late", "hopper_four_sets", "kernel", _LOOP_EDGE,
           "gl.minimum(gl.maximum(lo, split), hi - 1)",
           "four warpgroups' unmasked loop runs a tile past split: the partial tail tile is scored without the Mask", every=True),
    Mutant("gluon_four_sets_q_boxes_at_one_row", "hopper_four_sets", "kernel", _Q_BOX_ROWS, "(m) * BM, ",
           "each of the four warpgroups' TMA boxes of Q reads the first warpgroup's rows: warpgroups 1-3 score the first 64 rows' queries"),
    Mutant("gluon_four_sets_o_rows_of_one_warpgroup", "hopper_four_sets", "kernel", r"\(m\) \* BM \+ WG \* HM, ", "(m) * BM, ",
           "the four warpgroups' TMA stores of O from their staging slots all go to the first set's rows: rows 64-255 of every row "
           "tile are never written"),
    # O through the last K/V tile's slots (ostage = 3): the slot each set's rows of O go through (the races of a dropped pair
    # barrier or a slot given back before its store are the CPU replay's: tests/test_gluon_persistent.py)
    Mutant("gluon_o_via_kv_set0_writes_the_v_slot", "hopper_o_via_kv", "kernel", r"o_t = Ks\.index\(", "o_t = Vs.index(",
           "set 0 stages its rows of O in the last tile's V slot too, as soon as set 1's last QK^T is done: set 1's last PV GEMM may "
           "read them as V, and set 1's rows overwrite set 0's under its store"),
    Mutant("gluon_o_via_kv_store_from_qs", "hopper_o_via_kv", "kernel",
           r"tma\.async_copy_shared_to_global\(o_desc, \[(.*)\], o_t\)", r"tma.async_copy_shared_to_global(o_desc, [\1], Qs.index(WG))",
           "the TMA store of O reads the set's rows of Qs, not the slot O was written into: every row tile's O is its Q (or the next "
           "work tile's, copied there since)"),
    # split-KV decode, the partial kernel's split bounds: a split's key range a tile short (the compute role's hi only)
    Mutant("gluon_decode_split_ends_a_tile_early", "hopper_decode", "kernel", r"^(    hi = gl\.minimum\(.*\))$", r"\1 - 1",
           "each split's compute loop stops one K/V tile short of its share: the last tile of every split is never seen"),
    # its packed rows: row r is head hk * G + r % G at position r // G
    Mutant("gluon_decode_packed_row_head_lost", "hopper_decode", "kernel",
           r"q_ptrs = q_base \+ gl\.expand_dims\(\(q_rows % \(\(Hq // Hkv\)\)\) \* sq_h \+ ", "q_ptrs = q_base + gl.expand_dims(",
           "the packed rows' query heads are lost in the copy of Q: every row of a position reads the group's first head"),
    # a launch of one split stores into o and lse itself (emit's _split_kv_setup): taken for any split count, the splits race on o
    Mutant("gluon_decode_one_split_for_every_count", "hopper_decode", "kernel", r"one = NSPLIT == 1 and o\.stride\(3\) == 1",
           "one = o.stride(3) == 1",
           "the partial kernel stores into o and lse at every split count: each split's partial result overwrites the others', unmerged"),
    # the merge of the splits by the last of them (gluon/merge.py): its rescale, who merges, the counter set back
    Mutant("gluon_decode_merge_rescale_dropped", "hopper_decode", "kernel", r"acc = acc \* gl\.expand_dims\(alpha, 1\) \+ o_(\d) \* ",
           r"acc = acc + o_\1 * ",
           "the merge adds each split's weighted output without rescaling the sum so far when the running max grows", every=True),
    Mutant("gluon_decode_merge_a_split_early", "hopper_decode", "kernel", r"if arrived == NSPLIT - 1:", "if arrived == NSPLIT - 2:",
           "the next-to-last split of a row tile to finish merges, before the last has stored its part (the last then finds the counter "
           "set back: with 3 splits or more nobody merges it in). A race: the native gate sees it only where the last split's stores "
           "come after the early merge's reads (killed on the H200 in run 13 call 1; it survived call 3 and run 17 call 2, at two programs an SM, where "
           "a row tile's splits finish within the merge's latency of each other); the numpy run of the merge on the CPU kills it always"),
    Mutant("gluon_decode_merge_counter_kept", "hopper_decode", "kernel", r"^\s*gl\.store\(counters \+ tile, 0\)[^\n]*\n", "",
           "the merging split leaves its row tile's counter at NSPLIT: the next launch on the stream merges at the wrong arrival, "
           "or never (o is not written)"),
    # sm_100 (tcgen05 into tensor memory): run by gpucheck on a Blackwell GPU only
    Mutant("tcgen05_s_wait_dropped", "blackwell", "kernel",
           r"(tcgen05_mma\(q_t, k_t, s_tmem, [^\n]*\n\s*# TL: Wait GEMM S\n)\s*mbarrier\.wait\(mma_bar, mma_phase\)\n\s*mma_phase \^= 1\n", r"\1",
           "S is loaded from tensor memory without waiting for the QK^T MMA that writes it"),
    Mutant("tcgen05_pv_overwrites_o", "blackwell", "kernel",
           r"tcgen05_mma\(p_tmem, v_t, o_tmem, use_acc=True", "tcgen05_mma(p_tmem, v_t, o_tmem, use_acc=False",
           "the PV MMA overwrites O in tensor memory instead of accumulating into it"),
    Mutant("tcgen05_rescale_dropped", "blackwell", "kernel",
           r"^\s*o_tmem\.store\(o_tmem\.load\(o_layout\) \* [^\n]*\n", "",
           "O in tensor memory is not rescaled when the running max grows"),
    Mutant("tcgen05_v_wrong_stage", "blackwell", "kernel",
           r"v_t = Vs\.index\(\(j % stages\)\)", "v_t = Vs.index(((j + 1) % stages))",
           "the PV MMA reads the next ring slot's V tile instead of tile j's"),
)


def specs_used() -> list[str]:
    return sorted({m.spec for m in MUTANTS})
