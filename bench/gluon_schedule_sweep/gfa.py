"""The hand-written Hopper Gluon attention the gluon backend's schedules were chosen with (bench/RESULTS.md,
2026-12-01): one 8-warp compute partition (`attention`), or two warpgroups in ping-pong (`attention_pp`),
each with or without the next QK^T issued before the softmax. Kept to re-run the sweep; the product is
src/attnforge/backends/gluon/, which emits this structure from TL."""
import torch, triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (
    tma, mbarrier, warpgroup_mma, warpgroup_mma_wait, fence_async_shared)


@gluon.jit
def _load_role(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar,
               b, h, hk, m, n_tiles, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr):
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [b, h, m * BM, 0], q_bar, q_smem)
    for j in range(n_tiles):
        s = j % STAGES
        mbarrier.wait(free_bar.index(s), (j // STAGES + 1) & 1)
        mbarrier.expect(k_bar.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, hk, j * BN, 0], k_bar.index(s), k_smem.index(s))
        mbarrier.expect(v_bar.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [b, hk, j * BN, 0], v_bar.index(s), v_smem.index(s))


@gluon.jit
def _softmax_step(S, m_i, l_i, j, n_full, m, Sq, Sk, qk_scale, s_layout: gl.constexpr,
                  BM: gl.constexpr, BN: gl.constexpr, CAUSAL: gl.constexpr):
    if j >= n_full:
        rows = m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
        cols = j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols, 0) < Sk
        if CAUSAL:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1) + (Sk - Sq))
        S = gl.where(keep, S, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(S, axis=1) * qk_scale)
    m_safe = gl.where(m_new == -float("inf"), 0.0, m_new)
    P = gl.exp2(S * qk_scale - gl.expand_dims(m_safe, 1))
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(P, axis=1)
    return P, alpha, m_new, l_i


@gluon.jit
def _compute_role(q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar, o_ptr, lse_ptr,
                  sob, soh, som, slb, slh, b, h, m, n_full, n_tiles, Sq, Sk, qk_scale,
                  BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
                  STAGES: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, DV, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.reshape([BM, D])
    m_i = gl.full([BM], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BM, DV], gl.float32, o_layout)
    mbarrier.wait(q_bar, 0)
    for j in range(n_tiles):
        s = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(k_bar.index(s), ph)
        k = k_smem.index(s).reshape([BN, D]).permute((1, 0))
        S = warpgroup_mma(q, k, gl.zeros([BM, BN], gl.float32, s_layout), use_acc=False, is_async=True)
        S, _, _ = warpgroup_mma_wait(0, deps=(S, q, k))
        P, alpha, m_i, l_i = _softmax_step(S, m_i, l_i, j, n_full, m, Sq, Sk, qk_scale, s_layout, BM, BN, CAUSAL)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p = gl.convert_layout(P.to(dtype), p_layout)
        mbarrier.wait(v_bar.index(s), ph)
        v = v_smem.index(s).reshape([BN, DV])
        acc = warpgroup_mma(p, v, acc, is_async=True)
        acc, _ = warpgroup_mma_wait(0, deps=(acc, v))
        mbarrier.arrive(free_bar.index(s), count=1)
    # epilogue
    l_o = gl.convert_layout(l_i, row_o)
    inv = gl.where(l_o == 0.0, 0.0, 1.0 / l_o)
    out = (acc * gl.expand_dims(inv, 1)).to(dtype)
    rows = m * BM + gl.arange(0, BM, layout=row_o)
    cols = gl.arange(0, DV, layout=gl.SliceLayout(0, o_layout))
    optrs = o_ptr + b * sob + h * soh + gl.expand_dims(rows, 1) * som + gl.expand_dims(cols, 0)
    gl.store(optrs, out, mask=gl.expand_dims(rows, 1) < Sq)
    lse = gl.where(l_i == 0.0, -float("inf"), (m_i + gl.log2(l_i)) * 0.6931471805599453)
    lrows = m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_ptr + b * slb + h * slh + lrows, lse, mask=lrows < Sq)


@gluon.jit
def attn_fwd(q_desc, k_desc, v_desc, o_ptr, lse_ptr, sob, soh, som, slb, slh,
             Hq, G, Sq, Sk, qk_scale,
             BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
             STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, num_warps: gl.constexpr):
    m = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // G
    if CAUSAL:
        n_full = gl.minimum(Sk // BN, gl.maximum(0, m * BM + Sk - Sq + 1) // BN)
        n_tiles = gl.cdiv(gl.maximum(0, gl.minimum(Sk, (m + 1) * BM + Sk - Sq)), BN)
    else:
        n_full = Sk // BN
        n_tiles = gl.cdiv(Sk, BN)
    q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    free_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bar.index(i), count=1)
        mbarrier.init(v_bar.index(i), count=1)
        mbarrier.init(free_bar.index(i), count=1)
    fence_async_shared()
    if OVERLAP:
        gl.warp_specialize([
            (_compute_role_overlap, (q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar, o_ptr, lse_ptr,
                             sob, soh, som, slb, slh, b, h, m, n_full, n_tiles, Sq, Sk, qk_scale,
                             BM, BN, D, DV, STAGES, CAUSAL, num_warps)),
            (_load_role, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar,
                          b, h, hk, m, n_tiles, BM, BN, STAGES)),
        ], [1], [24])
    else:
        gl.warp_specialize([
            (_compute_role, (q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar, o_ptr, lse_ptr,
                             sob, soh, som, slb, slh, b, h, m, n_full, n_tiles, Sq, Sk, qk_scale,
                             BM, BN, D, DV, STAGES, CAUSAL, num_warps)),
            (_load_role, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar,
                          b, h, hk, m, n_tiles, BM, BN, STAGES)),
        ], [1], [24])


def descs(q, k, v, BM, BN):
    gdt = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[q.dtype]
    D = q.shape[-1]; DV = v.shape[-1]
    ql = gl.NVMMASharedLayout.get_default_for([1, 1, BM, D], gdt)
    kl = gl.NVMMASharedLayout.get_default_for([1, 1, BN, D], gdt)
    vl = gl.NVMMASharedLayout.get_default_for([1, 1, BN, DV], gdt)
    return (TensorDescriptor.from_tensor(q, [1, 1, BM, D], ql), TensorDescriptor.from_tensor(k, [1, 1, BN, D], kl),
            TensorDescriptor.from_tensor(v, [1, 1, BN, DV], vl))


def attention(q, k, v, causal, scale=None, BM=128, BN=128, STAGES=2, num_warps=8, overlap=True):
    B, Hq, Sq, D = q.shape; Hkv, Sk, DV = k.shape[1], k.shape[2], v.shape[-1]
    scale = scale if scale is not None else D ** -0.5
    o = torch.empty(B, Hq, Sq, DV, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=q.device)
    qd, kd, vd = descs(q, k, v, BM, BN)
    grid = (triton.cdiv(Sq, BM), B * Hq)
    attn_fwd[grid](qd, kd, vd, o, lse, o.stride(0), o.stride(1), o.stride(2), lse.stride(0), lse.stride(1),
                   Hq, Hq // Hkv, Sq, Sk, scale * 1.4426950408889634, BM, BN, D, DV, STAGES, causal, overlap, num_warps=num_warps)
    return o, lse


@gluon.jit
def _compute_role_overlap(q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar, o_ptr, lse_ptr,
                          sob, soh, som, slb, slh, b, h, m, n_full, n_tiles, Sq, Sk, qk_scale,
                          BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
                          STAGES: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    # FA3's intra-warpgroup overlap: the softmax of tile j+1 runs while the PV GEMM of tile j is in flight.
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, DV, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.reshape([BM, D])
    m_i = gl.full([BM], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BM, DV], gl.float32, o_layout)
    P = gl.zeros([BM, BN], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    if n_tiles > 0:
        mbarrier.wait(k_bar.index(0), 0)
        k = k_smem.index(0).reshape([BN, D]).permute((1, 0))
        S = warpgroup_mma(q, k, gl.zeros([BM, BN], gl.float32, s_layout), use_acc=False, is_async=True)
        S, _, _ = warpgroup_mma_wait(0, deps=(S, q, k))
        P, alpha, m_i, l_i = _softmax_step(S, m_i, l_i, 0, n_full, m, Sq, Sk, qk_scale, s_layout, BM, BN, CAUSAL)
    for j in range(n_tiles - 1):
        s = j % STAGES
        s1 = (j + 1) % STAGES
        mbarrier.wait(k_bar.index(s1), ((j + 1) // STAGES) & 1)
        k = k_smem.index(s1).reshape([BN, D]).permute((1, 0))
        S = warpgroup_mma(q, k, gl.zeros([BM, BN], gl.float32, s_layout), use_acc=False, is_async=True)
        p = gl.convert_layout(P.to(dtype), p_layout)
        mbarrier.wait(v_bar.index(s), (j // STAGES) & 1)
        v = v_smem.index(s).reshape([BN, DV])
        acc = warpgroup_mma(p, v, acc, is_async=True)
        S, _, _ = warpgroup_mma_wait(1, deps=(S, q, k))
        P, alpha, m_i, l_i = _softmax_step(S, m_i, l_i, j + 1, n_full, m, Sq, Sk, qk_scale, s_layout, BM, BN, CAUSAL)
        acc, _ = warpgroup_mma_wait(0, deps=(acc, v))
        mbarrier.arrive(free_bar.index(s), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
    if n_tiles > 0:
        j = n_tiles - 1
        s = j % STAGES
        p = gl.convert_layout(P.to(dtype), p_layout)
        mbarrier.wait(v_bar.index(s), (j // STAGES) & 1)
        v = v_smem.index(s).reshape([BN, DV])
        acc = warpgroup_mma(p, v, acc, is_async=True)
        acc, _ = warpgroup_mma_wait(0, deps=(acc, v))
        mbarrier.arrive(free_bar.index(s), count=1)
    l_o = gl.convert_layout(l_i, row_o)
    inv = gl.where(l_o == 0.0, 0.0, 1.0 / l_o)
    out = (acc * gl.expand_dims(inv, 1)).to(dtype)
    rows = m * BM + gl.arange(0, BM, layout=row_o)
    cols = gl.arange(0, DV, layout=gl.SliceLayout(0, o_layout))
    optrs = o_ptr + b * sob + h * soh + gl.expand_dims(rows, 1) * som + gl.expand_dims(cols, 0)
    gl.store(optrs, out, mask=gl.expand_dims(rows, 1) < Sq)
    lse = gl.where(l_i == 0.0, -float("inf"), (m_i + gl.log2(l_i)) * 0.6931471805599453)
    lrows = m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_ptr + b * slb + h * slh + lrows, lse, mask=lrows < Sq)


# ------------------------------------------------------------------ ping-pong: two consumer warpgroups
@gluon.jit
def _pp_compute(WG: gl.constexpr, q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar, turn_bar,
                o_ptr, lse_ptr, sob, soh, som, slb, slh, b, h, m, n_full, n_tiles, Sq, Sk, qk_scale,
                BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
                STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr):
    # Each warpgroup owns half of the program's BM query rows; the two take turns issuing their
    # GEMMs (turn_bar), so one warpgroup's softmax runs while the other's GEMMs use the tensor cores.
    HM: gl.constexpr = BM // 2
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, DV, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q = q_smem.reshape([BM, D]).slice(WG * HM, HM)
    mrow = m * BM + WG * HM  # first query row of this warpgroup
    m_i = gl.full([HM], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([HM], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HM, DV], gl.float32, o_layout)
    P = gl.zeros([HM, BN], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    turn = 0
    if OVERLAP:
        if n_tiles > 0:
            mbarrier.wait(turn_bar.index(WG), turn & 1)
            turn += 1
            mbarrier.wait(k_bar.index(0), 0)
            k = k_smem.index(0).reshape([BN, D]).permute((1, 0))
            S = warpgroup_mma(q, k, gl.zeros([HM, BN], gl.float32, s_layout), use_acc=False, is_async=True)
            mbarrier.arrive(turn_bar.index(1 - WG), count=1)
            S, _, _ = warpgroup_mma_wait(0, deps=(S, q, k))
            P, alpha, m_i, l_i = _softmax_rows(S, m_i, l_i, 0, n_full, mrow, Sq, Sk, qk_scale, s_layout, HM, BN, CAUSAL)
        for j in range(n_tiles - 1):
            s = j % STAGES
            s1 = (j + 1) % STAGES
            p = gl.convert_layout(P.to(dtype), p_layout)
            mbarrier.wait(k_bar.index(s1), ((j + 1) // STAGES) & 1)
            mbarrier.wait(v_bar.index(s), (j // STAGES) & 1)
            mbarrier.wait(turn_bar.index(WG), turn & 1)
            turn += 1
            k = k_smem.index(s1).reshape([BN, D]).permute((1, 0))
            S = warpgroup_mma(q, k, gl.zeros([HM, BN], gl.float32, s_layout), use_acc=False, is_async=True)
            v = v_smem.index(s).reshape([BN, DV])
            acc = warpgroup_mma(p, v, acc, is_async=True)
            mbarrier.arrive(turn_bar.index(1 - WG), count=1)
            S, _, _ = warpgroup_mma_wait(1, deps=(S, q, k))
            P, alpha, m_i, l_i = _softmax_rows(S, m_i, l_i, j + 1, n_full, mrow, Sq, Sk, qk_scale, s_layout, HM, BN, CAUSAL)
            acc, _ = warpgroup_mma_wait(0, deps=(acc, v))
            mbarrier.arrive(free_bar.index(s), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        if n_tiles > 0:
            j = n_tiles - 1
            s = j % STAGES
            p = gl.convert_layout(P.to(dtype), p_layout)
            mbarrier.wait(v_bar.index(s), (j // STAGES) & 1)
            mbarrier.wait(turn_bar.index(WG), turn & 1)
            turn += 1
            v = v_smem.index(s).reshape([BN, DV])
            acc = warpgroup_mma(p, v, acc, is_async=True)
            mbarrier.arrive(turn_bar.index(1 - WG), count=1)
            acc, _ = warpgroup_mma_wait(0, deps=(acc, v))
            mbarrier.arrive(free_bar.index(s), count=1)
    else:
        for j in range(n_tiles):
            s = j % STAGES
            ph = (j // STAGES) & 1
            mbarrier.wait(k_bar.index(s), ph)
            mbarrier.wait(turn_bar.index(WG), turn & 1)
            turn += 1
            k = k_smem.index(s).reshape([BN, D]).permute((1, 0))
            S = warpgroup_mma(q, k, gl.zeros([HM, BN], gl.float32, s_layout), use_acc=False, is_async=True)
            mbarrier.arrive(turn_bar.index(1 - WG), count=1)
            S, _, _ = warpgroup_mma_wait(0, deps=(S, q, k))
            P, alpha, m_i, l_i = _softmax_rows(S, m_i, l_i, j, n_full, mrow, Sq, Sk, qk_scale, s_layout, HM, BN, CAUSAL)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p = gl.convert_layout(P.to(dtype), p_layout)
            mbarrier.wait(v_bar.index(s), ph)
            v = v_smem.index(s).reshape([BN, DV])
            acc = warpgroup_mma(p, v, acc, is_async=True)
            acc, _ = warpgroup_mma_wait(0, deps=(acc, v))
            mbarrier.arrive(free_bar.index(s), count=1)
    l_o = gl.convert_layout(l_i, row_o)
    inv = gl.where(l_o == 0.0, 0.0, 1.0 / l_o)
    out = (acc * gl.expand_dims(inv, 1)).to(dtype)
    rows = mrow + gl.arange(0, HM, layout=row_o)
    cols = gl.arange(0, DV, layout=gl.SliceLayout(0, o_layout))
    optrs = o_ptr + b * sob + h * soh + gl.expand_dims(rows, 1) * som + gl.expand_dims(cols, 0)
    gl.store(optrs, out, mask=gl.expand_dims(rows, 1) < Sq)
    lse = gl.where(l_i == 0.0, -float("inf"), (m_i + gl.log2(l_i)) * 0.6931471805599453)
    lrows = mrow + gl.arange(0, HM, layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_ptr + b * slb + h * slh + lrows, lse, mask=lrows < Sq)


@gluon.jit
def _softmax_rows(S, m_i, l_i, j, n_full, mrow, Sq, Sk, qk_scale, s_layout: gl.constexpr,
                  HM: gl.constexpr, BN: gl.constexpr, CAUSAL: gl.constexpr):
    if j >= n_full:
        rows = mrow + gl.arange(0, HM, layout=gl.SliceLayout(1, s_layout))
        cols = j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols, 0) < Sk
        if CAUSAL:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1) + (Sk - Sq))
        S = gl.where(keep, S, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(S, axis=1) * qk_scale)
    m_safe = gl.where(m_new == -float("inf"), 0.0, m_new)
    P = gl.exp2(S * qk_scale - gl.expand_dims(m_safe, 1))
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(P, axis=1)
    return P, alpha, m_new, l_i


@gluon.jit
def attn_fwd_pp(q_desc, k_desc, v_desc, o_ptr, lse_ptr, sob, soh, som, slb, slh,
                Hq, G, Sq, Sk, qk_scale,
                BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
                STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, num_warps: gl.constexpr):
    m = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // G
    if CAUSAL:
        # the tiles of the lower warpgroup's rows bound the program; the upper one masks the rest
        n_full = gl.minimum(Sk // BN, gl.maximum(0, m * BM + Sk - Sq + 1) // BN)
        n_tiles = gl.cdiv(gl.maximum(0, gl.minimum(Sk, (m + 1) * BM + Sk - Sq)), BN)
    else:
        n_full = Sk // BN
        n_tiles = gl.cdiv(Sk, BN)
    q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    free_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bar.index(i), count=1)
        mbarrier.init(v_bar.index(i), count=1)
        mbarrier.init(free_bar.index(i), count=2)
    mbarrier.init(turn_bar.index(0), count=1)
    mbarrier.init(turn_bar.index(1), count=1)
    mbarrier.arrive(turn_bar.index(0), count=1)  # warpgroup 0 takes the first turn
    fence_async_shared()
    gl.warp_specialize([
        (_pp_compute, (0, q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar, turn_bar, o_ptr, lse_ptr,
                   sob, soh, som, slb, slh, b, h, m, n_full, n_tiles, Sq, Sk, qk_scale,
                   BM, BN, D, DV, STAGES, CAUSAL, OVERLAP)),
        (_pp_compute, (1, q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar, turn_bar, o_ptr, lse_ptr,
                   sob, soh, som, slb, slh, b, h, m, n_full, n_tiles, Sq, Sk, qk_scale,
                   BM, BN, D, DV, STAGES, CAUSAL, OVERLAP)),
        (_load_role, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_bar, v_bar, free_bar,
                      b, h, hk, m, n_tiles, BM, BN, STAGES)),
    ], [4, 4], [240, 24])


def attention_pp(q, k, v, causal, scale=None, BM=128, BN=128, STAGES=2, overlap=True):
    B, Hq, Sq, D = q.shape; Hkv, Sk, DV = k.shape[1], k.shape[2], v.shape[-1]
    scale = scale if scale is not None else D ** -0.5
    o = torch.empty(B, Hq, Sq, DV, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=q.device)
    qd, kd, vd = descs(q, k, v, BM, BN)
    grid = (triton.cdiv(Sq, BM), B * Hq)
    attn_fwd_pp[grid](qd, kd, vd, o, lse, o.stride(0), o.stride(1), o.stride(2), lse.stride(0), lse.stride(1),
                      Hq, Hq // Hkv, Sq, Sk, scale * 1.4426950408889634, BM, BN, D, DV, STAGES, causal, overlap, num_warps=4)
    return o, lse
