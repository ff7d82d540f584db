"""Prepared in run 19, not run on a GPU (issue 13): the online softmax's row sum l taken by the tensor cores instead of
64 FADDs a thread a K/V tile (D = 64, BN = 128): a ones tile Os (BN x 8, in shared memory, written once before the roles
start) and, beside each PV GEMM, L += P @ Os (wgmma m64n8k16: +12.5% of the PV GEMM's tensor time), rescaled with O.
L's eight columns are each row's sum of the 16-bit P the PV GEMM multiplies (the same rounding as O's numerator).
A text transform of a generated Hopper-form module with overlapped PV GEMMs (warpgroup_mma(p, v_t, acc, ...))."""
import re


def patch(src: str) -> tuple[str, int]:
    n = 0

    def sub(pattern: str, repl: str, text: str, count: int = 0, at_least: int = 1) -> str:
        nonlocal n
        text, k = re.subn(pattern, repl, text, count=count, flags=re.M)
        if k < at_least:
            raise ValueError(f"rowsum_mma: {pattern!r} not found")
        n += k
        return text

    t = src
    # the ones tile, filled before gl.warp_specialize (the fence after the barriers' init covers it)
    t = sub(r"^(    Vs = gl\.allocate_shared_memory\(.*\)\n)",
            r"\1    Os = gl.allocate_shared_memory(DTYPE, [BN, 8], gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2), "
            r"gl.full([BN, 8], 1.0, DTYPE, gl.BlockedLayout([1, 8], [32, 1], [WG_WARPS, 1], [1, 0])))\n", t, count=1)
    t = sub(r"^(def _compute\(WG: gl\.constexpr, Qs, Ks, Vs, )", r"\1Os, ", t, count=1)
    t = sub(r"(\(_compute, \(\d+, Qs, Ks, Vs, )", r"\1Os, ", t)
    t = sub(r"^(    row_o: gl\.constexpr = gl\.SliceLayout\(1, o_layout\)\n)",
            r"\1    l_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WG_WARPS, 1], instr_shape=[16, 8, 16])\n"
            r"    pl_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l_layout, k_width=2)\n", t, count=1)
    t = sub(r"^(\s+)(acc = gl\.zeros\(\[HM, Dv\], gl\.float32, o_layout\)\n)", r"\1\2\1L = gl.zeros([HM, 8], gl.float32, l_layout)\n", t)
    t = sub(r"^(\s+)(acc = warpgroup_mma\(p, v_t, acc, is_async=True\)\n)",
            r"\1L = warpgroup_mma(gl.convert_layout(p, pl_layout), Os, L, is_async=True)  # the row sums, issued before PV\n\1\2", t)
    t = sub(r"acc, _, _ = warpgroup_mma_wait\(0, deps=\(acc, p, v_t\)\)", "acc, L, _, _, _ = warpgroup_mma_wait(0, deps=(acc, L, p, v_t, Os))", t)
    t = sub(r"^(\s+)(acc = acc \* gl\.expand_dims\(gl\.convert_layout\(alpha, row_o\), 1\)\n)",
            r"\1\2\1L = L * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, l_layout)), 1)\n", t)
    t = sub(r"^(\s+)l_i = l_i \* alpha \+ gl\.sum\(P, axis=1\)\n", r"\1# (l: the tensor cores' row sums, L)\n", t)
    t = sub(r"^(\s+)(l_o = gl\.convert_layout\(l_i, row_o\)\n)",
            r"\1l_i = gl.convert_layout(gl.max(L, axis=1), gl.SliceLayout(1, s_layout))  # every column of L is the row's sum\n\1\2", t)
    return t, n
