"""Stage 1 by a model: the TL program, written as the paper's two steps and fixed by feedback.

1. The model writes a sketch (``prompts.sketch_prompt``): the data flow with its tuning
   parameters open. The checker judges it as a sketch (``sketch=True``; its claims against the
   spec too). A clean sketch with every parameter given is judged as a full program at once.
2. The model chooses the parameters with the target's facts and writes the full program
   (``prompts.params_prompt``, a follow-up turn). The checker, then the judge against the spec
   (claims TL601-606, then numbers exactly in float64 on small shapes) judge it.
3. Anything refused goes back as feedback (``prompts.feedback_prompt``: line, code, message and
   hint; the failing shape, its worst rows and how far off), and the model answers again.

An accepted program is handed to ``build`` (the pipeline's: ``generate(..., tl=...)``, every
gate again, then translation, compile and verification); a build failure a new answer may fix
(a compile that does not fit the target, a failed verification) goes back as feedback too.

The loop stops at the first of: a program accepted and built (ok); ``max_rounds`` answers
judged without one; a request that fails (network, timeout, HTTP errors after retries, the
budget); a build failure that no answer can fix (``Built.retry`` False).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..spec import AttentionSpec
from ..targets import Target
from . import prompts
from .errors import LLMError
from .extract import extract_code
from .messages import Message
from .rounds import DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TOKENS, Round, Say, check_max_rounds, headline, play
from .tl_judge import TLVerdict, judge_program, judge_sketch
from .tracked import Tracked


@dataclass
class Built:
    """What ``build`` made of an accepted program. ``retry``: whether a new answer may fix a failure."""

    ok: bool
    value: object = None
    kind: str | None = None
    feedback: str = ""
    retry: bool = True


Build = Callable[[str], Built]


@dataclass
class Stage1Result:
    ok: bool
    rounds: list[Round] = field(default_factory=list)
    source: str | None = None  # the accepted TL program, as the model wrote it
    verdict: TLVerdict | None = None
    built: object = None  # what build returned for it
    error: str | None = None  # one line, when not ok


def write_tl(llm: Tracked, spec: AttentionSpec, target: Target, *, max_rounds: int = DEFAULT_MAX_ROUNDS,
             max_tokens: int = DEFAULT_MAX_TOKENS, build: Build | None = None, say: Say | None = None,
             form: str = "portable") -> Stage1Result:
    """Ask ``llm`` for a TL program for ``spec`` on ``target`` until one passes every gate (see the
    module doc). ``form``: the TL form the backend translates ("hopper": roles, rings, barriers)."""
    check_max_rounds(max_rounds)
    say = say or (lambda _line: None)
    result = Stage1Result(False)
    messages = [Message("user", prompts.sketch_prompt(spec, target, form=form))]
    prompt, phase, last = "stage1_sketch", "sketch", ""
    while len(result.rounds) < max_rounds:
        r = Round(len(result.rounds) + 1, "tl", prompt)
        result.rounds.append(r)
        feedback, next_prompt, failed = play(llm, messages, max_tokens, r, lambda text: _judge(text, spec, target, phase, r, result, build), say)
        if failed is not None or result.ok:
            result.error = failed
            return result
        if next_prompt == "stage1_params":
            phase = "params"
            messages.append(Message("user", prompts.params_prompt(spec, target, feedback)))
            prompt = "stage1_params"
            continue
        last = f"{r.failure}: {headline(feedback)}"
        if next_prompt is None:  # a failure no answer can fix
            result.error = f"round {r.number}: {last}"
            return result
        messages.append(Message("user", prompts.feedback_prompt(feedback, language="tl", round=r.number)))
        prompt = "feedback"
    result.error = f"no TL program passed within {max_rounds} round(s); last: {last}"
    return result


def _judge(answer: str, spec: AttentionSpec, target: Target, phase: str, r: Round, result: Stage1Result,
           build: Build | None) -> tuple[str, str | None]:
    """Judge one answer; returns (feedback, next prompt). On a clean sketch with open parameters
    the feedback is the sketch itself (for the params prompt); on success ``result.ok`` is set."""
    try:
        source = extract_code(answer, "tl")
    except LLMError as err:
        r.failure, r.codes = "extract", ["extract"]
        return f"No TL program could be taken from your answer: {err.message} (hint: {err.hint})", "feedback"
    verdict = judge_sketch(source, spec, target) if phase == "sketch" else judge_program(source, spec, target)
    if verdict.ok and phase == "sketch":
        if verdict.open_params:
            r.ok, r.note = True, "sketch accepted; open: " + ", ".join(verdict.open_params)
            return source, "stage1_params"
        verdict = judge_program(source, spec, target)  # every parameter given: judge it as the program
    r.codes = list(verdict.codes)
    if not verdict.ok:
        r.failure = verdict.kind
        return verdict.feedback, "feedback"
    result.verdict, result.source = verdict, source
    if build is None:
        r.ok = result.ok = True
        return verdict.feedback, None
    built = build(source)
    if built.ok:
        r.ok = result.ok = True
        result.built = built.value
        return verdict.feedback, None
    r.failure = built.kind or "build"
    r.codes.append(r.failure)
    result.built = built.value
    return built.feedback, ("feedback" if built.retry else None)

