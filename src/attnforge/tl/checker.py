"""Static checker for TL-Code: names, shapes, data types, memory levels and the target's limits.

This module runs the checks over a whole program and collects their findings; the header checks
live in ``check_header``, the walk of a kernel's statements in ``check_body`` (with the GEMM and
tensor-core rules in ``check_gemm`` and the packed-GQA view rules in ``check_packed``), the
resource estimates in ``resources``.

The checker walks the first and the last program instance symbolically (first and last loop
iteration too). Shapes are compared by evaluating their expressions under two unrelated
assignments of the problem sizes (B, Hq, Hkv, Sq, Sk, D, Dv), of any open parameter and of any
launch-time value: two expressions that agree under both are taken as equal, which catches
``(Sq, D)`` written for ``(Sk, D)`` without a computer-algebra system. Resource estimates use the
real head dims and parameters.

Every finding has a code, a position, a message and a hint written to be acted on, by a person or
an LLM. Codes: TL1xx header, TL2xx names, TL3xx shapes and data types, TL4xx memory levels,
layouts and dataflow, TL5xx target limits.
"""

from __future__ import annotations

import math

from ..abi import ARG_SHAPES
from ..dtypes import FORMATS
from ..targets import Target
from . import nodes as n
from .check_body import KernelCheck
from .check_header import check_header, resolve_target
from .check_info import Info
from .evaluate import evaluate
from .findings import CheckResult, Finding, KernelResources
from .resources import estimate

# Two unrelated assignments of the problem sizes; D/Dv of the first come from the caller.
_PROBE = ({"B": 3, "Hq": 12, "Hkv": 4, "Sq": 1000, "Sk": 1500}, {"B": 5, "Hq": 10, "Hkv": 5, "Sq": 777, "Sk": 333})
_OPEN_PARAM_PROBE = (64, 128)
# A launch-time value (``launch NSPLIT = splits(...)``) may be any count the host picks, so each probe
# gives it a value of its own, unlike the sizes and parameters (a program that is only right for
# some split counts then shows): 6 splits of probe 1's 24 K/V tiles, 7 of probe 2's 6 (one empty).
_LAUNCH_PROBE = (6, 7)


class _Collector:
    """Receives findings (deduplicated across probes) and the register-liveness events of probe 0."""

    def __init__(self):
        self.findings: dict[tuple, Finding] = {}
        self.events: list[tuple] = []
        self.active = True  # liveness is recorded during the first probe only

    def __call__(self, f: Finding) -> None:
        # The second probe only adds findings at places the first did not flag (its numbers differ).
        if not self.active and any(k[:3] == (f.code, f.line, f.col) for k in self.findings):
            return
        self.findings.setdefault((f.code, f.line, f.col, f.message), f)

    def defs(self, kernel, stmt, name, info, loop) -> None:
        if self.active and info.level == "register" and not info.from_shared:
            self.events.append(("def", kernel.name, stmt, name, _bytes(info), loop))

    def operand(self, kernel, stmt, name, info, kdim) -> None:
        if self.active and info.level == "register" and info.from_shared and kdim:
            # Operands streamed from shared memory hold about two MMA K-steps (2 x 16) at a time.
            self.events.append(("frag", kernel.name, stmt, name, int(_bytes(info) * min(1.0, 32 / kdim)), None))


def _bytes(info: Info) -> int:
    return int(math.prod(info.shape) * FORMATS.get(info.dtype, FORMATS["fp32"]).bytes) if info.shape else 4


def _launch_values(kc: KernelCheck, launches: dict[str, tuple[n.Kernel, tuple]], probe_index: int) -> None:
    """Bind the kernel's launch-time values to this probe's value, after checking the arguments
    of their rule (sizes, parameters and scalars; TL203, TL311). The kernels that declare one
    value share it, and the scratch tensors it sizes, so they must compute it from the same
    numbers (TL110)."""
    env = dict(kc.env)  # the rule reads no launch-time value, not even an earlier one
    for v in kc.k.launch:
        args = (kc.value(v.programs, env, f"program count of {v.name}"), kc.value(v.tiles, env, f"K/V tile count of {v.name}"), v.per_sm)
        earlier = launches.get(v.name)
        if earlier is not None and earlier[0] is not kc.k and None not in args + earlier[1] and args != earlier[1]:
            kc.add("TL110", v, f"launch {v.name} = splits{args} here, but splits{earlier[1]} in kernel {earlier[0].name} (probe {probe_index + 1})",
                   f"write the same 'launch {v.name} = splits(...)' in every kernel that declares it: the kernels share its value and the scratch "
                   "tensors it sizes (declare the parameters it reads, such as BN, in each of them)")
        launches.setdefault(v.name, (kc.k, args))
        kc.env[v.name] = _LAUNCH_PROBE[probe_index]


def check(
    program: n.Program,
    target: Target | str | None = None,
    *,
    head_dim: int = 128,
    head_dim_v: int | None = None,
    sketch: bool = False,
    file: str | None = None,
) -> CheckResult:
    """Check every kernel of ``program`` for ``target`` (the header's when None).

    ``head_dim``/``head_dim_v`` bind D and Dv for the resource estimates. With ``sketch=True``
    open parameters are reported as info and the resource checks that need them are skipped.
    """
    collect = _Collector()
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    tgt = resolve_target(program, target, collect)
    open_params = sorted({p.name for k in program.kernels for p in k.open_params()})
    resources: list[KernelResources] = []
    scratch: dict[str, tuple] = {}
    launches: dict[str, tuple[n.Kernel, tuple]] = {}
    written: set[str] = set()
    for probe_index, probe in enumerate(_PROBE):
        collect.active = probe_index == 0
        scratch.clear()  # shapes differ between probes
        launches.clear()
        for kernel in program.kernels:
            env = dict(probe)
            env.update({"D": head_dim, "Dv": head_dim_v} if probe_index == 0 else {"D": head_dim + 24, "Dv": head_dim_v + 8})
            check_header(kernel, collect, sketch, probe_index)
            for p in kernel.params:
                env[p.name] = p.value if p.value is not None else _OPEN_PARAM_PROBE[probe_index]
            # Window sizes are integers (they bound loops); the others are real numbers.
            env.update({name: 37 if name.startswith("window") else 1.0 for name in kernel.scalars})
            tensors = {name: tuple(evaluate(n.Name(d), env) for d in dims) for name, dims in ARG_SHAPES.items()}
            kc = KernelCheck(kernel, tgt, env, collect, tensors, probe_index)
            _launch_values(kc, launches, probe_index)
            for sc in kernel.scratch:
                shape = kc.shape(sc.shape, env, f"dimension of scratch {sc.name}")
                if shape is None:
                    shape = tuple(1 for _ in sc.shape)  # reported; keep checking the views of it
                elif sc.name in scratch and scratch[sc.name] != shape:
                    collect(Finding("TL301", "error", sc.line, sc.col, f"scratch {sc.name} is declared with another shape in an earlier kernel", "declare shared scratch tensors identically in every kernel"))
                scratch[sc.name] = shape
                tensors[sc.name] = shape
            kc.run()
            written |= kc.written
            if probe_index == 0:
                # Resource estimates need every parameter; open ones are reported as TL106 instead.
                resources.append(estimate(kernel, env, tgt, collect, collect.events, bool(kernel.open_params())))
    last = program.kernels[-1]
    if "o" not in written:
        collect(Finding("TL410", "error", last.line, last.col, "no kernel writes the output o", "end with Copy O_r (BM, Dv) at [m, 0] from register to global O"))
    if "lse" not in written:
        collect(Finding("TL410", "warning", last.line, last.col, "no kernel writes the log-sum-exp lse", "store it: Compute LogSumExp m_i, l_i and get lse_r; Copy lse_r (BM) at [m] from register to global LSE"))
    findings = sorted(collect.findings.values(), key=lambda f: (f.line, f.col, f.code))
    return CheckResult(findings, open_params, resources, tgt)


__all__ = ["check", "CheckResult", "Finding", "KernelResources"]
