"""What the checker reports: findings (code, position, message, hint) and resource estimates."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..targets import Target


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # "error", "warning" or "info"
    line: int
    col: int
    message: str
    hint: str

    def render(self, file: str | None = None) -> str:
        where = f"{file}:" if file else ""
        return f"{where}{self.line}:{self.col}: {self.code}: {self.message} ({self.hint})"

    def __str__(self) -> str:
        return self.render()


@dataclass
class KernelResources:
    kernel: str
    smem_bytes: int | None = None
    smem_breakdown: dict[str, int] = field(default_factory=dict)
    regs_per_thread: int | None = None
    threads: int | None = None


@dataclass
class CheckResult:
    findings: list[Finding]
    open_params: list[str]
    resources: list[KernelResources]
    target: Target | None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors
