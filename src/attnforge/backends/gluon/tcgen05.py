"""The compute role of a Hopper-form kernel for sm_100 (Blackwell): the same TL statements as on
sm_90, with each asynchronous GEMM a ``tcgen05`` MMA into tensor memory (TMEM) instead of a wgmma
into registers.

How the TL's statements map (the load role, the scores and the epilogue are ``emit``'s and
``compute``'s, shared with sm_90):

* ``Compute GEMM Qs, Ks[s]^T and get S async``: one thread issues ``tcgen05_mma`` from shared memory
  into S's TMEM columns, its completion committed to the translator's ``mma_bar``;
  ``Wait GEMM S`` waits on that barrier, then the warps load S from TMEM into registers (one row per
  thread of each warpgroup), where the softmax runs as on sm_90.
* O_acc lives in TMEM (its ``= 0`` initialisation is a store of zeros); the online softmax's
  ``rescale O_acc`` is a load, multiply and store of it, made while no MMA reads it (the TL waits
  for each PV GEMM before the next tile).
* ``Reshape P from mma_c to mma_a``: P, 16-bit, is stored into TMEM over S's first columns
  (S is dead once the softmax has read it); tcgen05 takes the A operand from TMEM, so P never goes
  through shared memory.
* ``Compute GEMM P, Vs[s] and accumulate O_acc async`` / ``Wait GEMM O_acc``: a tcgen05 MMA into O's
  TMEM columns and its wait on ``mma_bar``.

The schedule parameters (``pingpong``, ``overlap``) are wgmma schedules; on sm_100 they are refused
(``shape``): the TL for it keeps both off. Compiled for sm_100a on the CPU only: no Blackwell GPU
has run these kernels yet, and the verification gate runs them before any is handed back.
"""

from __future__ import annotations

from ...tl import nodes as n
from ...tl.printer import stmt as stmt_lines
from .compute import _epilogue, _release, _softmax_call, _wait_tile, release_k, row_state, tile_bounds
from .shape import _fail
from .writer import Writer, shared_args

# the translator's own names in the kernel: S's and O's tensor memory, the barrier MMAs commit to
TMEM_ARGS = ("s_tmem", "o_tmem", "mma_bar")
TMEM_COLUMNS = 512  # 32-bit columns of tensor memory per SM, 128 lanes each


def kernel_allocations(m: Writer, indent: int) -> None:
    """Tensor memory for S (BN columns, P over its first half) and O (Dv columns), and the barrier
    tcgen05 commits each MMA's completion to: BN + Dv of the 512 columns of an SM, BM = 128 lanes."""
    bn = m.hk.params["BN"]
    if bn + m.head_dim_v > TMEM_COLUMNS:
        _fail(m.hk.kernel, f"BN = {bn} and Dv = {m.head_dim_v}: S and O need {bn + m.head_dim_v} of the {TMEM_COLUMNS} tensor-memory "
              "columns of an sm_100 SM", m.file, hint="narrow BN")
    m.emit("# sm_100: S and O accumulate in tensor memory; each tcgen05 MMA commits its completion to mma_bar", indent)
    m.emit("s_tmem = allocate_tensor_memory(gl.float32, [BM, BN], TensorMemoryLayout((BM, BN), col_stride=1))", indent)
    m.emit("o_tmem = allocate_tensor_memory(gl.float32, [BM, Dv], TensorMemoryLayout((BM, Dv), col_stride=1))", indent)
    m.emit("mma_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())", indent)
    m.emit("mbarrier.init(mma_bar, count=1)", indent)


def _wait_mma(m: Writer, out: str) -> None:
    """The TL's ``Wait GEMM out``: the MMA's commit completes the barrier's next phase."""
    m.tl(n.WaitGemm(out), 2)
    m.emit("mbarrier.wait(mma_bar, mma_phase)", 2)
    m.emit("mma_phase ^= 1", 2)


def compute_fn(m: Writer) -> None:
    hk, t = m.hk, m.hk.loops[-1]
    j = t.loop.var
    J = n.Name(j)
    rt = ", ".join(m.runtime_args())
    m.emit("@gluon.jit")
    m.emit(f"def _compute(WG: gl.constexpr, {', '.join(shared_args(hk))}, {', '.join(TMEM_ARGS)}, {rt}, SCALE_POSITIVE: gl.constexpr):")
    m.emit(f"# TL: {stmt_lines(hk.compute)[0].strip()}  (sm_100: one thread issues the tcgen05 MMAs; the warps run the softmax)", 1)
    m.emit("# register layouts of TMEM loads: each warpgroup's thread t holds row t (32x32b)", 1)
    m.emit("s_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, (BM, BN), TensorMemoryLayout((BM, BN), col_stride=1), WG_WARPS)", 1)
    m.emit("o_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, (BM, Dv), TensorMemoryLayout((BM, Dv), col_stride=1), WG_WARPS)", 1)
    m.emit("# P, 16-bit and packed two to a column, over S's first BN // 2 columns", 1)
    m.emit("p_tmem_layout: gl.constexpr = TensorMemoryLayout((BM, BN), col_stride=1)", 1)
    m.emit("p_tmem = s_tmem._reinterpret(DTYPE, [BM, 2 * BN], p_tmem_layout).slice(0, BN)", 1)
    m.emit("p_layout: gl.constexpr = get_tmem_reg_layout(DTYPE, (BM, BN), p_tmem_layout, WG_WARPS)", 1)
    m.emit("row_o: gl.constexpr = gl.SliceLayout(1, o_layout)", 1)
    m.emit(f"q_t = {hk.loops[0].qk.a}.reshape([BM, D])", 1)
    m.emit("rows = m * BM + gl.arange(0, HM, layout=gl.SliceLayout(1, s_layout))", 1)
    row_state(m)
    m.emit("o_tmem.store(gl.zeros([HM, Dv], gl.float32, o_layout))  # O_acc = 0, in tensor memory", 1)
    m.emit("mma_phase = 0  # mma_bar completes once per MMA: S, then O, in turn", 1)
    tile_bounds(m)
    m.emit(f"for {j} in range(lo, hi):", 1)
    _wait_tile(m, t.k_wait, j, J, 2)
    m.tl(t.qk, 2)
    m.emit(f"k_t = {t.qk.b}.index({m.dev(t.qk.b_index)}).reshape([BN, D]).permute((1, 0))", 2)
    m.emit("tcgen05_mma(q_t, k_t, s_tmem, use_acc=False, mbarriers=[mma_bar])", 2)
    _wait_mma(m, t.qk.out)
    release_k(m, t, J, 2)
    m.emit("S = s_tmem.load(s_layout)", 2)
    m.emit(_softmax_call(j, rt), 2)
    m.emit("# (the softmax's rescale of O_acc, in tensor memory: no MMA reads O now, the last PV was waited for)", 2)
    m.emit("o_tmem.store(o_tmem.load(o_layout) * gl.expand_dims(gl.convert_layout(alpha, row_o), 1))", 2)
    m.tl(t.p_reshape, 2)
    m.emit("p_tmem.store(gl.convert_layout(P, p_layout, assert_trivial=True))  # tcgen05 reads its A operand from tensor memory", 2)
    _wait_tile(m, t.v_wait, j, J, 2)
    m.tl(t.pv, 2)
    m.emit(f"v_t = {t.pv.b}.index({m.dev(t.pv.b_index)}).reshape([BN, Dv])", 2)
    m.emit("tcgen05_mma(p_tmem, v_t, o_tmem, use_acc=True, mbarriers=[mma_bar])", 2)
    _wait_mma(m, t.pv.out)
    _release(m, t, J, 2)
    m.emit("acc = o_tmem.load(o_layout)", 1)
    _epilogue(m)
    m.emit()
