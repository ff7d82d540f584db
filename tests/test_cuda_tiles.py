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


def test_bn128_only_for_a_plain_d128_score_where_two_stages_fit():
    plain = AttentionSpec(heads=16, head_dim=128, dtype="bf16", seqlen_q=4096)
    assert _first(cuda, plain, "h200") == dict(BM=128, BN=128, warps=8, stages=2)
    assert _first(cuda, plain, "a100")["BN"] == 64  # 164 KiB of shared memory: two stages of BN=128 do not fit
    for masked in (dict(causal=True), dict(softcap=30.0), dict(window_left=64, window_right=0), dict(alibi_slopes="auto")):
        spec = AttentionSpec(heads=16, head_dim=128, dtype="bf16", seqlen_q=4096, **masked)
        assert _first(cuda, spec, "h200")["BN"] == 64, masked
    assert _first(cuda, AttentionSpec(heads=16, head_dim=96, dtype="fp16", seqlen_q=4096), "h200")["BN"] == 64


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
    assert "for (int af_i = 0; af_i < 8; ++af_i, af_p += af_step) {" in walking  # 64 rows x 16 chunks over 256 threads
    assert "const long long af_step = (long long)16 * stride_k2;  // 16 rows a pass" in walking
    assert "af_src + (long long)af_r *" not in walking
    # D=72: rows of 10 chunks (80 padded columns) do not divide 128 threads' passes: each trip computes its row
    odd = _source(AttentionSpec(heads=8, head_dim=72, dtype="fp16"))
    assert "af_src + (long long)af_r * stride_k2" in odd


def test_the_softmax_is_one_ffma_and_one_ex2_a_score_and_normalize_one_reciprocal_a_row():
    src = _source(AttentionSpec(heads=8, head_dim=64, dtype="fp16"))
    assert "af_exp2(fmaf(S[af_mt][af_nt][2 * af_r + af_c], 1.4426950408889634f, af_shift))" in src
    assert 'asm("ex2.approx.ftz.f32 %0, %1;"' in src
    assert "exp2f(" not in src
    assert "? 1.0f / l_i[af_mt][af_r] : 0.0f;" in src and " / af_l" not in src
