"""Parse TL text (and standalone expressions) into ``nodes``; every failure is a TLSyntaxError."""

from __future__ import annotations

import functools
import math
import re
from importlib import resources
from typing import NoReturn

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from ..errors import AttnforgeError, Position, TLSyntaxError, shorten
from . import nodes as n
from ..splits import DEFAULT_PER_SM, MAX_PER_SM
from .limits import MAX_EXPR_DEPTH, MAX_LOOP_DEPTH, MAX_SOURCE_BYTES

# Sizes are far below 10**100; a longer literal is a mistake (and Python's int() refuses 4300+ digits).
MAX_INT_DIGITS = 100

# Operations `Compute NAME args` accepts, with their arity (None: one or more).
ELEMENTWISE_OPS: dict[str, int] = {
    "Multiply": 2, "Add": 2, "Subtract": 2, "Divide": 2, "Maximum": 2, "Minimum": 2,
    "Exp": 1, "Log": 1, "Tanh": 1, "Abs": 1, "Neg": 1,
    "RowMax": 1, "RowSum": 1,
}
# Functions expressions may call, with their arity.
FUNCTIONS: dict[str, int] = {
    "min": 2, "max": 2, "abs": 1, "exp": 1, "exp2": 1, "log": 1, "log2": 1, "sqrt": 1, "tanh": 1,
    "sigmoid": 1, "where": 3, "cdiv": 2, "floor": 1, "ceil": 1,
}


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = resources.files("attnforge.tl").joinpath("grammar.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", start=["program", "expr_only"], propagate_positions=True, maybe_placeholders=True)


def _echo(tok: object) -> str:
    """A token quoted for a message, shortened: a name may be 100 KB long."""
    return shorten(repr(str(tok)), 80)


def _at(meta_or_tok) -> dict:
    line = getattr(meta_or_tok, "line", 0) or 0
    col = getattr(meta_or_tok, "column", 0) or 0
    return {"line": line, "col": col}


class _Build(Transformer):
    """Turns lark's tree into nodes; checks what the grammar cannot (operation names, arities)."""

    def __init__(self, file: str | None):
        super().__init__()
        self.file = file

    def _fail(self, tok, message: str, hint: str) -> NoReturn:
        raise TLSyntaxError(message, where=Position(tok.line, tok.column, self.file), text=str(tok), hint=hint)

    # -- expressions
    @v_args(meta=True)
    def int_lit(self, meta, items):
        if len(items[0]) > MAX_INT_DIGITS:
            self._fail(items[0], f"integer literal of {len(items[0])} digits is too long", f"write at most {MAX_INT_DIGITS} digits")
        return n.Num(int(items[0]), **_at(meta))

    @v_args(meta=True)
    def float_lit(self, meta, items):
        value = float(items[0])
        if not math.isfinite(value):
            self._fail(items[0], f"number {_echo(items[0])} is too large for a float", "write inf for infinity, or a smaller number")
        return n.Num(value, **_at(meta))

    @v_args(meta=True)
    def name(self, meta, items):
        return n.Name(str(items[0]), **_at(meta))

    @v_args(meta=True)
    def call(self, meta, items):
        func, args = items[0], tuple(items[1] or ())
        if func not in FUNCTIONS:
            self._fail(func, f"unknown function {_echo(func)}", "functions: " + ", ".join(sorted(FUNCTIONS)))
        if len(args) != FUNCTIONS[func]:
            self._fail(func, f"{func}() takes {FUNCTIONS[func]} argument(s), got {len(args)}", f"write {func}({', '.join(['x', 'y', 'z'][:FUNCTIONS[func]])})")
        return n.Call(str(func), args, **_at(meta))

    @v_args(meta=True)
    def index(self, meta, items):
        return n.Index(str(items[0]), tuple(items[1]), **_at(meta))

    @v_args(meta=True)
    def neg(self, meta, items):
        operand = items[1]
        if isinstance(operand, n.Num):  # fold "-3" to a literal so printing round-trips
            return n.Num(-operand.value, **_at(meta)) if operand.value != 0 else n.Unary("-", operand, **_at(meta))
        return n.Unary("-", operand, **_at(meta))

    @v_args(meta=True)
    def not_op(self, meta, items):
        return n.Unary("not", items[0], **_at(meta))

    @v_args(meta=True)
    def binop(self, meta, items):
        return n.Binary(str(items[1]), items[0], items[2], **_at(meta))

    @v_args(meta=True)
    def compare(self, meta, items):
        return n.Binary(str(items[1]), items[0], items[2], **_at(meta))

    @v_args(meta=True)
    def and_op(self, meta, items):
        return n.Binary("and", items[0], items[1], **_at(meta))

    @v_args(meta=True)
    def or_op(self, meta, items):
        return n.Binary("or", items[0], items[1], **_at(meta))

    def exprlist(self, items):
        return tuple(items)

    def shape(self, items):
        return tuple(items[0] or ())

    def expr_only(self, items):
        return items[0]

    # -- header
    def target_h(self, items):
        return ("target", str(items[0]))

    @v_args(meta=True)
    def feature(self, meta, items):
        value = items[1]
        return n.Feature(str(items[0]), str(value) if isinstance(value, Token) else value, **_at(meta))

    def computes_h(self, items):
        return ("computes", tuple(items))

    def dtype_bind(self, items):
        return (str(items[0]), str(items[1]))

    def dtype_h(self, items):
        return ("dtypes", tuple(items))

    @v_args(meta=True)
    def param_bind(self, meta, items):
        value = items[1]
        return n.Param(str(items[0]), int(value) if value is not None and value.type == "INT" else None, **_at(meta))

    def param_h(self, items):
        return ("params", tuple(items))

    @v_args(meta=True)
    def launch_h(self, meta, items):
        name, programs, tiles, per_sm = items
        if per_sm is not None and not 1 <= int(per_sm) <= MAX_PER_SM:
            self._fail(per_sm, f"launch {name} = splits(..., {per_sm}): the programs per SM the split rule aims at are 1 to {MAX_PER_SM}",
                       "leave it out for the default, 2 programs per SM")
        return ("launch", (n.Launch(str(name), programs, tiles, DEFAULT_PER_SM if per_sm is None else int(per_sm), **_at(meta)),))

    def scalar_h(self, items):
        return ("scalars", tuple(str(t) for t in items))

    @v_args(meta=True)
    def grid_axis(self, meta, items):
        return n.GridAxis(str(items[0]), items[1], **_at(meta))

    def grid_h(self, items):
        return ("grid", tuple(items))

    @v_args(meta=True)
    def scratch_h(self, meta, items):
        return ("scratch", (n.Scratch(str(items[0]), items[1], str(items[2]), **_at(meta)),))

    # -- statements
    @v_args(meta=True)
    def alloc_global(self, meta, items):
        name, shape, tensor, offset, pack = items
        return n.Allocate(str(name), "global", shape, tensor=str(tensor), offset=offset, pack=pack, **_at(meta))

    def pack(self, items):
        return items[0]

    @v_args(meta=True)
    def alloc_shared(self, meta, items):
        return n.Allocate(str(items[0]), "shared", items[1], dtype=str(items[2]), ring=items[3], **_at(meta))

    @v_args(meta=True)
    def alloc_register(self, meta, items):
        return n.Allocate(str(items[0]), "register", items[1], dtype=str(items[2]), init=items[3], **_at(meta))

    # -- the Hopper form
    def _no_roles(self, body: list, tok: Token, block: str) -> None:
        """Roles stand at the top level of a kernel body only, never inside a loop or a role."""
        for s in body:
            if isinstance(s, n.Role):
                self._fail(tok, f"role {s.name} is inside {block}", "roles appear only at the top level of the kernel body; close the enclosing block with 'end' first")

    @v_args(meta=True)
    def alloc_barrier(self, meta, items):
        name, shape, count = items
        return n.Allocate(str(name), n.BARRIER, shape or (), count=count, **_at(meta))

    def ring(self, items):
        return items[0]

    def count(self, items):
        return items[0]

    def stage(self, items):
        return items[0]

    def regs(self, items):
        return items[0]

    @v_args(meta=True)
    def barrier_ref(self, meta, items):
        return n.BarrierRef(str(items[0]), items[1], **_at(meta))

    def signal(self, items):
        return items[1]

    @v_args(meta=True)
    def wait(self, meta, items):
        return n.Wait(items[0], items[1], **_at(meta))

    @v_args(meta=True)
    def wait_gemm(self, meta, items):
        return n.WaitGemm(str(items[0]), **_at(meta))

    @v_args(meta=True)
    def arrive(self, meta, items):
        return n.Arrive(items[0], **_at(meta))

    @v_args(meta=True)
    def role(self, meta, items):
        name, start, stop, regs, *body = items
        self._no_roles(body, name, f"role {name}")
        if regs is not None and len(regs) > MAX_INT_DIGITS:
            self._fail(regs, f"integer literal of {len(regs)} digits is too long", f"write at most {MAX_INT_DIGITS} digits")
        return n.Role(str(name), start, stop, int(regs) if regs is not None else None, tuple(body), **_at(meta))

    def level(self, items):
        return str(items[0])

    def tile(self, items):
        return (items[0], items[1])

    @v_args(meta=True)
    def copy(self, meta, items):
        src, src_index, tile, src_level, dst_level, dst, dst_index, signal = items
        shape, coord = tile if tile is not None else (None, None)
        return n.Copy(str(src), src_level, dst_level, str(dst), tile=shape, coord=coord, src_index=src_index, dst_index=dst_index, signal=signal, **_at(meta))

    def operand(self, items):
        return (str(items[0]), items[2] is not None, items[1])

    def get(self, items):
        return ("get", str(items[0]))

    def accumulate(self, items):
        return ("accumulate", str(items[0]))

    def rescale(self, items):
        return tuple(str(t) for t in items)

    @v_args(meta=True)
    def gemm(self, meta, items):
        (a, at, ai), (b, bt, bi), (kind, out), is_async = items
        return n.Gemm(a, b, out, kind == "accumulate", a_trans=at, b_trans=bt, is_async=is_async is not None, a_index=ai, b_index=bi, **_at(meta))

    @v_args(meta=True)
    def elementwise(self, meta, items):
        op, *args, get = items
        if op not in ELEMENTWISE_OPS:
            self._fail(op, f"unknown Compute operation {_echo(op)}", "operations: GEMM, Cast, ScoreMod, Mask, Softmax, OnlineSoftmax, Normalize, LogSumExp, " + ", ".join(ELEMENTWISE_OPS))
        if len(args) != ELEMENTWISE_OPS[op]:
            self._fail(op, f"Compute {op} takes {ELEMENTWISE_OPS[op]} operand(s), got {len(args)}", "see docs/TL.md for each operation's operands")
        if get is None and not isinstance(args[0], n.Name):
            self._fail(op, f"Compute {op} without 'and get NAME' writes its first operand, which must be a tile name", "add 'and get NAME'")
        return n.Elementwise(str(op), tuple(args), get[1] if get else None, **_at(meta))

    @v_args(meta=True)
    def cast(self, meta, items):
        return n.Cast(str(items[0]), str(items[1]), items[2][1] if items[2] else None, **_at(meta))

    @v_args(meta=True)
    def score_mod(self, meta, items):
        return n.ScoreMod(str(items[0]), items[1], **_at(meta))

    @v_args(meta=True)
    def mask(self, meta, items):
        return n.Mask(str(items[0]), items[1], **_at(meta))

    @v_args(meta=True)
    def softmax(self, meta, items):
        return n.Softmax(str(items[0]), **_at(meta))

    @v_args(meta=True)
    def online_softmax(self, meta, items):
        scores, m, l, rescale, get = items
        return n.OnlineSoftmax(str(scores), str(m), str(l), tuple(rescale or ()), get[1], **_at(meta))

    @v_args(meta=True)
    def normalize(self, meta, items):
        return n.Normalize(str(items[0]), str(items[1]), items[2][1], **_at(meta))

    @v_args(meta=True)
    def logsumexp(self, meta, items):
        return n.LogSumExp(str(items[0]), str(items[1]), items[2][1], **_at(meta))

    @v_args(meta=True)
    def reshape(self, meta, items):
        name, src, dst = (str(t) for t in items)
        for tok, layout in ((items[1], src), (items[2], dst)):
            if layout not in n.LAYOUTS:
                self._fail(tok, f"unknown layout {_echo(layout)}", "layouts: " + ", ".join(n.LAYOUTS))
        return n.Reshape(name, src, dst, **_at(meta))

    def pipeline(self, items):
        return items[0]

    @v_args(meta=True)
    def loop(self, meta, items):
        var, start, stop, stages, *body = items
        self._no_roles(body, var, f"the loop over {var}")
        return n.Loop(str(var), start, stop, stages, tuple(body), **_at(meta))

    # -- kernel and program
    @v_args(meta=True)
    def kernel(self, meta, items):
        name, *rest = items
        header: dict[str, tuple] = {"computes": (), "dtypes": (), "params": (), "scalars": (), "grid": (), "scratch": (), "launch": ()}
        target = None
        body = []
        for item in rest:
            if isinstance(item, tuple) and item and isinstance(item[0], str) and item[0] in ("target", *header):
                if item[0] == "target":
                    target = item[1]
                else:
                    header[item[0]] = header[item[0]] + item[1]
            else:
                body.append(item)
        return n.Kernel(str(name), target, header["computes"], header["dtypes"], header["params"], header["scalars"], header["grid"], header["scratch"], tuple(body),
                        launch=header["launch"], **_at(meta))

    def program(self, items):
        return n.Program(tuple(items))


def _readable(term: str) -> str:
    """A terminal's name as a reader would write it (lark names anonymous ones like __ANON_0)."""
    lark = _lark()
    for t in lark.terminals:
        if t.name == term:
            pattern = t.pattern
            if pattern.type == "str":
                return repr(pattern.value)
            return {"NAME": "a name", "INT": "an integer", "FLOAT": "a number", "_NL": "end of line",
                    "CMPOP": "a comparison", "MULOP": "'*', '/', '//' or '%'", "TRANS": "'^T'"}.get(term, term)
    return {"$END": "end of file"}.get(term, term)


_COMPARISON = re.compile(r"<=|>=|==|!=|<|>")
_FEATURE_VALUE = re.compile(r"^\s*computes\b.*?\b(\w+)\s*=\s*$")
_LAUNCH_VALUE = re.compile(r"^\s*launch\s+(\w+)\s*=\s*$")


def _known_mistake(tok: Token, before: str) -> tuple[str, str] | None:
    """(message, hint) for a parse error with a common cause, said as such (else None).
    ``before``: the line's text up to the unexpected token."""
    if tok.type == "CMPOP" and _COMPARISON.search(before):
        return ("comparisons do not chain", "write 'a <= b and b < c' for 'a <= b < c' (each comparison gives a truth value)")
    launch = _LAUNCH_VALUE.match(before)
    if launch and str(tok) != "splits":
        return (f"launch {launch.group(1)} = {tok}: a launch-time value is computed by the split rule",
                f"write 'launch {launch.group(1)} = splits(PROGRAMS, TILES)' (programs per split, K/V tiles); "
                f"a value fixed in the program is a parameter: param {launch.group(1)} = 8")
    feature = _FEATURE_VALUE.match(before)
    if feature and (str(tok)[:1].isdigit() or str(tok) in ("-", ".")):
        name = feature.group(1)
        fixes = {
            "softcap": "write 'computes softcap' and 'scalar softcap': its value is given at launch (--scalar softcap=50, or the spec's softcap); "
                       "a cap fixed in the program is a modifier: computes score_mod = (50 * tanh(score / 50)) with a Compute ScoreMod",
            "window": "write 'computes window' (or window = left / right) and 'scalar window_left, window_right': the sizes are given at launch "
                      "(--scalar window_left=256)",
        }
        return (f"{name} = {tok}: a feature's value is not a number",
                fixes.get(name, "feature values are names (causal = top_left, window = left) or a parenthesised expression (score_mod = (...)); "
                                "numbers are runtime scalars, given at launch"))
    return None


def _syntax_error(err: UnexpectedInput, text: str, file: str | None) -> TLSyntaxError:
    line = getattr(err, "line", None)
    col = getattr(err, "column", None)
    lines = text.split("\n")  # lark counts lines by "\n" only; str.splitlines() also splits at \x0c, \u2028, ...
    if not isinstance(line, int) or line < 1:
        line, col = len(lines), len(lines[-1]) + 1
    col = col if isinstance(col, int) and col >= 1 else 1
    if isinstance(err, UnexpectedCharacters):
        bad = lines[line - 1][col - 1 : col] if line - 1 < len(lines) else ""
        expected = tuple(sorted({_readable(t) for t in (err.allowed or ())}))
        return TLSyntaxError(f"unexpected character {bad!r}", where=Position(line, col, file), text=bad, expected=expected)
    if isinstance(err, UnexpectedToken):
        tok = err.token
        shown = "end of line" if tok.type == "_NL" else ("end of file" if tok.type == "$END" else _echo(tok))
        expected = tuple(sorted({_readable(t) for t in err.expected}))
        before = lines[line - 1][: col - 1] if line - 1 < len(lines) else ""
        known = _known_mistake(tok, before)
        if known is not None:
            return TLSyntaxError(known[0], where=Position(line, col, file), text=shorten(str(tok)), hint=known[1])
        return TLSyntaxError(f"unexpected {shown}", where=Position(line, col, file), text=shorten(str(tok)), expected=expected)
    if isinstance(err, UnexpectedEOF):
        expected = tuple(sorted({_readable(t) for t in err.expected}))
        return TLSyntaxError("unexpected end of file", where=Position(line, col, file), expected=expected)
    return TLSyntaxError(str(err).splitlines()[0], where=Position(line, col, file))


def _leading_doc(text: str) -> str:
    doc = []
    for raw in text.split("\n"):
        s = raw.strip()
        if not s.startswith("#"):
            break
        doc.append(s[1:].removeprefix(" "))
    return "\n".join(doc)


def _run(text: str, start: str, file: str | None):
    if not isinstance(text, str):
        raise TLSyntaxError(f"TL source must be text, got {type(text).__name__}", where=Position(1, 1, file))
    if "\x00" in text:
        i = text.index("\x00")
        line = text.count("\n", 0, i) + 1
        raise TLSyntaxError("NUL character in source", where=Position(line, i - (text.rfind("\n", 0, i) + 1) + 1, file), text="\\x00")
    if len(text) > MAX_SOURCE_BYTES:
        raise TLSyntaxError(f"the source has {len(text):,} characters; TL takes at most {MAX_SOURCE_BYTES:,}", where=Position(1, 1, file),
                            hint="a TL program is a few kilobytes, an expression one line")
    source = text if text.endswith("\n") else text + "\n"
    try:
        tree = _lark().parse(source, start=start)  # LALR: iterative, so any nesting parses
        _check_nesting(tree, file)  # the transformer and every later walk recurse
        return _Build(file).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, AttnforgeError):
            raise err.orig_exc from None
        raise TLSyntaxError(shorten(f"cannot build the syntax tree: {err.orig_exc}", 300), where=Position(1, 1, file)) from None
    except UnexpectedInput as err:
        raise _syntax_error(err, source, file) from None
    except RecursionError:
        raise TLSyntaxError("the text is nested too deeply to parse", where=Position(1, 1, file),
                            hint=f"expressions nest at most {MAX_EXPR_DEPTH} levels, loops {MAX_LOOP_DEPTH}") from None
    except (LarkError, ValueError, OverflowError) as err:
        raise TLSyntaxError(shorten(f"cannot parse: {type(err).__name__}: {err}", 300), where=Position(1, 1, file)) from None


# Tree nodes that nest an expression one level deeper (leaves and argument lists do not).
_NESTING_RULES = frozenset({"or_op", "and_op", "not_op", "compare", "binop", "neg", "call", "index"})


def _check_nesting(tree: Tree, file: str | None) -> None:
    """Refuse expressions nested more than MAX_EXPR_DEPTH levels and loops more than MAX_LOOP_DEPTH,
    walking lark's tree without recursion. A chain ``a + b + c`` nests one level per operator.
    The error points at the start of the outermost expression (or loop) that is too deep."""
    stack: list[tuple[Tree, int, int, Tree | None, Tree | None]] = [(tree, 0, 0, None, None)]  # node, depth, loops, expr root, outer loop
    while stack:
        node, depth, loops, root, outer = stack.pop()
        if node.data == "loop":  # a role nests no deeper: roles sit at the top level (the transformer says so)
            loops, outer = loops + 1, outer or node
            if loops > MAX_LOOP_DEPTH:
                raise TLSyntaxError(f"loops nested more than {MAX_LOOP_DEPTH} deep", where=_tree_position(outer, file),
                                    hint=f"at most {MAX_LOOP_DEPTH} 'for' loops may enclose one another")
        if node.data in _NESTING_RULES:
            depth, root = depth + 1, root or node
            if depth > MAX_EXPR_DEPTH:
                raise TLSyntaxError(f"expression nested more than {MAX_EXPR_DEPTH} levels deep (each operator of a chain "
                                    "such as a + b + c, each unary sign, 'not' and call is a level)", where=_tree_position(root, file),
                                    hint=f"write a shorter expression: at most {MAX_EXPR_DEPTH} levels")
        elif node.data != "exprlist":  # a statement, a shape or a header line: a new expression starts below
            depth, root = 0, None
        stack.extend((child, depth, loops, root, outer) for child in node.children if isinstance(child, Tree))


def _tree_position(node: Tree, file: str | None) -> Position:
    meta = node.meta
    return Position(getattr(meta, "line", 1) or 1, getattr(meta, "column", 1) or 1, file)


def parse(text: str, file: str | None = None) -> n.Program:
    """Parse a whole TL program (one or more kernels)."""
    program = _run(text, "program", file)
    return n.Program(program.kernels, _leading_doc(text))


def parse_expr(text: str, where: str | None = None) -> n.Expr:
    """Parse one expression, e.g. a spec's ``score_mod`` (``score * 0.5 + (kv_idx - q_idx)``)."""
    if not isinstance(text, str):
        return _run(text, "expr_only", where)  # reports what was given instead of text
    return _parse_expr_text(text, where)


@functools.lru_cache(maxsize=256)
def _parse_expr_text(text: str, where: str | None) -> n.Expr:
    # Cached: every attnforge.attention call validates its spec, whose modifiers would otherwise
    # be parsed again (about 0.8 ms each); the trees are immutable, errors are not cached.
    if "\n" in text.strip():
        raise TLSyntaxError("an expression must fit on one line", where=Position(1, 1, where))
    return _run(text, "expr_only", where)


__all__ = ["parse", "parse_expr", "ELEMENTWISE_OPS", "FUNCTIONS"]
