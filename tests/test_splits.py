"""The split-KV rule (``attnforge.splits.split_count``): its bounds, and that every user applies it."""

from __future__ import annotations

import math

import pytest
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


@settings(max_examples=500, deadline=None)
@given(programs=st.integers(1, 10**6), tiles=st.integers(1, 10**6), sms=st.integers(1, 1000), per_sm=st.integers(1, 32))
def test_split_count_aims_at_the_programs_per_sm_asked(programs: int, tiles: int, sms: int, per_sm: int) -> None:
    """``per_sm`` programs per SM (TL's third argument of splits): the default is 2, and aiming at more never takes fewer splits."""
    n = split_count(programs, tiles, sms, per_sm)
    wanted = math.ceil(per_sm * sms / programs)
    assert n >= min(wanted, tiles, MAX_SPLITS) and (n == 1 or n < 2 * wanted)
    assert split_count(programs, tiles, sms, per_sm + 1) >= n
    assert split_count(programs, tiles, sms) == split_count(programs, tiles, sms, 2)


def test_a_launch_line_says_its_programs_per_sm() -> None:
    """``launch NSPLIT = splits(P, T, 1)``: parsed, printed back (the default 2 left out), refused outside 1..32
    with the position of the number."""
    from attnforge.errors import TLSyntaxError
    from attnforge.splits import DEFAULT_PER_SM, MAX_PER_SM
    from attnforge.tl import parse, print_program

    one = parse("kernel a\nlaunch NSPLIT = splits(B * Hkv, cdiv(Sk, BN), 1)\n")
    assert one.kernels[0].launch[0].per_sm == 1 and "splits(B * Hkv, cdiv(Sk, BN), 1)" in print_program(one)
    default = parse("kernel a\nlaunch NSPLIT = splits(B * Hkv, cdiv(Sk, BN))\n")
    assert default.kernels[0].launch[0].per_sm == DEFAULT_PER_SM and "cdiv(Sk, BN))" in print_program(default)
    assert parse(print_program(one)) == one and one != default
    for bad in (0, MAX_PER_SM + 1):
        with pytest.raises(TLSyntaxError, match="programs per SM") as err:
            parse(f"kernel a\nlaunch NSPLIT = splits(B, Sk, {bad})\n")
        assert (err.value.where.line, err.value.where.col) == (2, 31)  # the number


def test_the_hopper_decode_aims_at_one_program_per_sm_and_its_launcher_says_so() -> None:
    from attnforge import AttentionSpec, get_target
    from attnforge.backends import get_backend
    from attnforge.plan.hopper import hopper_plans
    from attnforge.tl.checker import check

    spec = AttentionSpec(batch=8, heads=32, kv_heads=8, head_dim=128, dtype="bf16", seqlen_q=1, seqlen_k=32768)
    plan = next(hopper_plans(spec, get_target("h200")))
    assert plan.source.count("cdiv(Sk, BN), 1)") == 2  # the partial and the combine kernel alike (TL110)
    assert "NSPLIT=4 at B=8" in plan.reasons[0] and "about once" in plan.reasons[0]
    source = get_backend("gluon").translate(plan.program, head_dim=128, head_dim_v=128).source
    assert "program_slots(q.device), 1)" in source
    # a combine kernel whose rule aims elsewhere gives another split count: TL110
    text = plan.source
    last = text.rfind("cdiv(Sk, BN), 1)")
    mixed = text[:last] + "cdiv(Sk, BN))" + text[last + len("cdiv(Sk, BN), 1)"):]
    from attnforge.tl import parse

    result = check(parse(mixed), get_target("h200"), head_dim=128, head_dim_v=128)
    assert any(f.code == "TL110" for f in result.errors)
