"""TL parser and printer: library round trips, AST round-trip properties, fuzzing, syntax errors.

Reserved words (found by the round-trip property, see NAMES below). The grammar is LALR(1) with
lark's contextual lexer, so keywords are names almost everywhere; the exceptions are
  * ``not`` wherever an expression may start a ``not`` (the top of an expression, a register
    initialiser, a loop bound, a mask, a score modifier, a grid extent, a call or index argument,
    an operand of ``and``/``or``/``not``): there it is the operator, never a name;
  * ``to`` as the destination of a Copy (``Copy x from global to shared to``): LALR merges the
    state after ``level`` for ``from LEVEL . to`` and ``to LEVEL . NAME``, so ``to`` is lexed as
    the keyword there.
Everything else (``and``, ``get``, ``end``, ``kernel``, ``in``, ``at``, ``from``, ...) round-trips
as a name in every position the strategies below use.
"""

from __future__ import annotations

import re
import string
from importlib import resources

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnforge.errors import Position, TLSyntaxError
from attnforge.tl import nodes as n
from attnforge.tl.parser import ELEMENTWISE_OPS, FUNCTIONS, parse, parse_expr
from attnforge.tl.printer import expr as show
from attnforge.tl.printer import print_program

LIBRARY_DIR = resources.files("attnforge.tl").joinpath("library")
LIBRARY = sorted(p.name for p in LIBRARY_DIR.iterdir() if p.name.endswith(".tl"))
GRAMMAR = resources.files("attnforge.tl").joinpath("grammar.lark").read_text()
# Every literal of the grammar (keywords and punctuation), read from the grammar itself.
LITERALS = sorted(set(re.findall(r'"([^"\s]+)"', GRAMMAR)))
KEYWORDS = sorted(w for w in LITERALS if re.fullmatch(r"[A-Za-z_]+", w))


def library_text(name: str) -> str:
    return LIBRARY_DIR.joinpath(name).read_text()


def test_library_is_not_empty_and_keywords_were_found() -> None:
    assert len(LIBRARY) >= 7
    for word in ("kernel", "Allocate", "Copy", "Compute", "end", "and", "not", "to", "pipeline"):
        assert word in KEYWORDS


# ---------------------------------------------------------------- library round trips


@pytest.mark.parametrize("name", LIBRARY)
def test_library_program_round_trips(name: str) -> None:
    text = library_text(name)
    program = parse(text, file=name)
    printed = print_program(program)
    again = parse(printed)
    assert again == program
    assert print_program(again) == printed  # printing is idempotent
    # the AST really holds the program: every kernel has a grid and a body
    for kernel in program.kernels:
        assert kernel.grid and kernel.body


@pytest.mark.parametrize("name", LIBRARY)
def test_library_positions_point_at_the_source(name: str) -> None:
    """Statement positions are 1-based (line, col) of the statement's first character."""
    text = library_text(name)
    lines = text.splitlines()
    program = parse(text)
    for kernel in program.kernels:
        assert lines[kernel.line - 1][kernel.col - 1 :].startswith("kernel " + kernel.name)
        for stmt in n.walk(kernel.body):
            word = {n.Allocate: "Allocate", n.Copy: "Copy", n.Reshape: "Reshape", n.Loop: "for", n.Role: "role", n.Wait: "Wait",
                    n.WaitGemm: "Wait GEMM", n.Arrive: "Arrive"}.get(type(stmt), "Compute")
            assert lines[stmt.line - 1][stmt.col - 1 :].startswith(word), (stmt, stmt.line, stmt.col)


def test_equality_ignores_positions_and_layout() -> None:
    text = library_text("gqa_fwd.tl")
    # Re-indent, add blank lines, comments and extra spaces: the AST is the same.
    noisy = text.replace("\n", "\n\n").replace(", ", " ,  ").replace("    ", "\t") + "# trailing comment\n"
    assert parse(noisy).kernels == parse(text).kernels


# ---------------------------------------------------------------- expression literals


def test_negative_literals_are_folded() -> None:
    assert parse_expr("-3") == n.Num(-3)
    assert parse_expr("-2.5") == n.Num(-2.5)
    assert parse_expr("--3") == n.Num(3)
    assert parse_expr("-0") == n.Unary("-", n.Num(0))  # zero is not folded (there is no -0 literal)
    assert parse_expr("-x") == n.Unary("-", n.Name("x"))
    assert parse_expr("a - -3") == n.Binary("-", n.Name("a"), n.Num(-3))
    assert parse_expr("-3 * x") == n.Binary("*", n.Num(-3), n.Name("x"))
    assert show(n.Unary("-", n.Binary("+", n.Name("a"), n.Num(1)))) == "-(a + 1)"


def test_number_types_survive() -> None:
    for text, value in [("3", 3), ("3.0", 3.0), ("1e3", 1000.0), (".5", 0.5), ("7.", 7.0), ("2E-3", 0.002)]:
        e = parse_expr(text)
        assert isinstance(e, n.Num) and e.value == value and type(e.value) is type(value)


def test_precedence_and_associativity() -> None:
    a, b, c = n.Name("a"), n.Name("b"), n.Name("c")
    assert parse_expr("a - b - c") == n.Binary("-", n.Binary("-", a, b), c)
    assert parse_expr("a - (b - c)") == n.Binary("-", a, n.Binary("-", b, c))
    assert parse_expr("a + b * c") == n.Binary("+", a, n.Binary("*", b, c))
    assert parse_expr("a // b % c") == n.Binary("%", n.Binary("//", a, b), c)
    assert parse_expr("not a and b or c") == n.Binary("or", n.Binary("and", n.Unary("not", a), b), c)
    assert parse_expr("a < b + 1 and c") == n.Binary("and", n.Binary("<", a, n.Binary("+", b, n.Num(1))), c)
    assert show(n.Binary("<", n.Binary("<", a, b), c)) == "(a < b) < c"
    assert show(n.Binary("-", a, n.Binary("-", b, c))) == "a - (b - c)"
    assert show(n.Unary("not", n.Binary("and", a, b))) == "not (a and b)"


# ---------------------------------------------------------------- AST strategies

WORDS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True)
NAMES = st.one_of(st.sampled_from(KEYWORDS), WORDS)
# `not` is the boolean operator wherever an expression can start (see the module docstring).
EXPR_NAMES = NAMES.filter(lambda s: s != "not")
# `to` cannot name a Copy destination (LALR state merging, see the module docstring).
COPY_DST_NAMES = NAMES.filter(lambda s: s != "to")

BINARY_OPS = ("+", "-", "*", "/", "//", "%", "<", "<=", ">", ">=", "==", "!=", "and", "or")

NUMBERS = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12).map(n.Num),  # negative: folded by the parser
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=False).map(n.Num),  # 0.0, never -0.0
)


def _unfoldable(e: n.Expr) -> n.Expr:
    """``-`` applied to a nonzero literal is folded into the literal by the parser (``-3`` is
    Num(-3), never Unary('-', Num(3))), so a negated literal can only be zero."""
    return n.Num(0) if isinstance(e, n.Num) and e.value != 0 else e


def _call(children):
    return st.sampled_from(sorted(FUNCTIONS)).flatmap(
        lambda f: st.lists(children, min_size=FUNCTIONS[f], max_size=FUNCTIONS[f]).map(lambda args: n.Call(f, tuple(args)))
    )


def _extend(children):
    return st.one_of(
        st.builds(n.Unary, st.just("-"), children.map(_unfoldable)),
        st.builds(n.Unary, st.just("not"), children),
        st.builds(n.Binary, st.sampled_from(BINARY_OPS), children, children),
        _call(children),
        st.builds(n.Index, EXPR_NAMES, st.lists(children, min_size=1, max_size=3).map(tuple)),
    )


EXPRS = st.recursive(st.one_of(NUMBERS, EXPR_NAMES.map(n.Name)), _extend, max_leaves=10)


# Compute operands are read at the `sum` level of the grammar; the printer must parenthesise looser
# operands (comparisons, and/or/not), so operands are drawn from every expression.
ARGS = EXPRS
SHAPES = st.lists(EXPRS, max_size=3).map(tuple)
NONEMPTY = st.lists(EXPRS, min_size=1, max_size=3).map(tuple)
OPT_NAME = st.none() | NAMES


def _allocate():
    glob = st.builds(lambda name, shape, tensor, offset, pack: n.Allocate(name, "global", shape, tensor=tensor, offset=offset, pack=pack),
                     NAMES, SHAPES, NAMES, NONEMPTY, st.none() | EXPRS)
    shared = st.builds(lambda name, shape, dtype: n.Allocate(name, "shared", shape, dtype=dtype), NAMES, SHAPES, NAMES)
    register = st.builds(lambda name, shape, dtype, init: n.Allocate(name, "register", shape, dtype=dtype, init=init),
                         NAMES, SHAPES, NAMES, st.none() | EXPRS)
    return st.one_of(glob, shared, register)


def _copy():
    tiled = st.tuples(SHAPES, NONEMPTY)
    return st.builds(
        lambda src, levels, dst, tile: n.Copy(src, levels[0], levels[1], dst, tile=tile[0] if tile else None, coord=tile[1] if tile else None),
        NAMES, st.tuples(st.sampled_from(n.LEVELS), st.sampled_from(n.LEVELS)), COPY_DST_NAMES, st.none() | tiled,
    )


def _elementwise():
    def build(op):
        arity = ELEMENTWISE_OPS[op]
        return st.tuples(st.lists(ARGS, min_size=arity, max_size=arity), OPT_NAME, NAMES).map(
            # without `and get`, the first operand is overwritten and must be a tile name
            lambda t: n.Elementwise(op, tuple(t[0]) if t[1] is not None else (n.Name(t[2]), *t[0][1:]), t[1])
        )
    return st.sampled_from(sorted(ELEMENTWISE_OPS)).flatmap(build)


SIMPLE_STMTS = st.one_of(
    _allocate(),
    _copy(),
    st.builds(n.Gemm, NAMES, NAMES, NAMES, st.booleans(), st.booleans(), st.booleans()),
    _elementwise(),
    st.builds(n.Cast, NAMES, NAMES, OPT_NAME),
    st.builds(n.ScoreMod, NAMES, EXPRS),
    st.builds(n.Mask, NAMES, EXPRS),
    st.builds(n.Softmax, NAMES),
    st.builds(n.OnlineSoftmax, NAMES, NAMES, NAMES, st.lists(NAMES, max_size=3).map(tuple), NAMES),
    st.builds(n.Normalize, NAMES, NAMES, NAMES),
    st.builds(n.LogSumExp, NAMES, NAMES, NAMES),
    st.builds(n.Reshape, NAMES, st.sampled_from(n.LAYOUTS), st.sampled_from(n.LAYOUTS)),
)
STMTS = st.recursive(
    SIMPLE_STMTS,
    lambda children: st.builds(n.Loop, NAMES, EXPRS, EXPRS, st.none() | EXPRS, st.lists(children, max_size=4).map(tuple)),
    max_leaves=8,
)


def _tuple(strategy, max_size=3):
    return st.lists(strategy, max_size=max_size).map(tuple)


KERNELS = st.builds(
    n.Kernel,
    NAMES,
    target=OPT_NAME,
    computes=_tuple(st.builds(n.Feature, NAMES, st.one_of(st.none(), NAMES, EXPRS))),
    dtypes=_tuple(st.tuples(NAMES, NAMES)),
    params=_tuple(st.builds(n.Param, NAMES, st.none() | st.integers(min_value=0, max_value=10**6))),
    scalars=_tuple(NAMES),
    grid=_tuple(st.builds(n.GridAxis, NAMES, EXPRS)),
    scratch=_tuple(st.builds(n.Scratch, NAMES, SHAPES, NAMES), max_size=2),
    body=_tuple(STMTS, max_size=6),
    launch=_tuple(st.builds(n.Launch, NAMES, EXPRS, EXPRS), max_size=2),
)
DOC_LINE = st.text(alphabet=string.ascii_letters + string.digits + " #.,:()=-", max_size=30).map(str.rstrip)
# A parsed doc never ends with an empty line (the blank line before the kernel is not part of it).
DOCS = st.lists(DOC_LINE, max_size=3).map(lambda lines: "\n".join(lines).rstrip("\n"))
PROGRAMS = st.builds(n.Program, st.lists(KERNELS, min_size=1, max_size=3).map(tuple), doc=DOCS)


@settings(max_examples=600, deadline=None)
@given(EXPRS)
def test_expression_round_trip(e: n.Expr) -> None:
    text = show(e)
    back = parse_expr(text)
    assert back == e, text
    assert show(back) == text  # also catches int/float confusions that == would let through


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROGRAMS)
def test_program_round_trip(program: n.Program) -> None:
    text = print_program(program)
    back = parse(text)
    assert back == program, text
    assert print_program(back) == text


def test_reserved_words() -> None:
    """The two words the strategies avoid are really rejected where they are excluded, and names elsewhere."""
    with pytest.raises(TLSyntaxError):
        parse_expr("not")
    assert parse_expr("1 + not") == n.Binary("+", n.Num(1), n.Name("not"))  # a name where `not` cannot start
    with pytest.raises(TLSyntaxError) as info:
        parse("kernel k\nCopy x from global to shared to\n")
    assert (info.value.where.line, info.value.where.col) == (2, 30)
    assert parse("kernel k\nCopy to from global to shared x\n").kernels[0].body[0].src == "to"


# ---------------------------------------------------------------- fuzzing: only TLSyntaxError escapes

FUZZ_TOKENS = LITERALS + ["x", "S", "q", "Qr", "mma_a", "mma_c", "Add", "Exp", "RowMax", "Frob", "min", "cdiv", "where",
                          "0", "1", "17", "1.5", ".5", "1e3", "1e999", "9" * 30, "\n", "\n", "\n", "\r\n", "#c\n", " ", "\t",
                          "$", "\x00", "\x0b", "\u2028", "é"]


def _must_only_raise_syntax_errors(text) -> None:
    """``parse``/``parse_expr`` either succeed (and the result round-trips) or raise TLSyntaxError."""
    for fn, printer in ((parse, print_program), (parse_expr, show)):
        try:
            result = fn(text)
        except TLSyntaxError as err:
            assert isinstance(err.where, Position)
            assert err.where.line >= 1 and err.where.col >= 1
            if isinstance(text, str):
                assert err.where.line <= text.count("\n") + 2
            assert isinstance(err.expected, tuple) and all(isinstance(t, str) for t in err.expected)
            assert isinstance(str(err), str)
        else:
            back = fn(printer(result))
            # Docs are compared in test_doc_comment_with_unicode_line_breaks_round_trips.
            assert (back.kernels == result.kernels) if fn is parse else (back == result)


@settings(max_examples=1200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    _must_only_raise_syntax_errors(data.decode("utf-8", errors="replace"))
    _must_only_raise_syntax_errors(data.decode("latin-1"))
    _must_only_raise_syntax_errors("kernel k\n" + data.decode("latin-1"))


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(FUZZ_TOKENS), max_size=60), st.sampled_from(["", " "]), st.booleans())
def test_fuzz_token_sequences(tokens: list[str], sep: str, in_kernel: bool) -> None:
    text = sep.join(tokens)
    _must_only_raise_syntax_errors(("kernel k\n" if in_kernel else "") + text)


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(LIBRARY), st.data())
def test_fuzz_library_mutations(name: str, data) -> None:
    """Small token edits of real programs reach the parser's deep states (and the transformer's checks)."""
    tokens = re.findall(r"\s+|\w+|\^T|//|<=|>=|==|!=|\S", library_text(name))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(tokens) - 1))
        action = data.draw(st.sampled_from(["delete", "replace", "insert", "swap"]))
        token = data.draw(st.sampled_from(FUZZ_TOKENS))
        if action == "delete":
            del tokens[i]
        elif action == "replace":
            tokens[i] = token
        elif action == "insert":
            tokens.insert(i, token)
        elif i + 1 < len(tokens):
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
        if not tokens:
            tokens = [""]
    _must_only_raise_syntax_errors("".join(tokens))


@pytest.mark.parametrize("text", [
    "(" * 3000 + "1" + ")" * 3000,
    "-" * 3000 + "1",
    "not " * 3000 + "a",
    " + ".join(["a"] * 5000),
    "9" * 5000,
    "x[" * 2000 + "0" + "]" * 2000,
    "a\nb",
    "\x00",
    "",
    "\n\n\n",
])
def test_pathological_inputs_raise_only_syntax_errors(text: str) -> None:
    _must_only_raise_syntax_errors(text)
    _must_only_raise_syntax_errors("kernel k\nCompute Mask S keep " + text + "\n")


@pytest.mark.parametrize("value", [b"kernel k\n", None, 3, ["kernel k"]])
def test_non_text_sources_are_syntax_errors(value) -> None:
    with pytest.raises(TLSyntaxError):
        parse(value)
    with pytest.raises(TLSyntaxError):
        parse_expr(value)


# ---------------------------------------------------------------- syntax errors: where and what


def _error(text: str, file: str | None = None) -> TLSyntaxError:
    with pytest.raises(TLSyntaxError) as info:
        parse(text, file=file)
    return info.value


def _pos(text: str, needle: str, occurrence: int = 1) -> tuple[int, int]:
    """1-based (line, col) of the occurrence-th ``needle`` in ``text``."""
    i = -1
    for _ in range(occurrence):
        i = text.index(needle, i + 1)
    line = text.count("\n", 0, i) + 1
    return line, i - (text.rfind("\n", 0, i) + 1) + 1


def test_misspelled_level_reports_line_col_and_expected() -> None:
    text = "kernel k\nAllocate Q in glob (Sq, D) at q[b, h]\n"
    err = _error(text, file="bad.tl")
    assert (err.where.line, err.where.col) == (2, 15) == _pos(text, "glob")
    assert err.text == "glob"
    assert set(err.expected) == {"'global'", "'shared'", "'register'", "'barrier'"}
    assert str(err).startswith("bad.tl:2:15: unexpected 'glob'")
    assert "'global'" in err.hint


def test_misspelled_level_in_a_library_program() -> None:
    good = library_text("gqa_fwd.tl")
    text = good.replace("Copy Ks from shared to register Kr", "Copy Ks from shared to regster Kr")
    err = _error(text)
    assert (err.where.line, err.where.col) == _pos(text, "regster")
    assert "'register'" in err.expected and "'global'" in err.expected


def test_unknown_compute_operation() -> None:
    text = library_text("gqa_fwd.tl").replace("Compute Multiply S, scale", "Compute Multiplie S, scale")
    err = _error(text)
    assert (err.where.line, err.where.col) == _pos(text, "Multiplie")
    assert err.text == "Multiplie"
    assert "unknown Compute operation 'Multiplie'" in err.message
    assert "Multiply" in err.hint and "OnlineSoftmax" in err.hint


@pytest.mark.parametrize("snippet, func, want, got", [
    ("keep kv_idx < min(Sk)", "min", 2, 1),
    ("keep kv_idx < cdiv(Sk, BN, 1)", "cdiv", 2, 3),
    ("keep kv_idx < abs()", "abs", 1, 0),
    ("keep where(kv_idx < Sk, 1 < 2) ", "where", 3, 2),
])
def test_wrong_function_arity(snippet: str, func: str, want: int, got: int) -> None:
    text = library_text("gqa_fwd.tl").replace("keep kv_idx < Sk", snippet)
    err = _error(text)
    line, col = _pos(text, snippet)
    assert (err.where.line, err.where.col) == (line, col + snippet.index(func + "("))
    assert err.message == f"{func}() takes {want} argument(s), got {got}"
    assert err.hint.startswith(f"write {func}(")


def test_wrong_elementwise_arity() -> None:
    text = library_text("gqa_fwd.tl").replace("Compute Multiply S, scale", "Compute Exp S, scale")
    err = _error(text)
    assert (err.where.line, err.where.col) == _pos(text, "Exp S")
    assert err.message == "Compute Exp takes 1 operand(s), got 2"


def test_unknown_layout() -> None:
    text = library_text("gqa_fwd.tl").replace("to mma_a", "to mma_x")
    err = _error(text)
    assert (err.where.line, err.where.col) == _pos(text, "mma_x")
    assert "mma_a" in err.hint and "mma_c" in err.hint


def test_missing_end_at_end_of_file() -> None:
    text = library_text("gqa_fwd.tl").replace("\nend\n", "\n")
    err = _error(text)
    assert err.message == "unexpected end of file"
    assert "'end'" in err.expected
    assert err.where.line == len(text.splitlines())


def test_missing_end_before_next_kernel() -> None:
    text = library_text("decode_split_kv.tl")
    first_end = text.index("\nend\n")
    text = text[:first_end] + text[first_end + len("\nend"):]
    err = _error(text)
    assert (err.where.line, err.where.col) == _pos(text, "kernel decode_split_kv_combine")
    assert "'end'" in err.expected
    assert err.text == "kernel"


def test_stray_end() -> None:
    text = "kernel k\nend\n"
    err = _error(text)
    assert (err.where.line, err.where.col) == (2, 1)


def test_unexpected_character() -> None:
    text = "kernel k\nAllocate x in shared (BM) : fp16 $\n"
    err = _error(text)
    assert (err.where.line, err.where.col) == _pos(text, "$")
    assert err.text == "$"
    assert err.message == "unexpected character '$'"


def test_nul_character_position() -> None:
    err = _error("kernel k\nAllo\x00cate\n")
    assert (err.where.line, err.where.col) == (2, 5)


def test_missing_newline_at_end_is_accepted() -> None:
    text = library_text("gqa_fwd.tl").rstrip("\n")
    assert parse(text) == parse(text + "\n")


def test_parse_expr_errors() -> None:
    with pytest.raises(TLSyntaxError) as info:
        parse_expr("a + ")
    assert info.value.where.line == 1 and "a name" in info.value.expected
    with pytest.raises(TLSyntaxError) as info:
        parse_expr("1 < 2 < 3")  # comparisons do not chain
    assert (info.value.where.line, info.value.where.col) == (1, 7)
    with pytest.raises(TLSyntaxError):
        parse_expr("a\nb")
    with pytest.raises(TLSyntaxError) as info:
        parse_expr("q_idx <= foo(kv_idx)", where="spec.mask_mod")
    assert str(info.value).startswith("spec.mask_mod:1:10:")


# ---------------------------------------------------------------- regressions
# Bugs these tests found in src/ while they were written; src/ has been fixed since, and the tests
# keep them fixed.


def test_unknown_function_message_names_the_function() -> None:
    # REGRESSION (src/attnforge/tl/parser.py, _Build.call): the message formatted the lark Token
    # with !r, giving "unknown function Token('NAME', 'foo')" instead of "unknown function 'foo'".
    with pytest.raises(TLSyntaxError) as info:
        parse_expr("foo(1)")
    assert info.value.message == "unknown function 'foo'"
    assert info.value.text == "foo"


@pytest.mark.parametrize("operand", ["(kv_idx < Sk)", "(a and b)", "(not a)", "(a or b)"])
def test_printer_parenthesises_boolean_compute_operands(operand: str) -> None:
    # REGRESSION (src/attnforge/tl/printer.py, stmt for Elementwise): Compute operands are `sum`s in
    # the grammar, but the printer wrote a boolean operand without its parentheses, e.g.
    # "Compute Multiply S, kv_idx < Sk", which does not parse: parse(print_program(p)) failed for a
    # program that parse() accepted.
    program = parse(f"kernel k\nCompute Multiply S, {operand}\nCompute Add S, {operand} and get T\n")
    assert parse(print_program(program)) == program


@pytest.mark.parametrize("literal", ["1e999", "1" + "0" * 400 + ".0"])
def test_float_literal_overflow(literal: str) -> None:
    # REGRESSION (src/attnforge/tl/parser.py, float_lit): a literal too large for a float was
    # accepted as Num(inf); the printer then raised ValueError ("TL has no literal for inf"), so a
    # parsed program could not be printed. Either the parser rejects it with a TLSyntaxError or it
    # round-trips.
    try:
        e = parse_expr(literal)
    except TLSyntaxError:
        return
    assert parse_expr(show(e)) == e


@pytest.mark.parametrize("newline", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"])
def test_unexpected_character_text_with_unicode_line_breaks(newline: str) -> None:
    # REGRESSION (src/attnforge/tl/parser.py, _syntax_error): lark counts lines by "\n" only, but
    # the offending character was looked up with str.splitlines(), which also splits at \r, \x0b,
    # \x0c, \x1c-\x1e, \x85, \u2028 and \u2029. A comment holding one of them shifted the lookup, so
    # the message named a character of another line (here 'k' of "kernel" instead of '$').
    text = f"# doc{newline}more\nkernel x\n$\n"
    err = _error(text)
    assert (err.where.line, err.where.col) == (3, 1)
    assert err.text == "$", err.message


@pytest.mark.parametrize("newline", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"])
def test_doc_comment_with_unicode_line_breaks_round_trips(newline: str) -> None:
    # REGRESSION (src/attnforge/tl/printer.py, print_program): the parser reads the doc comment
    # line by line at "\n" only (so "# a\x0cb" gives the doc "a\x0cb"), but print_program split the
    # doc with str.splitlines(), which also breaks at \r, \x0b, \x0c, \x1c-\x1e, \x85, \u2028,
    # \u2029: it printed "# a" and "# b", which parse back as the doc "a\nb". (Found by
    # test_fuzz_library_mutations.)
    program = parse(f"# a{newline}b\nkernel k\n")
    assert parse(print_program(program)) == program


def test_launch_line_parses_prints_and_explains_a_fixed_value() -> None:
    text = "kernel k\nparam BM = 16, BN = 64\nlaunch NSPLIT = splits(B * Hq * cdiv(Sq, BM), cdiv(Sk, BN))\ngrid s : NSPLIT\n"
    kernel = parse(text).kernels[0]
    assert kernel.launch == (n.Launch("NSPLIT", parse_expr("B * Hq * cdiv(Sq, BM)"), parse_expr("cdiv(Sk, BN)")),)
    assert (kernel.launch[0].line, kernel.launch[0].col) == (3, 1)
    assert print_program(parse(text)) == text + "\n"
    # launch and splits are keywords only there: names elsewhere
    assert parse("kernel k\nAllocate launch in register (splits) : fp32\n").kernels[0].body[0].name == "launch"
    with pytest.raises(TLSyntaxError) as info:
        parse("kernel k\nlaunch NSPLIT = 8\n")
    assert (info.value.where.line, info.value.where.col) == (2, 17)
    assert "splits(PROGRAMS, TILES)" in info.value.hint and "param NSPLIT = 8" in info.value.hint
    with pytest.raises(TLSyntaxError):
        parse("kernel k\nlaunch NSPLIT = splits(B)\n")
