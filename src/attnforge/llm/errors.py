"""The LLM path's errors: one family under AttnforgeError, each with where and a hint.

Messages never carry an API key: everything that may hold server text goes through
``redact.scrub`` before it reaches an error.
"""

from __future__ import annotations

from ..errors import AttnforgeError


class LLMError(AttnforgeError):
    """A model could not be asked or its answer could not be used (network, protocol, refusal,
    timeout, missing SDK, bad configuration, no code in the answer)."""


class BudgetExceeded(LLMError):
    """A cap on rounds, tokens or cost was reached. ``completion`` is the answer that crossed the
    cap (None when a request was refused before it was sent)."""

    def __init__(self, message: str, *, where: str = "budget", hint: str | None = None, completion: object = None):
        self.completion = completion
        super().__init__(message, where=where, hint=hint)


class UnsafeCodeError(LLMError):
    """Model-written code (a Python module, CUDA kernels) refused by a static gate; ``problems``
    lists (line, col, reason)."""

    def __init__(self, problems: list[tuple[int, int, str]], *, file: str = "<llm>", hint: str | None = None):
        self.problems = problems
        line, col, reason = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"refused: {reason}{more}", where=f"{file}:{line}:{col}",
                         hint=hint or ("kernels may import only triton, triton.language, torch and math, and may not "
                                       "touch files, processes, the network or dunder attributes"))


class SandboxError(LLMError):
    """Model-written code that failed in its child process. ``kind`` is one of "timeout",
    "memory", "signal", "exception", "no-result"."""

    def __init__(self, kind: str, message: str, *, where: str = "sandbox", hint: str | None = None, detail: str = ""):
        self.kind = kind
        self.detail = detail
        super().__init__(message, where=where, hint=hint)
