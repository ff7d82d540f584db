"""Pull a TL program, a Python module or CUDA C++ kernels out of a model's answer.

Answers are prose around fenced code blocks (``` or ~~~, any length of at least three). The block
labelled with the wanted language wins (the last such, as answers revise themselves); else the
last unlabelled block. Reasoning that models wrap in <think>...</think> is skipped. An answer with
no fence is taken whole only when it is entirely code (a Python module that parses, a TL text
that starts with a comment or a ``kernel`` line, CUDA that starts with a comment or ``extern "C"``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .errors import LLMError

LABELS = {"tl": ("tl", "tl-code", "tlcode", "thinking-language"), "python": ("python", "py", "python3"),
          "cuda": ("cuda", "cu", "c++", "cpp", "cxx")}
WHAT = {"tl": "TL program", "python": "module", "cuda": "CUDA kernels"}
_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
_THINK = re.compile(r"<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Block:
    label: str  # the fence's info word, lower case ("" when none)
    code: str
    line: int  # 1-based line of the opening fence in the answer
    closed: bool


def blocks(answer: str) -> list[Block]:
    """Every fenced block of an answer, in order (an unclosed last block runs to the end)."""
    out = []
    lines = answer.split("\n")
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match["fence"]
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        out.append(Block(match["info"].lower(), "\n".join(lines[i + 1:j]), i + 1, j < len(lines)))
        i = j + 1
    return out


def extract_code(answer: str, language: str) -> str:
    """The ``language`` ("tl", "python" or "cuda") code of an answer, ending in a newline."""
    if language not in LABELS:
        raise LLMError(f"language {language!r} is not one of {', '.join(LABELS)}", where="extract_code")
    text = _THINK.sub("", answer.replace("\r\n", "\n"))
    found = blocks(text)
    labelled = [b for b in found if b.label in LABELS[language]]
    other = [b for b in found if not b.label]
    chosen = labelled[-1] if labelled else other[-1] if other else None
    if chosen is None:
        if not found and _is_bare(text, language):
            return text.strip("\n") + "\n"
        labels = sorted({b.label for b in found})
        seen = f" (blocks labelled {', '.join(labels)} only)" if labels else ""
        raise LLMError(f"no ```{language} code block in the answer{seen}", where="answer",
                       hint=f"answer with the whole {WHAT[language]} in one fenced block that starts with ```{language}")
    if not chosen.closed:
        raise LLMError(f"the ```{chosen.label or language} block that opens at line {chosen.line} of the answer is never closed",
                       where=f"answer:{chosen.line}", hint="the answer was probably cut off: raise max_tokens")
    if not chosen.code.strip():
        raise LLMError(f"the code block at line {chosen.line} of the answer is empty", where=f"answer:{chosen.line}",
                       hint=f"put the whole {WHAT[language]} inside the block")
    return chosen.code.strip("\n") + "\n"


def _is_bare(text: str, language: str) -> bool:
    body = text.strip()
    if not body:
        return False
    if language == "python":
        try:
            tree = ast.parse(body)
        except (SyntaxError, ValueError):
            return False
        return any(isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom)) for node in tree.body)
    first = body.split("\n", 1)[0]
    if language == "cuda":
        return first.startswith("//") or first.startswith('extern "C"')
    return first.startswith("#") or re.match(r"kernel\s+\w+\s*$", first) is not None
