"""Q kept in registers for QK^T (wgmma's A from registers), Qs given back to the load warp as soon as it is read:
a text transform of a generated Hopper-form Gluon module (two compute warpgroups, no O through Qs)."""
import re

LATE = re.compile(r"^[ \t]*mbarrier\.arrive\(q_free, count=1\)  # Qs given back: every QK\^T GEMM of this work tile is done\n", re.M)


def q_in_registers(src: str) -> str:
    wait = re.search(r"^(\s*)mbarrier\.wait\(q_ready, ([^\n]*)\)\n", src, re.M)
    assert wait and src.count("mbarrier.wait(q_ready") == 1, "one Q wait expected"
    assert "q_t.store" not in src, "O goes through Qs: not this transform"
    ind = wait.group(1)
    add = f"{ind}q_r = q_t.load(gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))  # Q in registers for every QK^T\n"
    if LATE.search(src):  # persistent: Qs goes back at once, so the next work tile's Q loads under this one
        assert len(LATE.findall(src)) == 1
        add += f"{ind}mbarrier.arrive(q_free, count=1)  # Qs given back at once: the next work tile's Q loads under this one\n"
        src = LATE.sub("", src)
        wait = re.search(r"^(\s*)mbarrier\.wait\(q_ready, ([^\n]*)\)\n", src, re.M)
    out = src[:wait.end()] + add + src[wait.end():]
    assert out.count("warpgroup_mma(q_t, k_t") >= 2
    return out.replace("warpgroup_mma(q_t, k_t", "warpgroup_mma(q_r, k_t").replace("deps=(S, q_t, k_t)", "deps=(S, q_r, k_t)")
