"""Run 19 call 4 (issue 13): the row max / row sum of the scores as a tree over the thread's registers (halving the columns by their
top bit, which the wgmma accumulator keeps in one thread) instead of one chain of 2-input ops."""
import re, sys
from pathlib import Path

def helpers(levels, which):
    out = []
    for name, op in (("_tree_max", "gl.maximum"), ("_tree_sum", "_add"))[: 2 if which == "both" else 1]:
        out.append("@gluon.jit")
        out.append(f"def {name}(x, HM: gl.constexpr, BN: gl.constexpr, s_layout: gl.constexpr):")
        n = "BN"
        for lv in range(levels):
            h = f"({n} // 2)"
            out.append(f"    a, b = gl.split(gl.permute(gl.reshape(x, [HM, 2, {h}]), [0, 2, 1]))")
            out.append(f"    x = {op}(a, b)")
            n = h
        red = "gl.max" if name == "_tree_max" else "gl.sum"
        out.append(f"    return gl.convert_layout({red}(x, axis=1), gl.SliceLayout(1, s_layout))")
        out.append("")
        out.append("")
    return "@gluon.jit\ndef _add(a, b):\n    return a + b\n\n\n" + "\n".join(out)

def patch(src, bn, which="both"):
    """The levels: log2(BN / 8), the columns' bits the accumulator keeps in a thread's registers (n8 blocks)."""
    levels = (bn // 8).bit_length() - 1
    text = src.replace("gl.max(S, axis=1)", "_tree_max(S, HM, BN, s_layout)")
    n = src.count("gl.max(S, axis=1)")
    if which == "both":
        text = text.replace("gl.sum(P, axis=1)", "_tree_sum(P, HM, BN, s_layout)")
        n += src.count("gl.sum(P, axis=1)")
    i = text.index("@gluon.jit")
    return text[:i] + helpers(levels, which) + text[i:], n
