"""The tiles the planner gives the CUDA backend's mma.sync kernels, and what its emitter does with
them, on the CPU: the rules measured on the H200 (bench/RESULTS.md, 2026-12-01 run 6) are the ones
offered, the Triton backend keeps the target's, and the emitted code keeps Q's fragments in
registers, walks one pointer per copy thread and computes the softmax as planned."""

from __future__ import annotations

import re

import pytest

from attnforge import AttentionSpec, get_target
from attnforge.backends import get_backend
from attnforge.plan.builtin import candidates, plans_for

cuda, triton = get_backend("cuda"), get_backend("triton")


def _first(backend, spec, target):
    return next(plans_for(backend, spec, get_target(target))).params


def test_turing_keeps_the_pre_ampere_tiles():
    # 64 KiB of shared memory: 128-row blocks only fit after failed compiles; the old rule compiles first time
    assert _first(cuda, AttentionSpec(heads=8, head_dim=64, dtype="fp16", seqlen_q=4096), "t4") == dict(BM=64, BN=64, warps=4, stages=2)


@pytest.mark.parametrize("target", ["h200", "a100", "l4"])
def test_two_row_tiles_a_warp_at_d64_one_past_it(target):
    d64 = _first(cuda, AttentionSpec(heads=8, head_dim=64, dtype="bf16", seqlen_q=4096), target)
    assert (d64["BM"], d64["warps"]) == (128, 4)  # 128 rows in 4 warps: two m16 tiles each
    d256 = _first(cuda, AttentionSpec(heads=8, head_dim=256, dtype="bf16", seqlen_q=4096), target)
    assert (d256["BM"], d256["warps"]) == (128, 8)


@pytest.mark.parametrize("target", ["h200", "a100"])
def test_two_row_tiles_a_warp_up_to_d128_beside_a_bn32_score(target):
    # measured on the H200 (2026-12-02 run 11): BM=128 in 4 warps with BN=32 and 2 stages, 0.94-1.01x FlashAttention-2
    # on the D = 128 rows against 0.75-0.85x for 8 warps of one row tile; BN = 64 spills there
    for d in (96, 128):
        for extra in ({}, dict(causal=True), dict(softcap=30.0), dict(window_left=64, window_right=0), dict(alibi_slopes="auto")):
            spec = AttentionSpec(heads=16, head_dim=d, dtype="bf16", seqlen_q=4096, **extra)
            assert _first(cuda, spec, target) == dict(BM=128, BN=32, warps=4, stages=2), (d, extra)
    src = _source(AttentionSpec(heads=16, head_dim=128, dtype="bf16", causal=True), target)
    assert "af_ldsm_x4(af_a[af_mt], Qs" in src  # 64 registers of Q fragments do not fit beside 128 of O: read per k slice
    # where two row tiles a warp spill even with 2 stages (D = 112, a modifier), eight warps of one come before 1 stage
    for d in (64, 112, 128):
        params = [p.params for p in plans_for(cuda, AttentionSpec(heads=16, head_dim=d, dtype="bf16", seqlen_q=4096), get_target(target))]
        wide = params.index(dict(BM=128, BN=64, warps=8, stages=3 if d <= 64 else 2))
        assert all(p["stages"] >= 2 for p in params[:wide]) and params[wide - 1]["warps"] == 4, (d, params[:wide + 1])


def test_triton_keeps_the_targets_rules():
    spec = AttentionSpec(heads=16, head_dim=128, dtype="bf16", seqlen_q=4096)
    _, target_rules = candidates(spec, get_target("h200"), refused=set(triton.refused_strategies(get_target("h200"))))
    assert _first(triton, spec, "h200") == target_rules[0].params  # the wgmma rules, not mma.sync's
    assert target_rules[0].params["BN"] == 64 and target_rules[0].params["stages"] == 3


def test_split_kv_partial_kernels_take_bn32_under_mma_sync_only():
    spec = AttentionSpec(batch=64, heads=32, kv_heads=8, head_dim=128, dtype="bf16", seqlen_q=1, seqlen_k=4096)
    assert _first(cuda, spec, "h200")["BN"] == 32
    assert _first(triton, spec, "h200")["BN"] == 64


def _source(spec, target="h200"):
    p = next(plans_for(cuda, spec, get_target(target)))
    return cuda.translate(p.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source


def test_q_stays_in_registers_only_beside_accumulators_that_leave_room():
    kept = _source(AttentionSpec(heads=8, head_dim=64, dtype="bf16"))  # 32 Q + 64 O + 64 S registers
    assert "kept in registers" in kept and "uint32_t Qr[af_MT][4][4];" in kept
    reread = _source(AttentionSpec(heads=8, head_dim=256, dtype="bf16"))  # 64 Q + 128 O + 32 S: over 160
    assert "kept in registers" not in reread
    assert re.search(r"64 registers of A fragments beside 160 of accumulators would crowd them", reread)
    assert "af_ldsm_x4(af_a[af_mt], Qs" in reread  # the QK^T GEMM reads Q from shared memory per k slice


def test_copies_walk_one_pointer_when_a_pass_covers_whole_rows():
    walking = _source(AttentionSpec(heads=8, head_dim=128, dtype="bf16", causal=True))
    assert "for (int af_i = 0; af_i < 4; ++af_i, af_p += af_step) {" in walking  # 32 rows x 16 chunks over 128 threads
    assert "const long long af_step = (long long)8 * stride_k2;  // 8 rows a pass" in walking
    assert "af_src + (long long)af_r *" not in walking
    # D=72: rows of 10 chunks (80 padded columns) do not divide 128 threads' passes: each trip computes its row
    odd = _source(AttentionSpec(heads=8, head_dim=72, dtype="fp16"))
    assert "af_src + (long long)af_r * stride_k2" in odd


def test_the_softmax_is_one_ffma_and_one_ex2_a_score_and_normalize_one_reciprocal_a_row():
    src = _source(AttentionSpec(heads=8, head_dim=64, dtype="fp16"))
    # the scale folded into the FFMA (base 2): S is multiplied only where the scale is not positive
    assert "const float af_c_S = (scale) * 1.4426950408889634f;" in src
    assert re.search(r"if \(!\(af_c_S > 0\.0f\)\) \{[^}]*?S\[af_mt\]\[af_nt\]\[af_e\] \*= af_c_S;", src, re.DOTALL)
    assert "af_exp2(fmaf(S[af_mt][af_nt][2 * af_r + af_c], af_k_S, af_shift))" in src
    assert "af_quad_max(af_mx) * af_k_S" in src  # the max of raw scores, scaled once a row
    assert "m_i[af_mt][af_r] * 0.6931471805599453f + logf(" in src  # the log-sum-exp back from log2 units
    assert 'asm("ex2.approx.ftz.f32 %0, %1;"' in src
    assert "exp2f(" not in src
    assert "? 1.0f / l_i[af_mt][af_r] : 0.0f;" in src and " / af_l" not in src


def test_the_running_max_moves_only_past_2_to_the_8():
    """The lazy rescale: O and l are rescaled (and m moved) in a warp-uniform branch taken when some row of
    the warp grew by more than 8 in log2 units; the weights then use the state's max, so they stay below 2^8."""
    src = _source(AttentionSpec(heads=8, head_dim=128, dtype="bf16", causal=True))
    vote = src.index("if (__any_sync(0xffffffffu, af_grow)) {")
    assert "af_grow |= af_mnew[af_mt][af_r] > m_i[af_mt][af_r] + 8.0f;" in src[:vote]
    branch = src[vote:src.index("float af_sum = 0.0f;", vote)]
    assert "l_i[af_mt][af_r] *= af_alpha;" in branch and "O_acc[af_mt][af_nt][2 * af_r] *= af_alpha;" in branch
    assert "m_i[af_mt][af_r] = af_mnew[af_mt][af_r];" in branch
    assert "const float af_shift = -(m_i[af_mt][af_r] == -INFINITY ? 0.0f : m_i[af_mt][af_r]);" in src[vote:]


def _edited_source(old: str, new: str) -> str:
    from attnforge.tl import parse

    spec = AttentionSpec(heads=8, kv_heads=2, head_dim=64, dtype="fp16")
    text = next(plans_for(cuda, spec, get_target("h200"))).source
    assert old in text
    return cuda.translate(parse(text.replace(old, new, 1)), head_dim=64, head_dim_v=64).source


def test_a_running_max_read_outside_the_softmax_keeps_tls_value(tmp_path):
    """A program that reads m_i elsewhere (here: adds 0 to it before the log-sum-exp) sees TL's running max: no
    vote, the state moved every tile, and no base-2 state either; the kernel still compiles without spills."""
    from attnforge.backends.cuda.compile import compile_for_target

    src = _edited_source("Compute LogSumExp m_i", "Compute Add m_i, 0.0\nCompute LogSumExp m_i")
    assert "__any_sync" not in src and "every tile: the state is read outside the softmax" in src
    assert "af_c_S" not in src  # (base 2 needs the max read by softmaxes and log-sum-exps alone)
    assert all(r.spill_bytes == 0 for r in compile_for_target(src, get_target("h200"), tmp_path))


def test_two_online_softmaxes_in_one_block_compile(tmp_path):
    """Each 2-d softmax's temporaries live in a block of their own: two in one loop body do not collide."""
    from attnforge.backends.cuda.compile import compile_for_target

    line = "    Compute OnlineSoftmax S state m_i, l_i rescale O_acc and get P\n"
    src = _edited_source(line, line + line.replace("get P", "get P2"))  # (its weights unused: a program for the translator only)
    assert src.count("float af_mnew[af_MT][2];") == 3
    compile_for_target(src, get_target("h200"), tmp_path)
