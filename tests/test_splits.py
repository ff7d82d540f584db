"""The split-KV rule (``attnforge.splits.split_count``): its bounds, and that every user applies it."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from attnforge.sizes import is_pow2
from attnforge.splits import INTERPRETER_SM_COUNT, MAX_SPLITS, split_count

COUNTS = st.integers(min_value=-3, max_value=10**7)  # below 1 too: an empty batch, no keys
SMS = st.integers(min_value=0, max_value=1000)


@settings(max_examples=2000, deadline=None)
@given(programs=COUNTS, tiles=COUNTS, sms=SMS)
def test_split_count_bounds(programs: int, tiles: int, sms: int) -> None:
    n = split_count(programs, tiles, sms)
    assert 1 <= n <= MAX_SPLITS and is_pow2(n)
    # never a whole power of two more than the tiles (at most one split per tile, rounded up)
    assert n < 2 * max(1, tiles)
    # enough splits for about two programs per SM, unless the tiles or the cap stop it first
    wanted = math.ceil(2 * max(1, sms) / max(1, programs))
    assert n >= min(wanted, tiles, MAX_SPLITS) and (n == 1 or n < 2 * wanted)


@settings(max_examples=500, deadline=None)
@given(programs=st.integers(1, 10**6), tiles=st.integers(1, 10**6), sms=st.integers(1, 1000))
def test_split_count_is_monotone(programs: int, tiles: int, sms: int) -> None:
    """More programs never take more splits; more tiles or more SMs never fewer."""
    n = split_count(programs, tiles, sms)
    assert split_count(programs + 1, tiles, sms) <= n
    assert split_count(programs, tiles + 1, sms) >= n and split_count(programs, tiles, sms + 1) >= n


def test_split_count_examples() -> None:
    assert split_count(512, 64, 132) == 1  # B=64 x Hkv=8 decode fills an H100 without splitting
    assert split_count(64, 512, 132) == 8  # B=8: ceil(264 / 64) = 5 splits, rounded up
    assert split_count(1, 3, 132) == 4  # three tiles: three splits, rounded up (one empty)
    assert split_count(1, 10**6, 132) == MAX_SPLITS
    assert split_count(2, 10, INTERPRETER_SM_COUNT) == 4 and split_count(8, 10, INTERPRETER_SM_COUNT) == 1


def test_the_runtime_and_the_interpreter_apply_the_one_rule() -> None:
    from attnforge.backends.triton import launching, runtime
    from attnforge.tl import interpreter

    assert runtime.split_count is split_count and interpreter.split_count is split_count
    import torch

    assert launching.program_slots(torch.device("cpu")) == INTERPRETER_SM_COUNT
