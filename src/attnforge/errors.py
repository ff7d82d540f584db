"""One exception family for everything attnforge reports to a user or an LLM.

Every error says *where* (a file position, a spec field, a target name), *what* went wrong,
and a *hint* that says what to change. ``str(err)`` renders all three on one line.
"""

from __future__ import annotations

from dataclasses import dataclass

ECHO_LIMIT = 200  # at most this many characters of a user's input are echoed in an error


def shorten(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters, saying how long it was: an error names what
    was wrong without echoing a 100 KB input back."""
    if len(text) <= limit:
        return text
    note = f"... ({len(text)} characters)"
    return text[: max(0, limit - len(note))] + note


@dataclass(frozen=True)
class Position:
    """A place in a source text: 1-based line and column, with an optional file name."""

    line: int
    col: int
    file: str | None = None

    def __str__(self) -> str:
        prefix = f"{self.file}:" if self.file else ""
        return f"{prefix}{self.line}:{self.col}"


class AttnforgeError(Exception):
    """Base of every error attnforge raises on purpose."""

    def __init__(self, message: str, *, where: Position | str | None = None, hint: str | None = None):
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text} (hint: {self.hint})" if self.hint else text


class TLSyntaxError(AttnforgeError):
    """TL (or expression) text that does not parse. Carries the offending text and what was expected."""

    def __init__(self, message: str, *, where: Position, text: str = "", expected: tuple[str, ...] = (), hint: str | None = None):
        self.text = text
        self.expected = expected
        if hint is None and expected:
            hint = "expected " + ", ".join(expected[:12]) + (" ..." if len(expected) > 12 else "")
        super().__init__(message, where=where, hint=hint)


class TLCheckError(AttnforgeError):
    """A TL program the static checker rejects; ``findings`` holds every finding."""

    def __init__(self, findings: list, *, file: str | None = None):
        self.findings = findings
        first = findings[0] if findings else None
        message = f"{len(findings)} finding(s); first: {first}" if first else "TL check failed"
        super().__init__(message, where=file)


class TLRuntimeError(AttnforgeError):
    """The TL interpreter met something it cannot execute (bad index, shape mismatch at run time)."""


class SpecError(AttnforgeError):
    """An AttentionSpec field with a value that is impossible or unsupported."""

    def __init__(self, field: str, value: object, allowed: str, *, hint: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        name = shorten(str(field), 80)  # an unknown key of a spec file is the user's text too
        super().__init__(f"{name} = {shorten(repr(value))} is not allowed; allowed: {allowed}", where=f"spec.{name}", hint=hint)


class TargetError(AttnforgeError):
    """An unknown GPU target, or one that cannot be detected."""


class DoesNotFitError(TargetError):
    """A compiled kernel that exceeds the target's shared memory or spills registers: smaller
    tiles or fewer pipeline stages may fit (the planner tries its next candidate)."""


class LaunchError(AttnforgeError, ValueError):
    """A kernel called with arguments it cannot run on (wrong shape, dtype, device or strides).
    Also a ValueError, as a bad argument to any Python function is."""


class CompileError(AttnforgeError):
    """A backend's compiler refused generated code (a translator bug, or a construct this
    compiler version cannot build): the message carries the compiler's first lines."""


class TranslateError(AttnforgeError):
    """A TL program that stage 2 cannot turn into target code (a construct the target language lacks)."""


class OutputError(AttnforgeError):
    """A kernel directory or cache entry that cannot be written (a full disk, no permission, a
    path that cannot be created): nothing half-written is left where a reader would take it."""
