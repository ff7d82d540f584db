"""Size arithmetic and the limits every layer agrees on (head dims, powers of two)."""

from __future__ import annotations

# Head dims an AttentionSpec may ask for; backends pad them to their block shapes as needed.
HEAD_DIM_MIN, HEAD_DIM_MAX = 16, 512
# Kernels index sizes, programs and offsets inside a head with int32 (batch and head offsets are int64).
INDEX_MAX = 2**31 - 1


def is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(0, (x - 1).bit_length())
