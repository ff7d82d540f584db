"""Timing a launched kernel on the GPU, the way the benchmarks do: CUDA events after warm-up,
the median of many runs (``triton.testing.do_bench``)."""

from __future__ import annotations

from typing import Callable


def median_ms(fn: Callable[[], object], *, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """The median time of one call of ``fn`` in milliseconds (GPU only)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
