"""A Triton module written by a model, fixed by feedback until it is verified: stage 2 by a model
(``--translate llm``: from the accepted TL program, ``prompts.translate_prompt``) and the paper's
baseline (``--mode direct``: straight from the spec, ``prompts.direct_prompt``). With the CUDA
backend, stage 2 asks for CUDA C++ kernels instead (``prompts.translate_cuda_prompt``): they go
through ``cuda_gate`` (the static gate for CUDA), are assembled behind attnforge's head (launch
facts, prelude) and compiled and verified in the sandbox (``cuda_jobs.verify_cuda_file``).

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
from . import cuda_gate, kernel_feedback, kernel_rules, prompts
from .cuda_jobs import UNVERIFIABLE, verify_cuda_file
from .errors import LLMError, SandboxError, UnsafeCodeError
from .extract import extract_code
from .kernel_jobs import ModuleVerdict, verify_module
from .messages import Message
from .rounds import DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TOKENS, Round, Say, check_max_rounds, headline, play
from .sandbox import Limits, run_isolated, run_untrusted
from .tracked import Tracked

MODULE_FILE = "kernel_triton.py"  # the name the module has in the sandbox and in its tracebacks
CUDA_FILE = "kernel_cuda.cu"  # the assembled CUDA file, likewise


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
                 first_number: int = 1, backend: str = "triton", program=None) -> KernelResult:
    """Ask ``llm`` for a Triton module: a translation of ``tl_source`` (stage 2), or with
    ``tl_source=None`` a module straight from the spec (the direct baseline). ``params``: the
    TL program's tile sizes, which size the verification shapes (none for direct modules).
    ``backend="cuda"``: CUDA C++ kernels translated from ``tl_source`` (whose parsed ``program``
    gives the ABI through the CUDA backend's own translation), gated by ``cuda_gate``."""
    check_max_rounds(max_rounds)
    say = say or (lambda _line: None)
    stage = "translate" if tl_source is not None else "direct"
    if backend == "cuda":
        abi_source = _cuda_abi(program, spec)
        first, prompt, language = prompts.translate_cuda_prompt(spec, target, tl_source, abi_source), "stage2_translate_cuda", "cuda"
        what = "CUDA translation"
    else:
        abi_source = None
        first = prompts.translate_prompt(spec, target, tl_source) if tl_source is not None else prompts.direct_prompt(spec, target)
        prompt, language, what = ("stage2_translate" if tl_source is not None else "direct"), "python", "Triton module"
    messages = [Message("user", first)]
    result = KernelResult(False)
    last = ""
    for i in range(max_rounds):
        r = Round(first_number + i, stage, prompt)
        result.rounds.append(r)

        def judge(text: str, r: Round = r) -> tuple[str, None]:
            if abi_source is not None:
                return _judge_cuda(text, spec, target, params or {}, abi_source, limits, r, result), None
            return _judge(text, spec, target, params or {}, limits, interpret, r, result), None

        feedback, _, failed = play(llm, messages, max_tokens, r, judge, say)
        if failed is not None or result.ok:
            result.error = failed
            return result
        if r.failure == UNVERIFIABLE:  # no later answer could be verified either
            result.error = f"round {r.number}: {r.note}"
            return result
        last = f"{r.failure}: {headline(feedback)}"
        messages.append(Message("user", prompts.feedback_prompt(feedback, language=language, round=r.number)))
        prompt = "feedback"
    result.error = f"no {what} passed within {max_rounds} round(s); last: {last}"
    return result


def _cuda_abi(program, spec: AttentionSpec) -> str:
    """The CUDA backend's own translation of the program: its head and kernel headers are the ABI."""
    from ..backends import get_backend

    if program is None:
        raise LLMError("a CUDA translation by a model starts from a checked TL program", where="--translate llm",
                       hint="--mode direct writes Triton modules only")
    return get_backend("cuda").translate(program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl").source


def _judge_cuda(answer: str, spec: AttentionSpec, target: Target, params: dict[str, int], abi_source: str, limits: Limits,
                r: Round, result: KernelResult) -> str:
    try:
        kernels = extract_code(answer, "cuda")
    except LLMError as err:
        r.failure, r.codes = "extract", ["extract"]
        return f"No CUDA kernels could be taken from your answer: {err.message} (hint: {err.hint})"
    try:
        found = cuda_gate.check_cuda_kernels(kernels, abi_source, file=CUDA_FILE)
    except UnsafeCodeError as err:
        r.failure, r.codes = "unsafe", [reason.split(":", 1)[0][:40] for _, _, reason in err.problems]
        r.note = err.problems[0][2]
        return kernel_feedback.unsafe_text(err, kernels, what="kernels")
    source = cuda_gate.assemble(cuda_gate.head_of(abi_source), kernels, found)
    result.source = source
    try:
        verdict = run_isolated(source, verify_cuda_file, spec.to_dict(), target.name, params, abi_source, limits=limits, file_name=CUDA_FILE)
    except SandboxError as err:
        r.failure, r.codes, r.note = f"sandbox-{err.kind}", [err.kind], err.message
        return kernel_feedback.sandbox_text(err)
    return _verdict(verdict, r, result)


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
    return _verdict(verdict, r, result)


def _verdict(verdict: ModuleVerdict, r: Round, result: KernelResult) -> str:
    result.verdict = verdict
    if verdict.ok:
        r.ok = result.ok = True
        r.note = verdict.verification.statement if verdict.verification is not None else ""
        return kernel_feedback.verdict_text(verdict)
    r.codes = [kind for kind, _ in verdict.problems] or ["verify"]
    r.failure = r.codes[0]
    r.note = verdict.problems[0][1] if verdict.problems else ""
    return kernel_feedback.verdict_text(verdict)

