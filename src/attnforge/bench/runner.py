"""Rows x providers in one run. For each row: fresh random inputs (never zeros), each provider
made ready (its first call: a build, a compile, or a refusal with the reason), each output judged
against the float64 reference of the row (``check``), then the providers timed in turns
(``timing.interleave``). A provider that cannot run a row, or fails while timing, is recorded as
n/a with the reason; the run goes on.

A provider result: ``status`` ("ok", "failed": its output is wrong, "n/a": it could not run the
row, "skipped": the time limit was reached), ``reason``, ``ms``, ``rounds_ms``, ``spread``,
``samples``, ``tflops``, ``gbps``, ``first_call_s``, ``check`` and ``notes``.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Callable

from .check import RowReference
from .matrix import Row
from .providers import Prepared, Provider, Unsupported, reason_of
from .timing import interleave

OnRow = Callable[[int, Row, dict], None]


def make_inputs(row: Row, device: Any, seed: int) -> tuple[Any, Any, Any]:
    """Q, K, V of the row's shape and dtype: standard normal, seeded by the row's name."""
    import torch

    from ..dtypes import torch_dtype

    dtype = torch_dtype(row.dtype)
    gen = torch.Generator(device=device).manual_seed(seed ^ zlib.crc32(row.name.encode()))
    d = row.head_dim
    q = torch.randn(row.batch, row.heads, row.seqlen_q, d, dtype=dtype, device=device, generator=gen)
    k = torch.randn(row.batch, row.kv_heads, row.seqlen_k, d, dtype=dtype, device=device, generator=gen)
    v = torch.randn(row.batch, row.kv_heads, row.seqlen_k, d, dtype=dtype, device=device, generator=gen)
    return q, k, v


def _release(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.empty_cache()


def _na(reason: str, status: str = "n/a") -> dict:
    return {"status": status, "reason": reason}


def run_row(row: Row, providers: list[Provider], *, device: Any, timer: Callable, rounds: int, seed: int,
            unavailable: dict[str, str | None]) -> dict:
    record = row.to_dict()
    results: dict[str, dict] = {}
    record["results"] = results
    q, k, v = make_inputs(row, device, seed)
    prepared: dict[str, Prepared] = {}
    by_name = {p.name: p for p in providers}
    for provider in providers:
        reason = unavailable.get(provider.name) or provider.unsupported(row)
        if reason:
            results[provider.name] = _na(reason)
            continue
        try:
            prepared[provider.name] = provider.prepare(row, q, k, v)
        except Unsupported as err:
            results[provider.name] = _na(str(err))
            _release(device)
        except Exception as err:  # noqa: BLE001 (a provider's own bug must not end the run)
            results[provider.name] = _na(reason_of(err))
            _release(device)
    reference: RowReference | None = None
    reference_problem = None
    if prepared:
        try:
            reference = RowReference(row, q, k, v)
        except Exception as err:  # noqa: BLE001
            reference_problem = "the reference could not be computed: " + reason_of(err)
    for name in list(prepared):
        entry = prepared[name]
        try:
            # two calls, both judged: attention()'s dispatch cache records a key's launches at its
            # first cached call and replays them from the next on, and the timed calls are replays
            checks = []
            for _ in range(2):
                with entry.context():
                    out = entry.fn()
                checks.append(reference.judge(out, row_bounds=by_name[name].verified) if reference is not None
                              else {"passed": False, "problem": reference_problem})
                del out
            check = next((c for c in checks if not c["passed"]), checks[-1])
        except Exception as err:  # noqa: BLE001
            results[name] = _na("failed on the checked call: " + reason_of(err))
            del prepared[name]
            _release(device)
            continue
        results[name] = {"status": "ok" if check["passed"] else "failed", "check": check,
                         "first_call_s": entry.first_call_s, "notes": list(entry.notes)}
        if not check["passed"]:
            results[name]["reason"] = check.get("problem", "output off the reference")
    timed, failed = interleave({name: (p.fn, p.context) for name, p in prepared.items()}, timer, rounds)
    for name, why in failed.items():  # a wrong output stays "failed"; the timing problem is added
        results[name] = {**results[name], **(_na(why) if results[name]["status"] == "ok" else {"timing_problem": why})}
    for name, t in timed.items():
        results[name].update(t.to_dict())
        results[name]["tflops"] = row.flops() / t.ms / 1e9
        results[name]["gbps"] = row.bytes() / t.ms / 1e6
    record["results"] = {p.name: results[p.name] for p in providers}  # in the providers' order
    del q, k, v, prepared
    _release(device)
    return record


def run_rows(rows: list[Row], providers: list[Provider], *, device: Any, timer: Callable, rounds: int = 3, seed: int = 0,
             time_limit_s: float | None = None, on_start: OnRow | None = None, on_row: OnRow | None = None) -> list[dict]:
    """Every row with every provider; ``on_start(i, row, {})`` before a row, ``on_row(i, row,
    record)`` after it. Rows not started within ``time_limit_s`` are recorded as skipped."""
    start = time.monotonic()
    unavailable = {p.name: p.unavailable(device) for p in providers}
    records = []
    for i, row in enumerate(rows):
        if on_start:
            on_start(i, row, {})
        if time_limit_s is not None and time.monotonic() - start > time_limit_s:
            record = row.to_dict()
            record["results"] = {p.name: _na(f"time limit of {time_limit_s:g} s reached before this row", "skipped") for p in providers}
        else:
            record = run_row(row, providers, device=device, timer=timer, rounds=rounds, seed=seed, unavailable=unavailable)
        records.append(record)
        if on_row:
            on_row(i, row, record)
    return records
