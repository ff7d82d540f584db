"""The seam every stage-2 backend plugs into: translate, compile for a target, load.

A backend turns a checked TL program into source for one GPU language (``translate``), compiles
that source for a table target without needing the GPU (``compile``: reports registers, shared
memory, spills and instructions), and loads a source file as a callable kernel (``load``). It
says up front what it can build (``capabilities``, ``unsupported``) and which TL strategies a
target or its compiler rules out (``refused_strategies``), so the pipeline and the planners can
refuse clearly instead of failing late. ``attnforge.backends`` keeps the registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..compile_report import CompileReport
    from ..spec import AttentionSpec
    from ..targets import Target
    from ..tl import nodes as n


class Kernel(Protocol):
    """A loaded kernel: ``launch`` into caller-provided outputs, or call it for new ones."""

    interpret: bool  # True: runs on CPU tensors in an interpreter, not natively on a GPU

    @property
    def device(self) -> str: ...  # the torch device type its tensors live on

    def launch(self, q: Any, k: Any, v: Any, o: Any, lse: Any, **scalars: Any) -> None: ...

    def __call__(self, q: Any, k: Any, v: Any, *, scale: float | None = None, **scalars: Any) -> tuple[Any, Any]: ...


@dataclass(frozen=True)
class Capabilities:
    """What a backend builds, in words a user reads in ``attnforge backends``."""

    language: str
    targets: str
    dtypes: tuple[str, ...]
    features: tuple[str, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Translation:
    """A backend's source for one program: the text, the kernel names, and what the backend
    needs again to compile and launch it (``detail``, private to that backend)."""

    source: str
    kernels: tuple[str, ...]
    detail: Any


class Backend(ABC):
    name: str
    source_file: str  # the file name of the source in a kernel directory
    tl_form = "portable"  # the TL the built-in planner writes for it: "portable", or "hopper" (roles, rings, barriers: docs/TL.md)
    mma = "target"  # the MMA its kernels issue, which the planner's tiles follow: "target" (the target's best) or "mma_sync" (plan.builtin.MMA_RULES)

    @abstractmethod
    def capabilities(self) -> Capabilities: ...

    @abstractmethod
    def unsupported(self, spec: AttentionSpec, target: Target) -> str | None:
        """Why this backend cannot build ``spec`` for ``target``, or None when it can."""

    @abstractmethod
    def refused_strategies(self, target: Target) -> dict[str, str]:
        """TL strategy parameters (``analysis.STRATEGY_PARAMS``) that cannot be on for ``target``, with the reason."""

    @abstractmethod
    def translate(self, program: n.Program, *, head_dim: int, head_dim_v: int, file: str | None = None) -> Translation: ...

    @abstractmethod
    def compile(self, translation: Translation, source_path: Path, target: Target, build_dir: Path) -> list[CompileReport]:
        """Compile every kernel for ``target`` (no GPU needed), writing binaries under ``build_dir``."""

    @abstractmethod
    def load(self, source_path: Path, *, interpret: bool | None = None) -> Kernel:
        """The kernel in ``source_path``: native on a GPU, else (or with ``interpret``) interpreted."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """The compiler and runtime versions a build depends on (for reports and cache keys)."""


def refuse_hopper_form(program: n.Program, backend: str, file: str | None = None) -> None:
    """Raise TranslateError at the first statement of the Hopper form (roles, barriers, rings, TMA
    copies, async GEMMs; docs/TL.md, section 11): only a Gluon translator expresses them."""
    from ..errors import TranslateError
    from ..tl import nodes as tl_nodes

    for kernel in program.kernels:
        node = tl_nodes.hopper_statement(kernel)
        if node is not None:
            raise TranslateError(f"{kernel.name}: the Hopper form (roles, barriers, async copies) is translated by the gluon backend only, not by {backend}",
                                 where=node.pos(file), hint="translate it with the gluon backend, or write the kernel without roles, barriers, rings and async statements")
