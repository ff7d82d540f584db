"""One round of an LLM loop (a prompt, its answer, what the gates said) and the one place a loop
asks the model, so every loop records rounds the same way (for report.json's "llm" section and
the comparison of --mode tl and --mode direct)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence, TypeVar

from .errors import BudgetExceeded, LLMError
from .messages import Completion, Message
from .tracked import Tracked

Say = Callable[[str], None]
T = TypeVar("T")
DEFAULT_MAX_ROUNDS = 4  # answers judged per stage
DEFAULT_MAX_TOKENS = 16000  # the longest answer asked for


@dataclass
class Round:
    """``stage``: "tl", "translate", "direct" or "optimize". ``prompt``: the template that asked
    (stage1_sketch, stage1_params, stage2_translate, direct, feedback, optimize). ``failure``:
    the kind of failure (None when the answer passed its gates). ``codes``: finding codes or
    refusal kinds. ``seconds``: the model's answer time; ``gate_seconds``: the gates' time."""

    number: int
    stage: str
    prompt: str
    ok: bool = False
    failure: str | None = None
    codes: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    gate_seconds: float = 0.0
    model: str = ""  # the model name the server reported
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        verdict = "ok" if self.ok else f"refused ({self.failure})"
        codes = f" [{', '.join(dict.fromkeys(self.codes))}]" if self.codes and not self.ok else ""
        return (f"llm round {self.number} {self.stage}/{self.prompt}: {self.input_tokens}+{self.output_tokens} tokens, "
                f"{self.seconds:.1f} s; {verdict}{codes}" + (f": {self.note}" if self.note else ""))


def ask(llm: Tracked, messages: Sequence[Message], max_tokens: int, record: Round) -> Completion:
    """The model's answer to ``messages``; its tokens and time go into ``record``. A failed
    request raises (LLMError) with the round marked failed ("llm", or "budget")."""
    start = time.monotonic()
    try:
        answer = llm.complete(list(messages), max_tokens=max_tokens)
    except BudgetExceeded as err:
        record.failure, record.note = "budget", err.message
        if isinstance(err.completion, Completion):
            _count(record, err.completion)
        record.seconds = time.monotonic() - start
        raise
    except LLMError as err:
        record.failure, record.note = "llm", err.message
        record.seconds = time.monotonic() - start
        raise
    _count(record, answer)
    return answer


def check_max_rounds(max_rounds: object) -> None:
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise LLMError(f"max_rounds = {max_rounds!r} is not a positive integer", where="--max-rounds", hint="e.g. 4")


def play(llm: Tracked, messages: list[Message], max_tokens: int, record: Round,
         judge: Callable[[str], tuple[str, T]], say: Say) -> tuple[str, T | None, str | None]:
    """One round of a loop: the model's answer to ``messages`` (appended to them), judged by
    ``judge(text) -> (feedback, what next)`` with its time in ``record.gate_seconds``, the
    round's line said. Returns (feedback, what next, None), or ("", None, a one-line error)
    when the request failed."""
    try:
        answer = ask(llm, messages, max_tokens, record)
    except LLMError as err:
        say(record.line())
        return "", None, f"round {record.number}: the request failed: {err.render()}"
    messages.append(Message("assistant", answer.text))
    start = time.monotonic()
    feedback, after = judge(answer.text)
    record.gate_seconds = round(time.monotonic() - start, 3)
    if record.failure and not record.note:
        record.note = headline(feedback)[:200]
    say(record.line())
    return feedback, after, None


def _count(record: Round, answer: Completion) -> None:
    record.input_tokens, record.output_tokens, record.seconds = answer.input_tokens, answer.output_tokens, answer.seconds
    record.model = answer.model


def failures_by_kind(rounds: Sequence[Round]) -> dict[str, int]:
    return dict(sorted(Counter(r.failure for r in rounds if r.failure).items()))


def totals(rounds: Sequence[Round]) -> dict[str, float]:
    return {"rounds": len(rounds), "input_tokens": sum(r.input_tokens for r in rounds),
            "output_tokens": sum(r.output_tokens for r in rounds), "llm_seconds": round(sum(r.seconds for r in rounds), 3),
            "gate_seconds": round(sum(r.gate_seconds for r in rounds), 3)}


def headline(feedback: str) -> str:
    """The most telling line of a feedback text (its first item, else its first line), for one-line errors."""
    lines = [line.strip() for line in feedback.split("\n") if line.strip()]
    for line in lines:
        if line.startswith("- "):
            return line[2:]
    return lines[0] if lines else ""
