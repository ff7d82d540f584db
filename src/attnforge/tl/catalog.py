"""The canonical TL programs shipped with attnforge (``tl/library/*.tl``), by file name."""

from __future__ import annotations

import functools
import re
from importlib import resources

from ..errors import AttnforgeError, shorten
from . import nodes as n
from .parser import parse

_PACKAGE = "attnforge.tl.library"


@functools.lru_cache(maxsize=1)
def programs() -> dict[str, str]:
    """File name -> one-sentence summary (the first sentence of the program's doc comment)."""
    out = {}
    for entry in sorted(resources.files(_PACKAGE).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".tl"):
            doc = " ".join(line.lstrip("# ").strip() for line in entry.read_text().splitlines() if line.startswith("#"))
            summary = doc.split(":", 1)[1] if ":" in doc else doc
            out[entry.name] = re.split(r"\.\s+(?=[A-Z])", summary)[0].strip().rstrip(".")
    return out


def file_name(name: str) -> str | None:
    """The shipped file a name refers to (``gqa_fwd`` or ``gqa_fwd.tl``), or None."""
    base = name if name.endswith(".tl") else name + ".tl"
    return base if base in programs() else None


def source(name: str) -> str:
    """The text of a shipped program."""
    found = file_name(name)
    if found is None:
        raise AttnforgeError(f"no shipped TL program {shorten(repr(name), 80)}", where="library", hint="shipped: " + ", ".join(programs()))
    return resources.files(_PACKAGE).joinpath(found).read_text()


def load(name: str) -> n.Program:
    """A shipped program, parsed."""
    return parse(source(name), file=file_name(name))
