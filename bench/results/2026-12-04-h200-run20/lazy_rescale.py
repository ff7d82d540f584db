"""Run 20 (issue 13): the lazy rescale of the CUDA backend (run 11) in a Gluon kernel, as a text transform of a generated
Hopper-form module with the overlapped loop. A warp moves its rows' running max, and rescales O, only when one of its 16
rows grew by more than 8 in log2 units (one vote.sync a tile); otherwise the tile's weights exp2(s - m) are taken against
the old max, below 2^8, and the O rescale (Dv / 2 FMULs a thread at BM = 128) is branched over. m, l and O stay
consistent, so O = acc / l and the LSE are the same algebraically (docs/TL.md 5.10).

The vote is an inline-asm elementwise op over a thread's two rows (pack 2); the branch is inline asm over PACK accumulator
registers at a time, tied in and out, so skipping leaves them as they were. A warp that did not move its max returns
alpha = -1 (alpha is >= 0 otherwise): the rescale's one test.

Run 20 call 3: every kernel passed the gate, and all were slower: 0.962x the shipped kernels over the 38 prefill rows
(0.914-1.002; a control copy 0.999x). The vote sits between the row max and the exp2s, and the branch splits the block
that ptxas schedules the softmax in. Dropped."""
from textpatch import Patch

THRESHOLD = 8.0  # log2 units: P <= 2^8 fits fp16 and bf16 with the relative precision they give 1

VOTE = ("{ .reg .pred p, q; setp.ne.s32 p, $2, 0; setp.ne.s32 q, $3, 0; or.pred p, p, q; "
        "vote.sync.any.pred p, p, -1; selp.s32 $0, 1, 0, p; mov.b32 $1, $0; }")


def _rescale_asm(pack: int) -> tuple[str, str]:
    muls = " ".join(f"mul.f32 ${i}, ${i}, ${2 * pack + i};" for i in range(pack))
    asm = f"{{ .reg .pred p; setp.lt.f32 p, ${2 * pack}, 0f00000000; @p bra.uni SKIP; {muls} SKIP: }}"
    constraints = ",".join(["=f"] * pack + [str(i) for i in range(pack)] + ["f"] * pack)
    return asm, constraints


def patch(src: str, pack: int = 16) -> tuple[str, int]:
    asm, constraints = _rescale_asm(pack)
    helpers = (
        "@gluon.jit\n"
        "def _lazy_max(m_i, m_new):\n"
        f"    grew = gl.where(m_new > m_i + {THRESHOLD}, 1, 0)\n"
        f"    warp = gl.inline_asm_elementwise({VOTE!r}, '=r,=r,r,r', [grew], dtype=gl.int32, is_pure=False, pack=2)\n"
        "    return gl.where(warp != 0, m_new, m_i), warp\n\n"
        "@gluon.jit\n"
        "def _lazy_rescale(acc, alpha):\n"
        "    a, _ = gl.broadcast(gl.expand_dims(alpha, 1), acc)\n"
        f"    return gl.inline_asm_elementwise({asm!r}, {constraints!r}, [acc, a], dtype=gl.float32, is_pure=False, pack={pack})\n\n"
    )
    t = Patch("lazy_rescale", src)
    t.sub(r"^(@gluon\.jit\ndef _scores\()", lambda m: helpers + m.group(1), count=1)
    t.sub(r"^(\s+)(m_new = gl\.maximum\(m_i, gl\.max\(S, axis=1\)(?: \* c)?\)\n)", r"\1\2\1m_new, warp = _lazy_max(m_i, m_new)\n")
    t.sub(r"^(\s+)return P\.to\(DTYPE\), alpha, m_new, l_i",
          r"\1alpha = gl.where(warp != 0, alpha, -1.0)  # -1: this warp's max stayed, O is not rescaled\n\g<0>", count=1)
    t.sub(r"^(\s+)acc = acc \* gl\.expand_dims\(gl\.convert_layout\(alpha, row_o\), 1\)\n",
          r"\1acc = _lazy_rescale(acc, gl.convert_layout(alpha, row_o))\n")
    return t.result()
