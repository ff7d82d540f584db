"""A Triton module written by a model, fixed by feedback until it is verified: stage 2 by a model
(``--translate llm``: from the accepted TL program, ``prompts.translate_prompt``) and the paper's
baseline (``--mode direct``: straight from the spec, ``prompts.direct_prompt``).

Each answer goes through, in order, until one passes all:

1. the static gate for kernel modules (kernel_rules.py on top of gate.py): no imports but torch,
   triton and math, no files, processes or network, no torch attention or host-side products,
   the module contract; refused answers never run;
2. the sandbox (sandbox.run_untrusted: a child process with a wall clock, memory and process
   caps), where kernel_jobs.verify_module loads it, verifies it with attnforge's verifier,
   checks that the answer comes from its Triton kernels, and compiles them for the target.

Every failure goes back to the model as feedback (kernel_feedback.py). The loop stops at the
first verified module, after ``max_rounds`` answers, or when a request fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec import AttentionSpec
from ..targets import Target
from . import kernel_feedback, kernel_rules, prompts
from .errors import LLMError, SandboxError, UnsafeCodeError
from .extract import extract_code
from .kernel_jobs import ModuleVerdict, verify_module
from .messages import Message
from .rounds import DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TOKENS, Round, Say, check_max_rounds, headline, play
from .sandbox import Limits, run_untrusted
from .tracked import Tracked

MODULE_FILE = "kernel_triton.py"  # the name the module has in the sandbox and in its tracebacks


@dataclass
class KernelResult:
    ok: bool
    rounds: list[Round] = field(default_factory=list)
    source: str | None = None  # the verified module (or the last one that ran, when not ok)
    verdict: ModuleVerdict | None = None
    error: str | None = None


def sandbox_limits(timeout_s: float, *, gpu: bool) -> Limits:
    """The child's limits: CUDA reserves far more address space than it uses, so no memory cap on a GPU."""
    return Limits(timeout_s=timeout_s, memory_bytes=None if gpu else Limits().memory_bytes)


def write_kernel(llm: Tracked, spec: AttentionSpec, target: Target, *, tl_source: str | None = None,
                 params: dict[str, int] | None = None, max_rounds: int = DEFAULT_MAX_ROUNDS, max_tokens: int = DEFAULT_MAX_TOKENS,
                 limits: Limits = Limits(), interpret: bool | None = None, say: Say | None = None,
                 first_number: int = 1) -> KernelResult:
    """Ask ``llm`` for a Triton module: a translation of ``tl_source`` (stage 2), or with
    ``tl_source=None`` a module straight from the spec (the direct baseline). ``params``: the
    TL program's tile sizes, which size the verification shapes (none for direct modules)."""
    check_max_rounds(max_rounds)
    say = say or (lambda _line: None)
    stage = "translate" if tl_source is not None else "direct"
    first = prompts.translate_prompt(spec, target, tl_source) if tl_source is not None else prompts.direct_prompt(spec, target)
    prompt = "stage2_translate" if tl_source is not None else "direct"
    messages = [Message("user", first)]
    result = KernelResult(False)
    last = ""
    for i in range(max_rounds):
        r = Round(first_number + i, stage, prompt)
        result.rounds.append(r)
        feedback, _, failed = play(llm, messages, max_tokens, r,
                                   lambda text: (_judge(text, spec, target, params or {}, limits, interpret, r, result), None), say)
        if failed is not None or result.ok:
            result.error = failed
            return result
        last = f"{r.failure}: {headline(feedback)}"
        messages.append(Message("user", prompts.feedback_prompt(feedback, language="python", round=r.number)))
        prompt = "feedback"
    result.error = f"no Triton module passed within {max_rounds} round(s); last: {last}"
    return result


def _judge(answer: str, spec: AttentionSpec, target: Target, params: dict[str, int], limits: Limits,
           interpret: bool | None, r: Round, result: KernelResult) -> str:
    try:
        source = extract_code(answer, "python")
    except LLMError as err:
        r.failure, r.codes = "extract", ["extract"]
        return f"No Python module could be taken from your answer: {err.message} (hint: {err.hint})"
    try:
        kernel_rules.check_kernel_source(source, file=MODULE_FILE)
    except UnsafeCodeError as err:
        r.failure, r.codes = "unsafe", [reason.split(" (", 1)[0] for _, _, reason in err.problems]
        r.note = err.problems[0][2]
        return kernel_feedback.unsafe_text(err, source)
    except LLMError as err:  # does not parse
        r.failure, r.codes = "syntax", ["syntax"]
        return kernel_feedback.syntax_text(err)
    result.source = source
    try:
        verdict = run_untrusted(source, verify_module, spec.to_dict(), target.name, params, interpret, True,
                                limits=limits, file_name=MODULE_FILE)
    except SandboxError as err:
        r.failure, r.codes, r.note = f"sandbox-{err.kind}", [err.kind], err.message
        return kernel_feedback.sandbox_text(err)
    result.verdict = verdict
    if verdict.ok:
        r.ok = result.ok = True
        r.note = verdict.verification.statement if verdict.verification is not None else ""
        return kernel_feedback.verdict_text(verdict)
    r.codes = [kind for kind, _ in verdict.problems] or ["verify"]
    r.failure = r.codes[0]
    r.note = verdict.problems[0][1] if verdict.problems else ""
    return kernel_feedback.verdict_text(verdict)

