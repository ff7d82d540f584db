"""Size arithmetic and the limits every layer agrees on (head dims, powers of two)."""

from __future__ import annotations

# Head dims an AttentionSpec may ask for; backends pad them to their block shapes as needed.
HEAD_DIM_MIN, HEAD_DIM_MAX = 16, 512
# Kernels index sizes, programs and offsets inside a head with int32 (batch and head offsets are int64).
INDEX_MAX = 2**31 - 1
# The smallest query tile (BM) a planner uses, one MMA's rows: a kernel runs one program instance
# per BM query rows of one (batch, head), and numbers them with int32.
BM_MIN = 16
# Query heads a spec may ask for: one ALiBi slope per head is built and held on the host (and
# written into report.json), so an absurd count is refused up front instead of hanging there.
HEADS_MAX = 2**16
# Query heads per K/V head: verification interprets 2 x this many query heads at once in float64
# (judge.interpret_shapes); at BM = BN = 128 that stays under the interpreter's 2**26 elements.
GROUP_MAX = 512


def is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(0, (x - 1).bit_length())
