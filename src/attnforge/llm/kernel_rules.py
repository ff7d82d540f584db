"""What a model-written *kernel module* must be, on top of what any model-written Python may say
(gate.py): checked on its syntax tree before it runs.

A kernel module computes attention in its ``@triton.jit`` kernels, not on the host. Refused,
each with line:col and the reason:

* torch's own attention and the library calls that would compute the answer around the kernel:
  ``torch.nn`` (``scaled_dot_product_attention``, ``softmax``, ...), ``torch.softmax``,
  ``torch.log_softmax``, ``torch.logsumexp``, ``torch.exp``, ``torch.matmul``/``mm``/``bmm``/
  ``baddbmm``/``addmm``/``einsum``/``tensordot``/..., ``torch.special``, ``torch.linalg``,
  ``torch.func``, ``torch.fft`` however reached (``from torch import matmul``, an alias,
  ``getattr(torch, "matmul")``), the same names called as tensor methods (``q.matmul(k)``,
  ``s.softmax(-1)``), and the ``@`` operator outside ``@triton.jit`` functions;
* a module without the contract (facts.module_contract): ``HEAD_DIM``, ``HEAD_DIM_V``,
  ``TENSOR_DTYPES``, a top-level ``def launch``, and at least one top-level ``@triton.jit``
  function.

A static list cannot catch every way of computing on the host (``torch.pow(math.e, s)``); the
run in the sandbox (kernel_jobs.py) also checks that ``launch`` starts a Triton kernel and that
its answer disappears when the kernels are switched off.
"""

from __future__ import annotations

import ast

from . import gate
from .errors import UnsafeCodeError

# torch functions (and tensor methods of the same name) that compute attention, a softmax, an
# exponential or a matrix product: the parts of the answer a kernel module must compute itself.
HOST_COMPUTE = frozenset({
    "scaled_dot_product_attention", "softmax", "log_softmax", "logsumexp", "exp", "exp2", "expm1",
    "matmul", "mm", "bmm", "baddbmm", "addbmm", "addmm", "addmv", "mv", "einsum", "tensordot", "inner", "outer",
    "dot", "vdot", "chain_matmul", "multi_dot", "flex_attention", "sdpa_kernel",
})
# Whole torch namespaces a kernel module has no use for on the host.
HOST_NAMESPACES = ("torch.nn", "torch.special", "torch.linalg", "torch.func", "torch.fft", "torch.autograd",
                   "torch.fx", "torch.vmap", "torch.sparse", "torch.masked", "torch.nested", "torch.distributions")
CONTRACT_NAMES = ("HEAD_DIM", "HEAD_DIM_V", "TENSOR_DTYPES")
_TRITON_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics"}


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = aliases.get(node.id)
    return None if root is None else ".".join([root, *reversed(parts)])


def _host_compute(dotted: str) -> bool:
    """Whether a dotted torch path computes part of the answer on the host."""
    if not dotted.startswith("torch."):
        return False
    if any(dotted == p or dotted.startswith(p + ".") for p in HOST_NAMESPACES):
        return True
    return any(part in HOST_COMPUTE for part in dotted.split(".")[1:])


class _Rules(ast.NodeVisitor):
    def __init__(self) -> None:
        self.problems: list[tuple[int, int, str]] = []
        self.aliases: dict[str, str] = {}  # local name -> the dotted module path it stands for
        self.jit_depth = 0  # > 0 inside a @triton.jit function

    def refuse(self, node: ast.AST, reason: str) -> None:
        self.problems.append((getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1, reason))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if _host_compute(full):
                self.refuse(node, f"from {module} import {alias.name}: {_why(full)}")
                continue
            self.aliases[alias.asname or alias.name] = full

    def visit_Assign(self, node: ast.Assign) -> None:
        # F = torch.nn.functional: the alias is refused where it is made (visit_Attribute), and
        # a plain alias of a module (T = torch) is followed.
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            dotted = _dotted(node.value, self.aliases)
            if dotted is not None and not _host_compute(dotted):
                self.aliases[node.targets[0].id] = dotted
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = _dotted(node, self.aliases)
        inner = _dotted(node.value, self.aliases) if isinstance(node.value, ast.Attribute) else None
        if dotted is not None and _host_compute(dotted) and not (inner is not None and _host_compute(inner)):
            self.refuse(node, f"{dotted}: {_why(dotted)}")
        elif dotted is None and node.attr in HOST_COMPUTE and not self.jit_depth:
            # a tensor method on the host: q.matmul(k), s.softmax(-1), x.exp()
            self.refuse(node, f"the tensor method .{node.attr}() on the host: {_why(node.attr)}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        full = self.aliases.get(node.id)
        if full is not None and full != node.id and _host_compute(full) and isinstance(node.ctx, ast.Load):
            self.refuse(node, f"{node.id} ({full}): {_why(full)}")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self.jit_depth:
            self.refuse(node, "the @ operator on the host: a matrix product outside the Triton kernels")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.MatMult) and not self.jit_depth:
            self.refuse(node, "the @= operator on the host: a matrix product outside the Triton kernels")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(node.args) > 1:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and (
                    name.value in HOST_COMPUTE or name.value in {p.rsplit(".", 1)[1] for p in HOST_NAMESPACES}):
                self.refuse(node, f"{func.id}(..., {name.value!r}): {_why(name.value)}")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        jit = any(_decorator_name(d, self.aliases) in _TRITON_DECORATORS for d in node.decorator_list)
        self.jit_depth += jit
        self.generic_visit(node)
        self.jit_depth -= jit

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def _why(name: str) -> str:
    return (f"{name.rsplit('.', 1)[-1]} would compute (part of) the answer in torch instead of the Triton kernel; "
            "a kernel module computes scores, softmax and both products in @triton.jit code")


def _decorator_name(node: ast.expr, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    return _dotted(node, aliases)


def contract_problems(tree: ast.Module) -> list[tuple[int, int, str]]:
    """What the module contract asks for and the module lacks: the top-level names, ``launch``
    and a ``@triton.jit`` kernel."""
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    assigned = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    kernels = [f for f in functions.values() if any(_decorator_name(d, aliases) == "triton.jit" for d in f.decorator_list)]
    out = []
    end = max((getattr(node, "end_lineno", 1) or 1 for node in tree.body), default=1)
    for name in CONTRACT_NAMES:
        if name not in assigned:
            out.append((end, 1, f"the module does not define {name} at top level (the module contract asks for it)"))
    if "launch" not in functions:
        out.append((end, 1, "the module has no top-level def launch(q, k, v, o, lse, *, scale, ...)"))
    if not kernels:
        out.append((end, 1, "the module defines no top-level @triton.jit function: the attention must be computed by a Triton kernel"))
    return out


def problems(source: str, *, file: str = "<llm>") -> list[tuple[int, int, str]]:
    """Every (line, col, reason) refused for a kernel module: gate.py's, then this module's; [] when it may run."""
    found = gate.problems(source, file=file)  # raises LLMError when the module does not parse
    tree = ast.parse(source, filename=file)
    rules = _Rules()
    rules.visit(tree)
    return sorted(set(found) | set(rules.problems) | set(contract_problems(tree)))


def check_kernel_source(source: str, *, file: str = "<llm>") -> None:
    """Raise UnsafeCodeError (every refusal with line:col) unless the kernel module passes."""
    found = problems(source, file=file)
    if found:
        raise UnsafeCodeError(found, file=file)
