"""Timing in the manner of ``triton.testing.do_bench`` (what ANCHORS.md was measured with):
one call and a sync, five calls to estimate, warm-up calls for ``warmup_ms``, then calls for
``rep_ms``, each timed with its own pair of CUDA events after the L2 cache was flushed (a 256 MB
buffer zeroed, outside the events), and the median taken. ``interleave`` runs the providers of a
row in turns, round after round, so that a drift of the machine's clocks spreads over all of them;
a provider's time is the median of its round medians, its spread (max - min) / median of them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

FLUSH_BYTES = 256 * 1024 * 1024
MIN_REPEATS, MAX_REPEATS = 10, 10000


def repeats(estimate_ms: float, warmup_ms: float, rep_ms: float) -> tuple[int, int]:
    """(warm-up calls, timed calls) for a call of ``estimate_ms``: do_bench's counts, the timed
    ones kept within [MIN_REPEATS, MAX_REPEATS] so the median is of many."""
    estimate_ms = max(estimate_ms, 1e-4)
    n_warmup = max(1, int(warmup_ms / estimate_ms))
    n_repeat = min(MAX_REPEATS, max(MIN_REPEATS, int(rep_ms / estimate_ms)))
    return n_warmup, n_repeat


class CudaTimer:
    """Times a callable on the current CUDA device; ``__call__`` returns one time (ms) per timed call."""

    def __init__(self, warmup_ms: float = 25.0, rep_ms: float = 100.0, flush: bool = True):
        import torch

        self.torch = torch
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int, device="cuda") if flush else None

    def _flush(self) -> None:
        if self.cache is not None:
            self.cache.zero_()

    def __call__(self, fn: Callable[[], Any]) -> list[float]:
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            self._flush()
            fn()
        end.record()
        torch.cuda.synchronize()
        n_warmup, n_repeat = repeats(start.elapsed_time(end) / 5, self.warmup_ms, self.rep_ms)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        for _ in range(n_warmup):
            fn()
        for i in range(n_repeat):
            self._flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]


@dataclass
class Timed:
    ms: float  # median of the round medians
    rounds_ms: list[float]
    spread: float  # (max - min) / median of the round medians
    samples: int  # timed calls in all rounds

    def to_dict(self) -> dict:
        return {"ms": self.ms, "rounds_ms": self.rounds_ms, "spread": self.spread, "samples": self.samples}


def summarize(rounds: list[list[float]]) -> Timed:
    medians = [statistics.median(r) for r in rounds]
    ms = statistics.median(medians)
    spread = (max(medians) - min(medians)) / ms if ms > 0 else 0.0
    return Timed(ms, medians, spread, sum(len(r) for r in rounds))


def interleave(entries: dict[str, tuple[Callable[[], Any], Callable[[], ContextManager]]], timer: Callable[[Callable[[], Any]], list[float]],
               rounds: int) -> tuple[dict[str, Timed], dict[str, str]]:
    """Time each named (fn, context) ``rounds`` times, in turns. Returns the timings and, for an
    entry that raised while being timed, the reason (it is dropped from later rounds)."""
    from .providers import reason_of

    samples: dict[str, list[list[float]]] = {name: [] for name in entries}
    failed: dict[str, str] = {}
    for _ in range(rounds):
        for name, (fn, context) in entries.items():
            if name in failed:
                continue
            try:
                with context():
                    samples[name].append(timer(fn))
            except Exception as err:  # noqa: BLE001 (any failure while timing makes the row n/a for this provider)
                failed[name] = "failed while timing: " + reason_of(err)
    return {name: summarize(s) for name, s in samples.items() if s and name not in failed}, failed
