"""The static gate for model-written CUDA C++ (``--translate llm --backend cuda``): what the kernels
a model writes may say, checked on their tokens before nvcc sees them, and how they become a file.

The model writes the kernels only. attnforge puts the file's head in front of them: the launch
facts its loader reads (grid, threads, dynamic shared memory, the arguments in order) and the
prelude of device helpers, the only PTX in the file. So the launch geometry and the inline
assembly are attnforge's, and the gate refuses, each with line:col and the reason:

* inline assembly (``asm``, ``__asm__``): MMAs, ldmatrix and cp.async go through the prelude's
  wrappers (``af_mma``, ``af_ldsm_x4``, ``af_copy16``, ...);
* every preprocessor line but ``#pragma unroll``: no ``#include`` (the prelude includes what is
  needed), no macro that could hide a refused token;
* string and character literals, but the ``"C"`` of ``extern "C"``: nothing for printf or asm to take;
* the device-side heap, printing, traps and launches (``malloc``, ``free``, ``new``, ``delete``,
  ``printf``, ``__trap``, ``__brkpt``, ``<<<``) and the CUDA runtime's ``cuda*`` calls;
* variables that outlive a launch: ``__device__``, ``__managed__`` and ``__constant__`` variables at
  file scope (``extern __shared__`` arrays are allowed: they are the dynamic shared memory);
* kernels other than the program's: each TL kernel is one ``extern "C" __global__`` function with
  the ABI's name, launch bounds and parameters (the loader passes exactly those), and there is no
  other ``__global__`` function;
* what would change the prelude's meaning: a declaration of one of its names (a lambda, overload
  or specialisation that the kernels' calls would reach instead of the prelude's helper, e.g. an
  ``af_cp_wait`` that waits for nothing), ``static`` inside a function (device statics outlive a
  launch);
* what changes the tokens before the compiler's tokenizer sees them: backslashes (line splices,
  universal character names) and the ``%:`` digraph of ``#``.

What a token check cannot see (a pointer walked past its tensor) stays in the sandbox's child
process with the kernel; the verification that follows decides whether the answer is right, and
the backend's pipeline lint (one ``af_cp_wait`` per Copy at its depth) runs before nvcc as for
attnforge's own kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..backends.cuda.module import KERNEL_MARK
from ..backends.cuda.prelude import PRELUDE
from .errors import UnsafeCodeError

MAX_SOURCE_CHARS = 256 * 1024
_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<pre>^[ \t]*\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?)
  | (?P<launch><<<)
  | (?P<splice>\\|%:)
  | (?P<word>[A-Za-z_]\w*)
  | (?P<number>\d[\w.]*)
  | (?P<space>\s+)
  | (?P<punct>.)
""", re.VERBOSE | re.MULTILINE | re.DOTALL)
REFUSED_WORDS = {
    "asm": "inline assembly: use the prelude's wrappers (af_mma, af_ldsm_x4, af_copy16, ...)",
    "__asm__": "inline assembly: use the prelude's wrappers (af_mma, af_ldsm_x4, af_copy16, ...)",
    "__asm": "inline assembly: use the prelude's wrappers (af_mma, af_ldsm_x4, af_copy16, ...)",
    "malloc": "device-side heap allocation", "free": "device-side heap allocation", "new": "device-side heap allocation",
    "delete": "device-side heap allocation", "printf": "device-side printing", "__trap": "a device trap", "__brkpt": "a breakpoint",
    "__managed__": "managed memory",
}
STATE_QUALIFIERS = ("__device__", "__managed__", "__constant__")
PRELUDE_NAMES = frozenset(re.findall(r"\baf_\w+", PRELUDE))  # the helpers and types the prelude defines
HINT = ("write only the program's kernels, with the ABI's headers, calling the prelude's helpers for PTX: no asm, no "
        "preprocessor lines but #pragma unroll, no strings, no heap, printf or device launches")


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int
    col: int


def tokens(source: str) -> list[Token]:
    """The source's tokens with 1-based line:col, comments and whitespace dropped."""
    out, line, start = [], 1, 0
    for m in _TOKEN.finditer(source):
        kind, text = m.lastgroup, m.group()
        if kind not in ("comment", "space"):
            out.append(Token(kind, text, line, m.start() - start + 1))
        newlines = text.count("\n")
        if newlines:
            line += newlines
            start = m.start() + text.rindex("\n") + 1
    return out


def expected_headers(deterministic_source: str) -> dict[str, list[str]]:
    """Kernel name -> the tokens of its header (``extern "C" ... NAME(...)`` up to ``{``), from the
    backend's own translation of the same TL program: the ABI the loader launches."""
    out = {}
    for part in deterministic_source.split(KERNEL_MARK)[1:]:
        name = part.split("\n", 1)[0].strip()
        toks = [t.text for t in tokens(part.split("\n", 1)[1]) if t.kind != "pre"]
        start = toks.index("extern")
        out[name] = toks[start:toks.index("{", start)]
    return out


def header_text(deterministic_source: str) -> str:
    """Each kernel's header as the backend writes it, with its body elided: what the model is shown."""
    out = []
    for part in deterministic_source.split(KERNEL_MARK)[1:]:
        lines = part.split("\n")
        start = next(i for i, line in enumerate(lines) if line.startswith('extern "C"'))
        stop = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("{"))
        out += lines[start:stop + 1] + ["    // ... the kernel's body ...", "}", ""]
    return "\n".join(out).rstrip("\n")


def check_cuda_kernels(source: str, headers: dict[str, list[str]], *, file: str = "kernel_cuda.cu") -> list[tuple[str, int]]:
    """Refuse what the module docstring lists (``UnsafeCodeError`` with every problem found);
    return each kernel's name and the 0-based line its ``extern "C"`` stands on, in source order."""
    problems: list[tuple[int, int, str]] = []
    if len(source) > MAX_SOURCE_CHARS:
        raise UnsafeCodeError([(1, 1, f"the kernels are {len(source):,} characters; at most {MAX_SOURCE_CHARS:,}")], file=file, hint=HINT)
    toks = tokens(source)
    depth = 0
    found: list[tuple[str, int]] = []
    for i, t in enumerate(toks):
        if t.kind == "pre":
            if not re.fullmatch(r"\s*#\s*pragma\s+unroll(\s+\d+)?\s*", t.text):
                problems.append((t.line, t.col, f"the preprocessor line {t.text.strip()[:60]!r}: only #pragma unroll is allowed "
                                                "(the prelude includes what the kernels need)"))
        elif t.kind == "string" and not (t.text == '"C"' and i > 0 and toks[i - 1].text == "extern"):
            problems.append((t.line, t.col, "a string or character literal: the kernels need none (no printf, no asm)"))
        elif t.kind == "launch":
            problems.append((t.line, t.col, "a kernel launch from device code"))
        elif t.kind == "splice":
            problems.append((t.line, t.col, f"{t.text!r}: a backslash (line splice, universal character name) or the %: digraph "
                                            "changes tokens before the compiler reads them"))
        elif t.kind == "word" and t.text in PRELUDE_NAMES and _declares(toks, i, depth):
            problems.append((t.line, t.col, f"{t.text} is declared here: it is the prelude's (call it; give your own helpers "
                                            "other names)"))
        elif t.kind == "word" and t.text == "static" and depth > 0:
            problems.append((t.line, t.col, "static inside a function: device statics outlive a launch"))
        elif t.kind == "word" and t.text in REFUSED_WORDS:
            problems.append((t.line, t.col, f"{t.text}: {REFUSED_WORDS[t.text]}"))
        elif t.kind == "word" and re.match(r"cuda[A-Z]", t.text):
            problems.append((t.line, t.col, f"{t.text}: the CUDA runtime is not for kernels to call"))
        elif t.kind == "word" and t.text in STATE_QUALIFIERS and depth == 0 and _declares_variable(toks, i):
            problems.append((t.line, t.col, f"a {t.text} variable at file scope: state that outlives a launch"))
        elif t.kind == "word" and t.text == "__global__":
            name = _kernel_at(toks, i, headers, problems)
            if name is not None:
                found.append((name, toks[i - 2].line - 1))
        elif t.text == "{":
            depth += 1
        elif t.text == "}":
            depth = max(0, depth - 1)
    names = [name for name, _ in found]
    for name in headers:
        if name not in names:
            problems.append((1, 1, f"kernel {name} is missing: write extern \"C\" __global__ void ... {name}(...) with the ABI's parameters"))
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append((1, 1, f"kernel {name} is written {names.count(name)} times"))
    if problems:
        raise UnsafeCodeError(sorted(problems), file=file, hint=HINT)
    return found


_NOT_A_TYPE = frozenset({"return", "else", "do", "case", "throw", "sizeof", "co_return", "co_yield", "goto"})


def _declares(toks: list[Token], i: int, depth: int) -> bool:
    """Whether the name at ``toks[i]`` is being declared: a type or qualifier word stands right
    before it (``void af_x(``, ``auto af_x =``), or at file scope a ``>``, ``*`` or ``&`` does, and
    a parameter list, template arguments or an initialiser follows (``const af_elem* p`` uses a type)."""
    if i + 1 < len(toks) and toks[i + 1].text not in ("(", "<", "=", ";", "[", "{", ","):
        return False
    if i == 0:
        return depth == 0
    prev = toks[i - 1]
    if prev.kind == "word":
        return prev.text not in _NOT_A_TYPE
    return depth == 0 and prev.text in (">", "*", "&")


def _declares_variable(toks: list[Token], i: int) -> bool:
    """Whether the declaration starting at ``toks[i]`` is a variable (``;`` or ``=`` comes before ``(`` or ``{``)."""
    for t in toks[i + 1:i + 64]:
        if t.text in ("(", "{"):
            return False
        if t.text in (";", "="):
            return True
    return False


def _kernel_at(toks: list[Token], i: int, headers: dict[str, list[str]], problems: list) -> str | None:
    """The kernel whose header has ``__global__`` at ``toks[i]``, checked against the ABI."""
    t = toks[i]
    if i < 2 or [x.text for x in toks[i - 2:i]] != ["extern", '"C"']:
        problems.append((t.line, t.col, "a __global__ function that is not extern \"C\": only the program's kernels, "
                                        "each written extern \"C\" __global__ void __launch_bounds__(THREADS) NAME(...)"))
        return None
    end = next((j for j in range(i, min(len(toks), i + 400)) if toks[j].text == "{"), None)
    got = [x.text for x in toks[i - 2:end]] if end is not None else []
    name = next((h for h, want in headers.items() if h in got), None)
    if name is None:
        problems.append((t.line, t.col, f"a __global__ function that is none of the program's kernels ({', '.join(headers)})"))
        return None
    if got != headers[name]:
        problems.append((t.line, t.col, f"kernel {name}'s header is not the ABI's: want {' '.join(headers[name])}"))
        return None
    return name


def assemble(head: str, kernels: str, found: list[tuple[str, int]]) -> str:
    """The file: attnforge's head (launch facts, prelude) and the model's kernels, each after the
    ``// ---- kernel NAME`` line the loader's lint finds it by."""
    # (marker lines the model copied are blanked, not removed: ``found`` counts lines as written)
    lines = ["" if line.startswith(KERNEL_MARK) else line for line in kernels.rstrip("\n").split("\n")]
    for name, at in sorted(found, key=lambda f: -f[1]):
        lines.insert(at, f"{KERNEL_MARK}{name}")
    return head.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"


def head_of(deterministic_source: str) -> str:
    """The part of the backend's own file before its first kernel: launch facts and prelude."""
    return deterministic_source[:deterministic_source.index(KERNEL_MARK)]


def check_cuda_file(source: str, abi_source: str, *, file: str = "kernel_cuda.cu") -> None:
    """A whole model-written CUDA file, as a kernel directory holds it (``attnforge verify``): the
    head must be attnforge's own for the program (``abi_source``: the backend's translation) and
    the rest must pass ``check_cuda_kernels``."""
    head = head_of(abi_source).rstrip("\n")
    if not source.startswith(head):
        line = next((i for i, (a, b) in enumerate(zip(source.split("\n"), head.split("\n")), 1) if a != b), 1)
        raise UnsafeCodeError([(line, 1, "the file's head (launch facts and prelude) is not the one attnforge writes for this TL program")],
                              file=file, hint="regenerate the directory: a model writes the kernels only, attnforge the head")
    rest = source[len(head):]
    offset = head.count("\n")
    try:
        check_cuda_kernels(rest, expected_headers(abi_source), file=file)
    except UnsafeCodeError as err:  # (lines counted in the whole file)
        raise UnsafeCodeError([(line + offset, col, reason) for line, col, reason in err.problems], file=file, hint=HINT) from None
