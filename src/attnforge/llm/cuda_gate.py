"""The static gate for model-written CUDA C++ (``--translate llm --backend cuda``): what the kernels
a model writes may say, checked on their tokens before nvcc sees them, how they become a file, and
what the compiled PTX may hold.

The model writes the kernels only. attnforge puts the file's head in front of them: the launch
facts its loader reads (grid, threads, dynamic shared memory, the arguments in order) and the
prelude of device helpers, the only PTX in the file. So the launch geometry and the inline
assembly are attnforge's. The gate reads the kernels as the compiler will (comments dropped,
newlines kept) and refuses, each with line:col and the reason:

* characters outside printable ASCII, tabs and newlines (a lone carriage return or a form feed
  ends a line for the preprocessor, not for a reader), backslashes (line splices, universal
  character names), and digraphs (``%:``, ``<%``, ``<:`` ...) and ``[[`` attributes;
* every ``#`` but a ``#pragma unroll [N]`` line of its own; string and character literals but the
  ``"C"`` of ``extern "C"``;
* inline assembly, and every reserved identifier (``__x``, ``_X``) but the CUDA qualifiers and
  intrinsics in ``RESERVED_ALLOWED``: ``__builtin_malloc``, ``__assert_fail``,
  ``__attribute__``, ``__CONCAT`` are refused with the rest; every macro the head defines
  (``assert``, ``AF_MMA_TYPE`` ...: a macro can rebuild a refused token) but the numeric
  constants in ``MACROS_ALLOWED``;
* the words that build or rename declarations the gate would have to follow (``namespace``,
  ``using``, ``template``, ``decltype``, ``typedef``, ``operator``), ``malloc``, ``free``,
  ``new``, ``delete``, ``printf``, the CUDA runtime's ``cuda*`` calls and ``<<<`` launches;
  ``extern`` but in ``extern "C" __global__`` and ``extern __shared__``;
* state that outlives a launch: ``__device__``, ``__managed__`` and ``__constant__`` variables at
  file scope, ``static`` inside a function;
* the prelude's names anywhere but in a call (``af_mma(``, ``af_cp_wait<2>(``): no overload,
  specialisation, lambda or pointer can stand in for a helper the lint and the ABI rely on;
* kernels other than the program's: each TL kernel is one ``extern "C" __global__`` function with
  the ABI's name, launch bounds and parameters (the loader passes exactly those), and no other
  ``__global__`` function.

After nvcc, ``ptx_problems`` checks the compiled kernels as the gate cannot: exactly the ABI's
entry points with its thread count, no module-scope global or constant variables, no call to a
function outside the file (``malloc``, ``vprintf``, ``__assertfail``), no ``trap``, ``brkpt`` or
``exit``, no cluster or register directives, and at least as many ``cp.async.wait_group`` of each
depth as attnforge's own translation of the program has. What neither sees (a pointer walked past
its tensor) stays in the sandbox's child process with the kernel, and verification decides.
"""

from __future__ import annotations

import functools
import hashlib
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..backends.cuda.module import KERNEL_MARK
from ..backends.cuda.prelude import PRELUDE
from ..errors import CompileError
from .errors import UnsafeCodeError

MAX_SOURCE_CHARS = 256 * 1024
_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<newline>\n)
  | (?P<space>[ \t]+)
  | (?P<number>\d(?:[\w.]|'(?=\w))*)
  | (?P<string>"(?:[^"\\\n])*"?|'(?:[^'\\\n])*'?)
  | (?P<digraph><%|%>|<:|:>|%:|\[\[)
  | (?P<launch><<<)
  | (?P<word>[A-Za-z_]\w*)
  | (?P<punct>.)
""", re.VERBOSE | re.DOTALL)
_CODE_CHARS = re.compile(r"[^\x20-\x5b\x5d-\x7e\n\t]")  # in code: printable ASCII but the backslash, tabs, newlines
_COMMENT_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\\]")  # in comments: no control character (a lone CR ends a line) or splice
_COMMENT = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)", re.DOTALL)
MAX_PROBLEMS = 50
HINT = ("write only the program's kernels, with the ABI's headers, calling the prelude's helpers for PTX: no asm, no "
        "preprocessor lines but #pragma unroll, no strings, macros, templates or namespaces, no heap, printf or device launches")

REFUSED_WORDS = {
    "asm": "inline assembly: use the prelude's wrappers (af_mma, af_ldsm_x4, af_copy16, ...)",
    "malloc": "device-side heap allocation", "free": "device-side heap allocation", "new": "device-side heap allocation",
    "delete": "device-side heap allocation", "printf": "device-side printing",
    "namespace": "a namespace (write plain __device__ helpers)", "using": "a using-declaration or alias",
    "template": "a template (write plain __device__ helpers)", "decltype": "decltype", "typedef": "a typedef",
    "operator": "an operator overload", "thread_local": "thread-local state", "friend": "a friend declaration",
    "clock": "a clock (a kernel must compute the same whenever it runs)", "clock64": "a clock (a kernel must compute the same whenever it runs)",
}
# Reserved identifiers a kernel may use: CUDA's qualifiers, types and intrinsics (attnforge's own
# kernels use the first line's). Anything else reserved is refused: compiler builtins and the
# headers' internal macros reach past the gate (``__builtin_malloc``, ``__CONCAT``, ``__attribute__``).
RESERVED_ALLOWED = frozenset("""
    __align__ __global__ __half __launch_bounds__ __nv_bfloat16 __restrict__ __shared__ __syncthreads
    __device__ __forceinline__ __noinline__ __half2 __nv_bfloat162 __syncwarp
    __shfl_xor_sync __shfl_sync __shfl_down_sync __shfl_up_sync __any_sync __all_sync __ballot_sync __activemask
    __expf __exp10f __logf __log2f __log10f __powf __fdividef __frcp_rn __fsqrt_rn __frsqrt_rn __saturatef __sinf __cosf __tanf
    __fmaf_rn __fmul_rn __fadd_rn __fsub_rn __fdiv_rn __fmaf_rz __fmul_rz __fadd_rz
    __float2half __float2half_rn __half2float __float2bfloat16 __float2bfloat16_rn __bfloat162float
    __floats2half2_rn __floats2bfloat162_rn __float22half2_rn __float22bfloat162_rn __low2float __high2float
    __int_as_float __float_as_int __float_as_uint __uint_as_float __ldg __popc __ffs __clz __umulhi __mulhi __mul24 __umul24
    __float2int_rn __float2int_rz __float2uint_rn __int2float_rn __uint2float_rn __brev __byte_perm __threadfence_block
    __reduce_add_sync __reduce_min_sync __reduce_max_sync
    __hadd __hsub __hmul __hdiv __hfma __hneg __habs __hmax __hmin __heq __hne __hlt __hle __hgt __hge __hisnan __hisinf
    __hadd2 __hsub2 __hmul2 __hfma2 __hneg2 __habs2 __hmax2 __hmin2 __half2half2 __halves2half2 __low2half __high2half
    __half22float2 __float2half2_rn __bfloat1622float2 __bfloat162bfloat162 __halves2bfloat162 __low2bfloat16 __high2bfloat16
    __float22half2_rn __host__ __inline__ __syncthreads_or __syncthreads_and __syncthreads_count __threadfence
    __ldcg __ldcs __ldca __ldlu __stcs __stcg __stwt __cvta_generic_to_shared __float2bfloat162_rn __half_raw __nv_bfloat16_raw
    __hgt2 __hge2 __hlt2 __hle2 __heq2 __hne2 __h2div __half_as_ushort __ushort_as_half __bfloat16_as_ushort __ushort_as_bfloat16
    __float2int_rd __float2int_ru __float2uint_rz __double2float_rn __popcll __clzll __ffsll __funnelshift_l __funnelshift_r
    __match_any_sync __float2half_rz __hmax_nan __hmin_nan __fmaf_ieee_rn __fdiv_rz
""".split())
# Object-like macros of the head that are plain numbers.
MACROS_ALLOWED = frozenset("""
    INFINITY NAN HUGE_VALF FLT_MAX FLT_MIN FLT_EPSILON INT_MAX INT_MIN UINT_MAX INT32_MAX INT32_MIN UINT32_MAX INT64_MAX
    CUDART_INF_F CUDART_NAN_F CUDART_PI_F CUDART_LN2_F CUDART_L2E_F CUDART_ZERO_F CUDART_ONE_F CUDART_MAX_NORMAL_F
    CUDART_INF CUDART_NEG_ZERO_F CUDART_INF_FP16 M_LOG2E M_LN2 M_PI M_E NULL LLONG_MAX LLONG_MIN UINT64_MAX INT64_MIN CHAR_BIT
""".split())
STATE_QUALIFIERS = ("__device__", "__managed__", "__constant__")
TYPE_WORDS = frozenset("""auto void bool char short int long float double unsigned signed const volatile constexpr
    uint32_t int32_t uint64_t int64_t uint16_t int16_t uint8_t int8_t size_t __half __half2 __nv_bfloat16 __nv_bfloat162 af_elem""".split())
PRELUDE_NAMES = frozenset(re.findall(r"\baf_\w+", PRELUDE))  # the helpers and types the prelude defines
PRELUDE_TYPES = frozenset({"af_elem"})


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int
    col: int
    line_start: bool  # only spaces and tabs before it on its line


def tokens(source: str) -> list[Token]:
    """The source's tokens with 1-based line:col; comments and spaces dropped, newlines kept."""
    out, line, start, fresh = [], 1, 0, True
    for m in _TOKEN.finditer(source):
        kind, text = m.lastgroup, m.group()
        if kind == "newline":
            line, start, fresh = line + 1, m.end(), True
            continue
        if kind not in ("comment", "space"):
            out.append(Token(kind, text, line, m.start() - start + 1, fresh))
            fresh = False
        elif kind == "comment":
            fresh = False  # a directive after a comment on its line is not a line of its own
            if "\n" in text:
                line += text.count("\n")
                start = m.start() + text.rindex("\n") + 1
    return out


@functools.lru_cache(maxsize=8)
def expected_headers(deterministic_source: str) -> dict[str, list[str]]:
    """Kernel name -> the tokens of its header (``extern "C" ... NAME(...)`` up to ``{``), from the
    backend's own translation of the same TL program: the ABI the loader launches."""
    out = {}
    for part in deterministic_source.split(KERNEL_MARK)[1:]:
        name = part.split("\n", 1)[0].strip()
        toks = [t.text for t in tokens(part.split("\n", 1)[1])]
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


def head_of(deterministic_source: str) -> str:
    """The part of the backend's own file before its first kernel: launch facts and prelude."""
    return deterministic_source[:deterministic_source.index(KERNEL_MARK)]


@functools.lru_cache(maxsize=8)
def head_macros(head: str) -> frozenset[str]:
    """Every macro defined once the head is read (its own and its headers'), from nvcc's preprocessor."""
    from ..backends.cuda.compile import find_nvcc

    with tempfile.TemporaryDirectory(prefix="attnforge-gate-") as tmp:
        path = Path(tmp) / f"head-{hashlib.sha256(head.encode()).hexdigest()[:12]}.cu"
        path.write_text(head)
        proc = subprocess.run([find_nvcc(), "-E", "-Xcompiler", "-dM", "-arch=sm_80", str(path)], capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:  # (attnforge's own head: not the model's fault, so no refusal of its answer)
        raise CompileError(f"nvcc could not list the macros of attnforge's CUDA head: {proc.stderr.strip()[:200]}", where="cuda_gate",
                           hint="check the CUDA toolkit install (nvidia-cuda-nvcc); the CUDA backend's own compiles need it too")
    return frozenset(re.findall(r"^#define (\w+)", proc.stdout, re.MULTILINE))


def check_cuda_kernels(source: str, abi_source: str, *, file: str = "kernel_cuda.cu") -> list[tuple[str, int]]:
    """Refuse what the module docstring lists (``UnsafeCodeError`` with every problem found);
    return each kernel's name and the 0-based line its ``extern "C"`` stands on, in source order."""
    if len(source) > MAX_SOURCE_CHARS:
        raise UnsafeCodeError([(1, 1, f"the kernels are {len(source):,} characters; at most {MAX_SOURCE_CHARS:,}")], file=file, hint=HINT)
    problems: list[tuple[int, int, str]] = []
    comments = [(m.start(), m.end()) for m in _COMMENT.finditer(source)]
    for m in _CODE_CHARS.finditer(source):
        inside = any(a <= m.start() < b for a, b in comments)
        if inside and not _COMMENT_CHARS.match(m.group()):
            continue  # (non-ASCII text in a comment)
        what = "a backslash (line splice, universal character name)" if m.group() == "\\" else f"the character {m.group()!r}"
        problems.append((*_place(source, m.start()), f"{what}: only printable ASCII, tabs and newlines in code, and no control "
                                                     "characters or backslashes in comments"))
        if len(problems) >= MAX_PROBLEMS:
            break
    for m in re.finditer(re.escape(KERNEL_MARK.strip()), source):
        start = source.rfind("\n", 0, m.start()) + 1
        if source[start:m.start()] and len(problems) < MAX_PROBLEMS:  # (a mark at the very start of a line is attnforge's: assemble blanks it)
            problems.append((*_place(source, m.start()), "a kernel mark inside a line: the lint finds each kernel by the marks attnforge places"))
    headers = expected_headers(abi_source)
    macros = head_macros(head_of(abi_source)) - MACROS_ALLOWED - RESERVED_ALLOWED  # (__global__ and its kind are macros too)
    toks = tokens(source)
    found: list[tuple[str, int]] = []
    lines = source.split("\n")
    pragma_lines = {t.line for t in toks if t.text == "#"}
    blocks: list[str] = []  # what opened each enclosing brace: kernel, function, lambda, for, if, else, while, do, switch, init, block
    in_header = False  # between a kernel's __global__ and its body's brace
    for i, t in enumerate(toks):
        if len(problems) >= MAX_PROBLEMS:
            break
        why = _refusal(toks, i, len(blocks), macros, lines)
        if why is None and t.text in PIPELINE_HELPERS and not _unconditional(toks, i, blocks, pragma_lines):
            why = (f"{t.text} under a condition, inside an expression or outside a kernel's body: the cp.async waits and commits "
                   "stand as statements of their own in the kernel or its for loops, as in the translation table (no if, else, while, "
                   "switch or ?:, no helper function or lambda)")
        if why is not None:
            problems.append((t.line, t.col, why))
        elif t.text == "__global__":
            name = _kernel_at(toks, i, headers, problems)
            if name is not None:
                found.append((name, toks[i - 2].line - 1))
                in_header = True
        elif t.text == "{":
            kind = _opener(toks, i)
            blocks.append("kernel" if in_header and kind == "function" and not blocks else kind)
            in_header = False
        elif t.text == "}" and blocks:
            blocks.pop()
    names = [name for name, _ in found]
    for name in headers:
        if name not in names:
            problems.append((1, 1, f"kernel {name} is missing: write extern \"C\" __global__ void ... {name}(...) with the ABI's parameters"))
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append((1, 1, f"kernel {name} is written {names.count(name)} times"))
    if problems:
        raise UnsafeCodeError(sorted(set(problems)), file=file, hint=HINT)
    return found


PIPELINE_HELPERS = ("af_cp_wait", "af_cp_commit")


def _place(source: str, at: int) -> tuple[int, int]:
    start = source.rfind("\n", 0, at) + 1
    return source.count("\n", 0, at) + 1, at - start + 1


def _opener(toks: list[Token], i: int) -> str:
    """What the brace at ``toks[i]`` opens: the keyword of a ``for (...) {``, ``if (...) {``, ...,
    ``function`` for a ``name(...) {``, ``else``/``do``, ``init`` for an initialiser, else ``block``."""
    prev = toks[i - 1] if i > 0 else None
    if prev is None:
        return "block"
    if prev.text in ("else", "do"):
        return prev.text
    if prev.text == ")":
        level, j = 0, i - 1
        while j >= 0:
            level += {")": 1, "(": -1}.get(toks[j].text, 0)
            if level == 0:
                break
            j -= 1
        word = toks[j - 1].text if j > 0 else ""
        if word == "]":
            return "lambda"
        return word if word in ("for", "if", "while", "switch") else "function"
    if prev.text in ("=", ",", "(", "return", "[", "{"):
        return "init"
    return "block"


def _unconditional(toks: list[Token], i: int, blocks: list[str], pragma_lines: set[int]) -> bool:
    """Whether the pipeline helper at ``toks[i]`` starts a statement that every thread runs each
    trip: in a kernel's own body (not in a helper function or lambda, which a condition could
    call), after ``;``, ``{``, ``}`` or a pragma line, with only for loops and plain blocks around it."""
    if blocks[:1] != ["kernel"] or any(kind not in ("for", "block") for kind in blocks[1:]):
        return False
    prev = toks[i - 1] if i > 0 else None
    return prev is not None and (prev.text in (";", "{", "}") or prev.line in pragma_lines and prev.line < toks[i].line)


def _refusal(toks: list[Token], i: int, depth: int, macros: frozenset[str], lines: list[str]) -> str | None:
    """Why the token at ``i`` is refused, or None."""
    t = toks[i]
    text = t.text
    if t.kind == "punct" and text == "#":
        rest = [x for x in toks[i + 1:i + 40] if x.line == t.line]
        args = rest[2:]
        if (t.line_start and [x.text for x in rest[:2]] == ["pragma", "unroll"]
                and all(x.kind in ("word", "number") or x.text in "()+-*" for x in args)):
            return None  # (its words are checked as every word is)
        line = lines[t.line - 1][:200] if t.line <= len(lines) else ""
        return f"the preprocessor line {line.strip()[:60]!r}: only a #pragma unroll line is allowed (the prelude includes what the kernels need)"
    if t.kind == "string":
        ok = text == '"C"' and i > 0 and toks[i - 1].text == "extern"
        return None if ok else "a string or character literal: the kernels need none (no printf, no asm)"
    if t.kind == "digraph":
        return f"{text!r}: digraphs and [[attributes]] are not for kernels"
    if t.kind == "launch":
        return "a kernel launch from device code"
    if t.kind != "word":
        return None
    if text in REFUSED_WORDS:
        return f"{text}: {REFUSED_WORDS[text]}"
    if (text.startswith("__") or re.match(r"_[A-Z]", text)) and text not in RESERVED_ALLOWED:
        return f"{text}: a reserved identifier that is not one of CUDA's qualifiers or intrinsics a kernel needs"
    if text in macros:
        return f"{text}: a macro of the headers (a macro can rebuild a refused token)"
    if re.match(r"cuda[A-Z]", text):
        return f"{text}: the CUDA runtime is not for kernels to call"
    if text == "extern":
        after = [x.text for x in toks[i + 1:i + 3]]
        if after != ['"C"', "__global__"] and after[:1] != ["__shared__"]:
            return "extern: only extern \"C\" __global__ kernels and extern __shared__ arrays"
    if text == "static" and depth > 0 and toks[i + 1:i + 2] and toks[i + 1].text != "constexpr":
        return "static inside a function or struct: device statics outlive a launch (static constexpr is fine)"
    if text in STATE_QUALIFIERS and depth == 0 and _declares_variable(toks, i):
        return f"a {text} variable at file scope: state that outlives a launch"
    if text in PRELUDE_NAMES and text not in PRELUDE_TYPES and not _called(toks, i, depth):
        return f"{text} outside a call: the prelude's helpers are called (af_mma(...), af_cp_wait<N>()), never redeclared or aliased"
    return None


def _called(toks: list[Token], i: int, depth: int) -> bool:
    """Whether the prelude name at ``toks[i]`` is called: ``name(`` or ``name<N>(`` inside a
    function, after an operator, a bracket or a statement keyword; not after a type (a
    declaration), nor after ``::``."""
    nxt = [x.text for x in toks[i + 1:i + 5]]
    templated = nxt[:1] == ["<"] and len(nxt) == 4 and toks[i + 2].kind in ("number", "word") and nxt[2:] == [">", "("]
    if not (nxt[:1] == ["("] or templated):
        return False
    if i == 0 or depth == 0:
        return False
    prev = toks[i - 1]
    if prev.kind == "word":
        return prev.text in ("return", "else", "do", "case")
    if prev.text == ":" and toks[i - 2].text == ":":
        return False
    # after * & > a declaration's type ends (auto&& af_mma(...), float* af_x(...)); as an operator it follows a value
    j = i - 1
    while j > 0 and toks[j].text in ("*", "&", ">"):
        j -= 1
    return j == i - 1 or toks[j].kind != "word" or toks[j].text not in TYPE_WORDS


def _declares_variable(toks: list[Token], i: int) -> bool:
    """Whether the declaration starting at ``toks[i]`` is anything but a function definition: a
    function reaches ``) {`` (or ``) __launch_bounds__``) before any ``;`` or ``=`` (``__device__
    int x{0};``, ``__device__ int (g);`` and ``__device__ __align__(4) int g;`` are variables);
    a constexpr constant is no state."""
    for j in range(i + 1, min(len(toks), i + 400)):
        t = toks[j]
        if t.text == "constexpr":
            return False
        if t.text in (";", "="):
            return True
        if t.text == "{":
            return toks[j - 1].text != ")"
    return True


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
        check_cuda_kernels(rest, abi_source, file=file)
    except UnsafeCodeError as err:  # (lines counted in the whole file)
        raise UnsafeCodeError([(line + offset, col, reason) for line, col, reason in err.problems], file=file, hint=HINT) from None


# ------------------------------------------------------------------------------ after nvcc

_PIPELINE = re.compile(r"\bcp\.async\.(?:wait_group \d+|commit_group)")


def ptx_problems(ptx: str, own_ptx: str, meta: dict) -> list[str]:
    """What the compiled kernels may not hold (see the module docstring); ``own_ptx``: attnforge's
    own translation of the program compiled for the same architecture; ``meta``: the launch facts."""
    problems = []
    entries = re.findall(r"^\.(?:visible )?\.entry (\w+)", ptx, re.MULTILINE)
    want = [k["name"] for k in meta["kernels"]]
    if sorted(entries) != sorted(want):
        problems.append(f"the PTX's kernels are {', '.join(entries) or 'none'}; the ABI's are {', '.join(want)}")
    for line in re.findall(r"^(?:\.(?:visible|extern|weak)\s+)*\.(?:global|const|func)\b[^\n]*", ptx, re.MULTILINE):
        if re.search(r"\b__cudart_\w+\[", line) or (".func" in line and not line.startswith(".extern")):
            continue  # (CUDA's math tables, e.g. sinf's; functions defined in the file)
        problems.append(f"a module-scope declaration in the PTX: {line.strip()[:100]}")
    for reg in sorted(set(re.findall(r"%(clock64|clock|globaltimer\w*)\b", ptx))):
        problems.append(f"the PTX reads %{reg}: a kernel must compute the same whenever it runs")
    defined = set(re.findall(r"^\.(?:visible |weak )?\.func\s+(?:\([^)]*\)\s*)?(\w+)", ptx, re.MULTILINE))
    for name in sorted(set(re.findall(r"\bcall(?:\.uni)?\s+(?:\([^)]*\),\s*)?(\w+)", ptx)) - defined):
        problems.append(f"a call to {name}, which is not in the file")
    for op in sorted(set(re.findall(r"^\s*(?:@!?%\w+\s+)?(trap|brkpt|exit);", ptx, re.MULTILINE))):
        problems.append(f"the PTX has {op}")
    for directive in sorted(set(re.findall(r"^\s*\.(maxnreg|reqnctapercluster|explicitcluster|maxclusterrank|minnctapersm)\b", ptx, re.MULTILINE))):
        problems.append(f"the PTX has .{directive}: the launch is attnforge's")
    threads = {k["name"]: k["threads"] for k in meta["kernels"]}
    for name, body in _entries(ptx).items():
        bounds = re.findall(r"\.maxntid (\d+), 1, 1", body[:2000])
        if name in threads and bounds != [str(threads[name])]:
            problems.append(f"kernel {name}'s .maxntid is {', '.join(bounds) or 'missing'}; the ABI launches {threads[name]} threads")
    own = {name: Counter(_PIPELINE.findall(body)) for name, body in _entries(own_ptx).items()}
    for name, body in _entries(ptx).items():
        mine = Counter(_PIPELINE.findall(body))
        short = own.get(name, Counter()) - mine
        if short:
            problems.append(f"kernel {name} waits for or commits cp.async groups fewer times than its pipeline needs "
                            f"(missing: {', '.join(f'{w} x{c}' for w, c in sorted(short.items()))}): a tile would be read before it lands")
        for what, pattern in (("mma.sync", r"\bmma\.sync\b"), ("ldmatrix", r"\bldmatrix\b"), ("cp.async", r"\bcp\.async\.c[ag]\b")):
            if re.search(pattern, own_ptx) and not re.search(pattern, body):
                problems.append(f"kernel {name} has no {what} instruction, which the prelude's helpers issue: a helper was neutered")
    return problems


def _entries(ptx: str) -> dict[str, str]:
    """Entry name -> its PTX text, up to the next entry."""
    marks = [(m.group(1), m.start()) for m in re.finditer(r"^\.(?:visible )?\.entry (\w+)", ptx, re.MULTILINE)]
    return {name: ptx[start:(marks[k + 1][1] if k + 1 < len(marks) else len(ptx))] for k, (name, start) in enumerate(marks)}
