"""The static gate for model-written Python: what a kernel module may say, checked on its syntax
tree before it runs.

Allowed: ``import`` of torch, triton, triton.language and math (``from`` those too), ``from
triton.tools.tensor_descriptor import TensorDescriptor`` and ``from __future__ import
annotations``. Refused, each with line:col and the reason: any other import; the builtins that
open files, run code or reach the interpreter's internals (open, exec, eval, compile,
__import__, globals, ...); getattr/hasattr except with a plain public name; names of system
modules (os, sys, subprocess, socket, ...) however they are reached; any name or attribute that
starts with an underscore-pair, any private attribute (``torch._C``), frame and code attributes
(``gi_frame``, ``f_globals``); the parts of torch and triton that load, save or compile outside
the kernel (``torch.load``, ``torch.utils``, ``triton.runtime.build``, ...); assigning to an attribute of
an imported module (``torch.allclose = ...`` would fool the verification that runs beside it).

The gate catches the obvious routes; the child process (sandbox.py) contains what it misses.
"""

from __future__ import annotations

import ast

from .errors import LLMError, UnsafeCodeError

ALLOWED_IMPORTS = frozenset({"torch", "triton", "triton.language", "math"})
ALLOWED_FROM = {"triton.tools.tensor_descriptor": frozenset({"TensorDescriptor"}), "__future__": frozenset({"annotations"})}

FORBIDDEN_CALLS = frozenset({
    "open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "setattr", "delattr",
    "breakpoint", "input", "help", "exit", "quit", "memoryview",
})
SYSTEM_MODULES = frozenset({
    "os", "sys", "subprocess", "socket", "shutil", "pathlib", "importlib", "ctypes", "builtins", "multiprocessing",
    "threading", "signal", "pickle", "marshal", "io", "tempfile", "resource", "pty", "select", "selectors", "asyncio",
    "urllib", "http", "requests", "posix", "nt", "fcntl", "mmap", "gc", "inspect", "code", "codeop",
})
# Attributes that lead out of a kernel whatever object they hang on.
FORBIDDEN_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "f_globals", "f_locals", "f_builtins", "f_back",
    "f_code", "tb_frame", "tb_next", "co_code", "func_globals", "system", "popen", "fork", "forkpty", "execv", "execve",
    "spawn", "kill", "remove", "unlink", "rmdir", "rename", "tofile", "from_file", "dump", "dumps", "load_inline",
    "cpp_extension",
})
# Dotted prefixes of torch and triton that load, save, compile or run things outside the kernel.
FORBIDDEN_PATHS = (
    "torch.load", "torch.save", "torch.hub", "torch.utils", "torch.ops", "torch.library", "torch.classes",
    "torch.multiprocessing", "torch.distributed", "torch.package", "torch.jit", "torch.compile", "torch.export",
    "torch.onnx", "torch.backends.cudnn.rnn", "torch.cuda.memory._record_memory_history",
    "triton.runtime.build", "triton.runtime.cache", "triton.tools", "triton.backends", "triton.compiler",
    "triton.compile", "triton.knobs", "triton.testing",
)
_ATTR_CHECKED_CALLS = frozenset({"getattr", "hasattr"})


class _AttrPosition:
    """Where an attribute's own name stands (``ast`` places an Attribute at its object's start)."""

    def __init__(self, node: ast.Attribute):
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is not None and end_col is not None and end_col >= len(node.attr):
            self.lineno, self.col_offset = end_line, end_col - len(node.attr)
        else:
            self.lineno, self.col_offset = node.lineno, node.col_offset


def _dunder(name: str) -> bool:
    return name.startswith("__")


class _Gate(ast.NodeVisitor):
    def __init__(self) -> None:
        self.problems: list[tuple[int, int, str]] = []
        self.aliases: dict[str, str] = {}  # local name -> module it stands for

    def refuse(self, node: ast.AST, reason: str) -> None:
        self.problems.append((getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1, reason))

    # ---- imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in ALLOWED_IMPORTS:
                self.refuse(node, f"import of {alias.name!r} (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
                continue
            if alias.asname:
                self._name(node, alias.asname)
                self.aliases[alias.asname] = alias.name
            else:
                self.aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.refuse(node, "relative import")
            return
        special = ALLOWED_FROM.get(module)
        for alias in node.names:
            if special is not None:
                if alias.name not in special:
                    self.refuse(node, f"from {module} import {alias.name} (only {', '.join(sorted(special))})")
                elif alias.asname:
                    self._name(node, alias.asname)
                continue
            if module not in ALLOWED_IMPORTS:
                self.refuse(node, f"import from {module!r} (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
                continue
            if alias.name == "*":
                self.refuse(node, f"from {module} import * (name what you use)")
                continue
            full = f"{module}.{alias.name}"
            if alias.name.startswith("_") or alias.name in SYSTEM_MODULES or alias.name in FORBIDDEN_ATTRIBUTES \
                    or _forbidden_path(full):
                self.refuse(node, f"from {module} import {alias.name} (not for kernels)")
                continue
            local = alias.asname or alias.name
            if alias.asname:
                self._name(node, alias.asname)
            self.aliases[local] = full

    # ---- names and attributes

    def _name(self, node: ast.AST, name: str) -> None:
        if _dunder(name):
            self.refuse(node, f"the name {name!r} (names that start with '__' reach the interpreter's internals)")
        elif name in FORBIDDEN_CALLS:
            self.refuse(node, f"the builtin {name!r}")
        elif name in SYSTEM_MODULES:
            self.refuse(node, f"the system module name {name!r}")

    def visit_Name(self, node: ast.Name) -> None:
        self._name(node, node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        at = _AttrPosition(node)
        if _dunder(attr):
            self.refuse(at, f"the attribute {attr!r} (names that start with '__' reach the interpreter's internals)")
        elif attr.startswith("_"):
            self.refuse(at, f"the private attribute {attr!r}")
        elif attr in SYSTEM_MODULES:
            self.refuse(at, f"the attribute {attr!r} (a system module)")
        elif attr in FORBIDDEN_ATTRIBUTES:
            self.refuse(at, f"the attribute {attr!r}")
        elif isinstance(node.ctx, (ast.Store, ast.Del)) and self._dotted(node) is not None:
            self.refuse(at, f"changing {self._dotted(node)} (a kernel may not patch the modules it imports)")
        else:
            dotted = self._dotted(node)
            inner = self._dotted(node.value) if isinstance(node.value, ast.Attribute) else None
            # Report the shortest forbidden prefix once, not every longer path built on it.
            if dotted is not None and _forbidden_path(dotted) and not (inner is not None and _forbidden_path(inner)):
                self.refuse(at, f"{dotted} (not for kernels)")
        self.generic_visit(node)

    def _dotted(self, node: ast.expr) -> str | None:
        """``a.b.c`` with ``a`` replaced by the module it aliases, or None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _ATTR_CHECKED_CALLS:
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and not name.value.startswith("_")
                    and name.value not in FORBIDDEN_ATTRIBUTES and name.value not in SYSTEM_MODULES):
                self.refuse(node, f"{func.id}() with a name that is not a plain public string")
        for kw in node.keywords:
            if kw.arg is not None and _dunder(kw.arg):
                self.refuse(kw, f"the keyword {kw.arg!r}")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        if isinstance(index, ast.Constant) and isinstance(index.value, str) and _dunder(index.value):
            self.refuse(node, f"the subscript {index.value!r}")
        self.generic_visit(node)

    # ---- definitions

    def _define(self, node: ast.AST, name: str) -> None:
        self._name(node, name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._define(node, node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._define(node, node.name)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self._define(node, node.arg)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._define(node, name)

    visit_Nonlocal = visit_Global  # type: ignore[assignment]


def _forbidden_path(dotted: str) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in FORBIDDEN_PATHS)


def problems(source: str, *, file: str = "<llm>") -> list[tuple[int, int, str]]:
    """Every (line, col, reason) the gate refuses, in source order; [] when the module may run."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as err:
        raise LLMError(f"the module does not parse: {err.msg}", where=f"{file}:{err.lineno or 1}:{err.offset or 1}",
                       hint="answer with a complete, valid Python module") from None
    except ValueError as err:  # NUL bytes
        raise LLMError(f"the module does not parse: {err}", where=file) from None
    gate = _Gate()
    gate.visit(tree)
    return sorted(set(gate.problems))


def check_source(source: str, *, file: str = "<llm>") -> None:
    """Raise UnsafeCodeError (every refusal with line:col) unless the module passes the gate."""
    found = problems(source, file=file)
    if found:
        raise UnsafeCodeError(found, file=file)
