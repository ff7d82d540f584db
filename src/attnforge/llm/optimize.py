"""``--optimize N``: after a verified kernel, the model sees its measured time, the ceilings of the
target and the compile report, and proposes a new variant; every variant goes through every gate
again and is timed; the fastest verified kernel is kept.

The loop is independent of how a variant is built and timed: ``build(answer_code, directory)``
(the pipeline's: a TL program through ``generate``, or a module through the sandbox) and
``timer(candidate)`` (milliseconds; the pipeline's times on the GPU in a child process, tests
pass their own). Timing needs a GPU: the CLI refuses ``--optimize`` without one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..compile_report import CompileReport
from ..dtypes import FORMATS
from ..errors import AttnforgeError
from ..spec import AttentionSpec
from ..targets import Target
from . import prompts
from .errors import LLMError
from .extract import extract_code
from .facts import spec_facts, target_facts
from .messages import Message
from .rounds import Round, Say, ask, headline
from .tracked import Tracked


@dataclass
class Candidate:
    """A verified kernel: where its files are, its code (TL text or module), its time."""

    directory: Path
    code: str
    params: dict[str, int] = field(default_factory=dict)
    compile_reports: list[CompileReport] = field(default_factory=list)
    ms: float | None = None
    round: int | None = None  # None: the kernel the loop started from
    detail: object = None  # what the builder keeps for the pipeline (a GenerateResult, a ModuleVerdict)

    def tiles(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items()) or "module"

    def label(self) -> str:
        return f"{'start' if self.round is None else f'round {self.round}'} ({self.tiles()})"


@dataclass
class BuildOutcome:
    candidate: Candidate | None
    kind: str | None = None  # the failure, when no candidate
    feedback: str = ""
    rounds: list[Round] = field(default_factory=list)  # LLM rounds the build itself spent (a translation)


Builder = Callable[[str, Path], BuildOutcome]
Timer = Callable[[Candidate], float]


@dataclass
class OptimizeResult:
    best: Candidate
    start: Candidate
    tried: list[tuple[int, str, str]] = field(default_factory=list)  # (round, what, result)
    rounds: list[Round] = field(default_factory=list)
    timings: list[float] = field(default_factory=list)  # every time measured, in order (the start's first): what a replay uses
    error: str | None = None  # why the loop ended early (a failed request)

    @property
    def improved(self) -> bool:
        return self.best is not self.start

    def to_dict(self) -> dict:
        return {"start_ms": self.start.ms, "best_ms": self.best.ms, "best": self.best.label(), "improved": self.improved,
                "speedup": (self.start.ms / self.best.ms) if self.start.ms and self.best.ms else None,
                "tried": [{"round": n, "variant": what, "result": res} for n, what, res in self.tried],
                "timings_ms": list(self.timings), "error": self.error}


def ceilings(spec: AttentionSpec, target: Target, ms: float | None) -> str:
    """What the target could do at best for this spec, and how close a measured time is."""
    flops = spec.flops_fwd
    size = FORMATS[spec.dtype].bytes
    elements = spec.batch * (spec.heads * spec.seqlen_q * (spec.head_dim + spec.head_dim_v)
                             + spec.kv_heads * spec.seqlen_k * (spec.head_dim + spec.head_dim_v))
    moved = elements * size + spec.batch * spec.heads * spec.seqlen_q * 4
    peak = target.peak_tflops.get("tf32" if spec.allow_tf32 else spec.dtype) or target.peak_tflops.get("fp32", 0.0)
    compute_ms = flops / (peak * 1e12) * 1e3 if peak else math.inf
    memory_ms = moved / (target.mem_bandwidth_gbs * 1e9) * 1e3
    lines = [f"- work: {flops / 1e9:.3g} GFLOP (both GEMMs), {moved / 1e6:.3g} MB read and written at least",
             f"- compute ceiling: {peak:g} TFLOPS dense {spec.dtype} on {target.name}: at least {compute_ms:.4g} ms",
             f"- memory ceiling: {target.mem_bandwidth_gbs:g} GB/s: at least {memory_ms:.4g} ms",
             f"- the kernel is {'compute' if compute_ms >= memory_ms else 'memory'}-bound at best: {max(compute_ms, memory_ms):.4g} ms"]
    if ms:
        lines.append(f"- measured: {ms:.4g} ms = {flops / (ms * 1e-3) / 1e12:.3g} TFLOPS "
                     f"({100 * max(compute_ms, memory_ms) / ms:.3g}% of the ceiling)")
    return "\n".join(lines)


def compile_text(reports: Sequence[CompileReport]) -> str:
    if not reports:
        return "(no compile report)"
    return "\n".join(f"- {r.kernel} for {r.sm} ({r.ptx_target}): {r.registers} registers/thread, {r.shared_bytes / 1024:.1f} KiB shared, "
                     f"{r.spill_bytes} B spills, num_warps={r.num_warps}, num_stages={r.num_stages}, instructions: "
                     f"{', '.join(r.instructions) or 'none'}" + "".join(f"; note: {n}" for n in r.notes) for r in reports)


def optimize_prompt(spec: AttentionSpec, target: Target, *, current: str, language: str, best_ms: float | None,
                    compile_report: str, ceilings: str, history: str) -> str:
    """The ``optimize`` template filled: one self-contained turn per round (the history is in it)."""
    if language not in ("tl", "python"):
        raise LLMError(f"language {language!r} is not tl or python", where="optimize_prompt")
    return prompts.render("optimize", target_name=target.name, spec_facts=spec_facts(spec), target_facts=target_facts(target),
                          best_ms=f"{best_ms:.4g} ms" if best_ms else "not timed", fence=language, current=current.strip(),
                          compile_report=compile_report, ceilings=ceilings, history=history,
                          what="TL program" if language == "tl" else "Triton module")


def optimize(llm: Tracked, spec: AttentionSpec, target: Target, start: Candidate, *, rounds: int, language: str,
             build: Builder, timer: Timer, work_dir: Path, max_tokens: int = 16000, say: Say | None = None,
             first_number: int = 1) -> OptimizeResult:
    """Up to ``rounds`` proposals after ``start`` (verified); the fastest verified kernel wins.
    A failed request ends the loop early with the best kernel so far."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise LLMError(f"--optimize {rounds!r} is not a positive number of rounds", where="--optimize", hint="e.g. --optimize 4")
    say = say or (lambda _line: None)
    result = OptimizeResult(best=start, start=start)

    def timed(c: Candidate) -> float:
        c.ms = float(timer(c))
        if not (math.isfinite(c.ms) and c.ms > 0):
            raise LLMError(f"the timer gave {c.ms!r} ms for {c.label()}", where="--optimize")
        result.timings.append(c.ms)
        return c.ms

    timed(start)
    say(f"optimize: the verified kernel runs in {start.ms:.4g} ms")
    for i in range(rounds):
        best = result.best
        r = Round(first_number + len(result.rounds), "optimize", "optimize")
        result.rounds.append(r)
        prompt = optimize_prompt(spec, target, current=best.code, language=language, best_ms=best.ms,
                                 compile_report=compile_text(best.compile_reports), ceilings=ceilings(spec, target, best.ms),
                                 history=_history(result.tried))
        try:
            answer = ask(llm, [Message("user", prompt)], max_tokens, r)
        except LLMError as err:
            say(r.line())
            result.error = f"round {r.number}: the request failed: {err.render()}"
            return result
        t0 = time.monotonic()
        try:
            code = extract_code(answer.text, language)
        except LLMError as err:
            r.failure, r.codes = "extract", ["extract"]
            result.tried.append((r.number, "(no code)", f"refused: {err.message}"))
            r.gate_seconds = round(time.monotonic() - t0, 3)
            say(r.line())
            continue
        outcome = build(code, work_dir / f"round-{i + 1}")
        result.rounds.extend(outcome.rounds)
        cand = outcome.candidate
        if cand is None:
            r.failure, r.codes = outcome.kind or "build", [outcome.kind or "build"]
            r.note = headline(outcome.feedback)
            result.tried.append((r.number, _variant(code), f"refused ({r.failure}): {r.note}"))
        else:
            cand.round = r.number
            try:
                ms = timed(cand)
            except AttnforgeError as err:  # it verified, but could not be timed: not a candidate
                r.failure, r.codes, r.note = "timing", ["timing"], err.message
                result.tried.append((r.number, cand.tiles(), f"verified, but timing failed: {err.message}"))
                r.gate_seconds = round(time.monotonic() - t0, 3)
                say(r.line())
                continue
            r.ok = True
            faster = ms < (best.ms or math.inf)
            r.note = f"{cand.label()} verified, {ms:.4g} ms" + (" (fastest so far)" if faster else f" (best stays {best.ms:.4g} ms)")
            result.tried.append((r.number, cand.tiles(), f"verified, {ms:.4g} ms"))
            if faster:
                result.best = cand
        r.gate_seconds = round(time.monotonic() - t0, 3)
        say(r.line())
    return result


def _variant(code: str) -> str:
    first = next((line.strip() for line in code.split("\n") if line.strip().startswith("param ")), "")
    return first or "module"


def _history(tried: list[tuple[int, str, str]]) -> str:
    if not tried:
        return "(nothing yet: this is the first proposal)"
    return "\n".join(f"- round {n}: {what}: {res}" for n, what, res in tried)
