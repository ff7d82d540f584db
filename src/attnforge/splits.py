"""The split-KV rule: into how many splits a decode launch divides each row block's K/V tiles.

One home for a rule that four places apply: the planner's reasons, the launcher of a generated
module (at every launch, from the real sizes and the device's SM count), the TL interpreter (a TL
header line ``launch NSPLIT = splits(PROGRAMS, TILES)``, docs/TL.md section 3.1) and the
verification shapes. The count is a launch-time choice, not a compile-time one: one kernel
serves every batch and KV length, and only the host's arithmetic changes with them.
"""

from __future__ import annotations

import functools
import math

from .sizes import next_pow2

# More splits than this only adds combine work: 64 splits of a 32k-key cache are 8 tiles of 64 each.
MAX_SPLITS = 64
# The programs per SM the rule aims at, unless a TL launch line says otherwise (splits(P, T, PER_SM)):
# two keep an SM's loads in flight while the other program computes; a kernel with a deep copy ring
# of its own needs only one (the Hopper form's decode: bench/RESULTS.md, 2026-12-02 run 12).
DEFAULT_PER_SM = 2
MAX_PER_SM = 32
# The SM count the CPU interpreters (TL's and Triton's) give the rule: a few, as a small GPU has,
# so that shapes small enough to interpret already take several splits of several K/V tiles.
INTERPRETER_SM_COUNT = 4


def split_count(programs: int, kv_tiles: int, sm_count: int, per_sm: int = DEFAULT_PER_SM) -> int:
    """The number of splits of a launch of ``programs`` programs per split (batch x heads x row
    blocks) over ``kv_tiles`` K/V tiles on a GPU of ``sm_count`` SMs: enough for about ``per_sm``
    programs per SM, at most one split per K/V tile and at most MAX_SPLITS, rounded up to a power
    of two. A count below 1 (an empty batch, no keys) is taken as 1: the result is always >= 1."""
    wanted = math.ceil(max(1, per_sm) * max(1, sm_count) / max(1, programs))
    return next_pow2(max(1, min(kv_tiles, wanted, MAX_SPLITS)))


__all__ = ["DEFAULT_PER_SM", "INTERPRETER_SM_COUNT", "MAX_PER_SM", "MAX_SPLITS", "split_count"]


@functools.lru_cache(maxsize=None)
def device_sm_count(index: int) -> int:
    """The SM count of CUDA device ``index``, what the rule fills (cached: a decode launch asks on
    every call, and a device's properties never change)."""
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count
