"""Fuzzing the whole TL pipeline: parse, check, and (for programs that check clean) the interpreter
against the reference on small shapes. Whatever the input, nothing but attnforge's own errors
escapes, every error renders on one line of bounded length, and no input takes more than a few
seconds of CPU time (the interpreter runs under a small work budget, so a mutated loop bound
cannot hang it; CPU time, because a loaded machine stretches wall time while a hang burns CPU).

tests/test_tl_parser.py fuzzes the parser alone (round trips, syntax-error positions); these
fuzzers go past it. Per run: 4,500 random byte strings, 3,000 random token sequences, 500
programs assembled from random statements, and 7 x 300 mutations of the shipped programs: 10,100
inputs. One in four programs the checker rejects is interpreted anyway: the interpreter, too, must
fail only with its own errors on programs it was never meant to see.
"""

from __future__ import annotations

import random
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnforge.errors import AttnforgeError
from attnforge.tl import catalog
from attnforge.tl.checker import check
from attnforge.tl.harness import Shape, run_and_compare
from attnforge.tl.parser import parse, parse_expr

LIBRARY = {name: catalog.source(name) for name in catalog.programs()}
TARGETS = (None, "h100", "a100", "t4", "v100", "b200")
SHAPES = tuple(Shape.parse(s) for s in ("1,1,1,17,19,16", "1,2,2,1,33,16", "2,2,1,9,5,16,8"))
SECONDS = 5.0  # CPU seconds per input, parse to verdict
MAX_STEPS = 20_000  # interpreter budget per fuzzed run: a few tenths of a second
ERROR_CHARS = 2_000

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def pipeline(text: str, rng: random.Random, targets: tuple = TARGETS) -> str:
    """Parse, check and, when the check is clean (or one time in four when it is not), interpret
    ``text``; return how far it got: "parse error", "check error", "rejected" (the checker's
    findings), "run error" or "ran". Anything but an AttnforgeError escapes and fails the test."""
    start = time.thread_time()  # CPU time: a loaded machine stretches wall time, a hang burns CPU
    stage = "parse"
    try:
        program = parse(text, file="fuzz.tl")
        stage = "check"
        result = check(program, rng.choice(targets), head_dim=16, head_dim_v=rng.choice((16, 8)), file="fuzz.tl")
        stage = "run"
        if result.ok or rng.random() < 0.25:
            declared = {p.name for k in program.kernels for p in k.params}
            params = {name: 16 for name in ("BM", "BN") if name in declared}
            run_and_compare(program, rng.choice(SHAPES), params=params, seed=rng.randrange(100), file="fuzz.tl", max_steps=MAX_STEPS)
        stage = "ran" if result.ok else "rejected"
    except AttnforgeError as err:
        rendered = str(err)
        assert "\n" not in rendered and 0 < len(rendered) < ERROR_CHARS, rendered[:3000]
        stage += " error"
    seconds = time.thread_time() - start
    assert seconds < SECONDS, f"{seconds:.1f}s of CPU at {stage} for:\n{text[:3000]}"
    return stage


def expression(text: str) -> None:
    """A spec modifier's path: parse_expr only raises AttnforgeError."""
    try:
        parse_expr(text, "score_mod")
    except AttnforgeError as err:
        assert "\n" not in str(err) and len(str(err)) < ERROR_CHARS


# ---------------------------------------------------------------- random bytes


@settings(FUZZ, max_examples=4500)
@given(st.binary(max_size=400), st.randoms(use_true_random=False))
def test_random_bytes(data: bytes, rng: random.Random) -> None:
    text = data.decode("utf-8", errors="replace")
    pipeline(text, rng)
    pipeline("kernel k\ngrid m : 1\n" + data.decode("latin-1"), rng)
    expression(text)


# ---------------------------------------------------------------- random tokens

KEYWORDS = ["kernel", "target", "computes", "dtype", "param", "scalar", "grid", "scratch", "Allocate", "in", "global", "shared",
            "register", "at", "Copy", "from", "to", "Compute", "GEMM", "and", "get", "accumulate", "Cast", "ScoreMod", "with", "Mask",
            "keep", "Softmax", "OnlineSoftmax", "state", "rescale", "Normalize", "by", "LogSumExp", "Reshape", "for", "end", "pipeline",
            "or", "not", "causal", "window", "alibi", "softcap", "score_mod", "mask_mod", "bottom_right", "top_left",
            "barrier", "ring", "count", "async", "Wait", "phase", "Arrive", "role", "warps", "regs"]
NAMES = ["b", "h", "m", "j", "s", "B", "Hq", "Hkv", "Sq", "Sk", "D", "Dv", "BM", "BN", "NSPLIT", "warps", "stages", "scale", "softcap",
         "window_left", "window_right", "q", "k", "v", "o", "lse", "alibi_slopes", "Q", "K", "V", "O", "LSE", "Qs", "Ks", "Vs", "Qr", "Kr",
         "Vr", "S", "P", "m_i", "l_i", "O_acc", "O_r", "lse_r", "q_idx", "kv_idx", "score", "qkv", "acc", "out", "fp16", "bf16", "fp32",
         "tf32", "fp8e4m3", "fp8e5m2", "fp64", "mma_a", "mma_b", "mma_c", "sm_90", "h100", "t4", "Multiply", "Add", "Exp", "RowMax",
         "RowSum", "Maximum", "Neg", "cdiv", "min", "max", "where", "exp", "abs", "inf", "sigmoid", "k_ready", "k_free", "v_free", "compute", "load"]
NUMBERS = ["0", "1", "2", "3", "16", "64", "128", "-1", "0.5", "1e3", "1e999", "1000000000000", "9" * 40, "1" * 120]
PUNCT = ["(", ")", "[", "]", ",", ":", "=", "?", "+", "-", "*", "/", "//", "%", "<", "<=", ">", ">=", "==", "!=", "^T", "#", "\n",
         "\n", "\n", "\n    ", "\t", "$", "\x00", "\u2028", "é"]
TOKENS = KEYWORDS + NAMES + NUMBERS + PUNCT


@settings(FUZZ, max_examples=3000)
@given(st.lists(st.sampled_from(TOKENS), max_size=80), st.booleans(), st.randoms(use_true_random=False))
def test_random_tokens(tokens: list[str], header: bool, rng: random.Random) -> None:
    text = " ".join(tokens)
    pipeline(("kernel k\ngrid b : B, h : Hq, m : cdiv(Sq, 16)\n" if header else "") + text, rng)
    expression(text)


# ---------------------------------------------------------------- random statements (parse more often)


def _expr(rng: random.Random, depth: int = 0) -> str:
    if depth > 3 or rng.random() < 0.4:
        return rng.choice(NAMES[:16] + NUMBERS[:8] + ["q_idx", "kv_idx", "score"])
    form = rng.randrange(4)
    if form == 0:
        return f"{_expr(rng, depth + 1)} {rng.choice(['+', '-', '*', '//', '%', '/'])} {_expr(rng, depth + 1)}"
    if form == 1:
        return f"{rng.choice(['cdiv', 'min', 'max'])}({_expr(rng, depth + 1)}, {_expr(rng, depth + 1)})"
    if form == 2:
        return f"{_expr(rng, depth + 1)} {rng.choice(['<', '<=', '>=', '=='])} {_expr(rng, depth + 1)}"
    return f"({_expr(rng, depth + 1)})"


def _statement(rng: random.Random, tiles: list[str]) -> str:
    t = lambda: rng.choice(tiles)  # noqa: E731
    e = lambda: _expr(rng)  # noqa: E731
    level = lambda: rng.choice(["global", "shared", "register"])  # noqa: E731
    return rng.choice([
        lambda: f"Allocate {t()} in global ({e()}, {e()}) at {rng.choice(['q', 'k', 'v', 'o'])}[b, {e()}]",
        lambda: f"Allocate {t()} in shared ({e()}, {e()}) : {rng.choice(['qkv', 'acc', 'fp16'])}",
        lambda: f"Allocate {t()} in register ({e()}) : acc = {rng.choice(['-inf', '0', '1'])}",
        lambda: f"Allocate {t()} in register ({e()}, {e()}) : acc = 0",
        lambda: f"Copy {t()} ({e()}, {e()}) at [{e()}, 0] from {level()} to {level()} {t()}",
        lambda: f"Copy {t()} from {level()} to {level()} {t()}",
        lambda: f"Compute GEMM {t()}, {t()}{rng.choice(['', '^T'])} and {rng.choice(['get', 'accumulate'])} {t()}",
        lambda: f"Compute {rng.choice(['Multiply', 'Add', 'Maximum', 'Divide'])} {t()}, {rng.choice([t(), e()])}",
        lambda: f"Compute {rng.choice(['Exp', 'RowMax', 'RowSum', 'Neg'])} {t()} and get {t()}",
        lambda: f"Compute Cast {t()} to {rng.choice(['qkv', 'fp16', 'bf16', 'acc'])}",
        lambda: f"Compute Mask {t()} keep {_expr(rng)} < kv_idx",
        lambda: f"Compute ScoreMod {t()} with score * {e()}",
        lambda: f"Compute OnlineSoftmax {t()} state {t()}, {t()} rescale {t()} and get {t()}",
        lambda: f"Compute Normalize {t()} by {t()} and get {t()}",
        lambda: f"Compute LogSumExp {t()}, {t()} and get {t()}",
        lambda: f"Reshape {t()} from {rng.choice(['mma_c', 'mma_a'])} to {rng.choice(['mma_a', 'mma_b'])}",
        # the Hopper form
        lambda: f"Allocate {t()} in shared ({e()}, {e()}) : qkv ring {rng.choice(['2', 'stages', e()])}",
        lambda: f"Allocate {t()} in barrier{rng.choice(['', ' (2)', f' ({e()})'])}{rng.choice(['', ' count 1', f' count {e()}'])}",
        lambda: f"Copy {t()} ({e()}, {e()}) at [{e()}, 0] from global to shared {t()}[{e()} % 2] async {t()}{rng.choice(['', f'[{e()}]'])}",
        lambda: f"Compute GEMM {t()}, {t()}[{e()}]{rng.choice(['', '^T'])} and {rng.choice(['get', 'accumulate'])} {t()}{rng.choice(['', ' async'])}",
        lambda: f"Wait {t()}{rng.choice(['', f'[{e()}]'])} phase {rng.choice(['0', '1', e()])}",
        lambda: f"Wait GEMM {t()}",
        lambda: f"Arrive {t()}{rng.choice(['', f'[{e()}]'])}",
    ])()


def random_program(rng: random.Random) -> str:
    tiles = rng.sample(NAMES[16:50], 8)
    lines = ["kernel fuzz", rng.choice(["target sm_90", "target sm_80", ""]), "dtype qkv = bf16, acc = fp32, out = bf16",
             "param BM = 16, BN = 16, warps = 4", "scalar scale", f"grid b : B, h : Hq, m : {rng.choice(['cdiv(Sq, BM)', _expr(rng)])}"]
    depth = 0
    for _ in range(rng.randrange(1, 25)):
        roll = rng.random()
        if roll < 0.1 and depth < 3:
            lines.append("    " * depth + f"for j{depth} = {_expr(rng)} : {_expr(rng)}")
            depth += 1
        elif roll < 0.13 and depth == 0:
            lines.append(f"role r{len(lines)} warps {rng.choice(['0', 'warps', _expr(rng)])} : {rng.choice(['warps', 'warps + 1', _expr(rng)])}"
                         + rng.choice(["", " regs 24", " regs 250"]))
            depth += 1
        elif roll < 0.18 and depth:
            depth -= 1
            lines.append("    " * depth + "end")
        else:
            lines.append("    " * depth + _statement(rng, tiles))
    lines += ["end"] * depth
    return "\n".join(lines) + "\n"


@settings(FUZZ, max_examples=500)
@given(st.randoms(use_true_random=False))
def test_random_statements(rng: random.Random) -> None:
    pipeline(random_program(rng), rng)


# ---------------------------------------------------------------- mutations of the shipped programs

EXTREMES = ["0", "1", "-1", "2", "17", "1000000000000", "-1000000000000", "1" + "0" * 30, "Sk*Sk*Sk*Sk*Sk*Sk", "1.5", "inf",
            "cdiv(Sk, BN)", "Sq", "Sk", "BM", "BN", "D", "Dv", "(1 - 1)", "m + 1", "j - 1", "-BM"]
SWAPS = ["register", "shared", "global", "mma_a", "mma_b", "mma_c", "fp8e4m3", "tf32", "fp64", "acc", "qkv", "out", "accumulate",
         "get", "^T", "rescale", "Exp", "RowMax", "Softmax", "end"]
TOKEN = re.compile(r"\s+|\w+|\^T|//|<=|>=|==|!=|\S")


def mutate(text: str, rng: random.Random) -> str:
    """One to three edits: a line deleted, duplicated, swapped or moved into or out of a loop; a
    token replaced by another of the program's names, an extreme number or a keyword."""
    lines = text.split("\n")
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", text)))
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        kind = rng.choice(["delete", "duplicate", "swap", "indent", "name", "number", "extreme", "keyword"])
        if kind == "delete" and len(lines) > 1:
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "indent":
            lines[i] = lines[i].strip() if lines[i].startswith(" ") else "    " + lines[i]
        else:
            tokens = TOKEN.findall(lines[i])
            spots = [k for k, tok in enumerate(tokens) if not tok.isspace()]
            if not spots:
                continue
            numbers = [k for k in spots if tokens[k].isdigit()]
            k = rng.choice(numbers) if kind == "number" and numbers else rng.choice(spots)
            tokens[k] = {"name": lambda: rng.choice(names), "keyword": lambda: rng.choice(SWAPS)}.get(kind, lambda: rng.choice(EXTREMES))()
            lines[i] = "".join(tokens)
    return "\n".join(lines)


@pytest.mark.parametrize("name", sorted(LIBRARY))
@settings(FUZZ, max_examples=300)
@given(rng=st.randoms(use_true_random=False))
def test_library_mutations(name: str, rng: random.Random) -> None:
    pipeline(mutate(LIBRARY[name], rng), rng)


def test_the_fuzzers_reach_every_stage() -> None:
    """Without this, a fuzzer whose inputs all fail to parse would pass while testing nothing."""
    rng = random.Random(9)
    stages = {pipeline(mutate(LIBRARY[name], rng), rng) for name in sorted(LIBRARY) for _ in range(25)}
    stages |= {pipeline(random_program(rng), rng) for _ in range(100)}
    assert {"parse error", "rejected", "run error", "ran"} <= stages, stages
    clean = [pipeline(text, rng, targets=(None, "h100")) for text in LIBRARY.values()]
    assert clean == ["ran"] * len(LIBRARY), clean
