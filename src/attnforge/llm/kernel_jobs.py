"""The jobs that run a model-written kernel module inside the sandbox's child process
(``sandbox.run_untrusted(source, verify_module, ...)``); nothing here runs model code in
attnforge's own process.

``verify_module`` loads the module as the pipeline loads its own kernels
(``backends.triton.kernel.GeneratedKernel``), verifies it with the same verifier
(``attnforge.verify.verify``: fresh poisoned inputs, odd shapes, both layouts, the spec's float64
reference), and checks that the answer comes from Triton:

* every module-level ``@triton.jit`` kernel is wrapped to count its launches; a module whose
  ``launch`` starts none is refused;
* the cases are run once more with every kernel switched off (a launch does nothing): if the
  outputs still match the reference, the host computed them, and the module is refused;
* each kernel is compiled ahead of time for the target with the arguments it was launched with
  (``backends.triton.compile.compile_for_target``), so shared memory, registers, spills and
  tensor-core use are reported, and a kernel that does not fit the target is refused, as for
  attnforge's own kernels.

``time_module`` times a module on the GPU (for ``--optimize``).
"""

from __future__ import annotations

import inspect
import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compile_report import CompileReport
from ..verify import VerifyRecord

_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int8": "i8", "int16": "i16",
          "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


@dataclass
class LaunchRecord:
    """How one kernel was launched (its first launch): enough to compile it ahead of time."""

    kernel: str
    count: int = 0
    signature: dict[str, str] = field(default_factory=dict)  # argument -> Triton type, constexprs left out
    constexprs: dict[str, Any] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3
    divisible: tuple[str, ...] = ()  # integer arguments that were multiples of 16
    ones: tuple[str, ...] = ()  # integer arguments equal to 1 (Triton's JIT makes them constants)
    unsupported: str | None = None  # why it cannot be compiled ahead of time (an argument of an unknown kind)


@dataclass
class ModuleVerdict:
    """What the sandboxed run found. ``problems``: (kind, text) in the order found; empty when
    the module is verified, launches Triton and (when compiled) fits the target."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    verification: VerifyRecord | None = None
    host_only: VerifyRecord | None = None  # the cases with every kernel switched off
    launches: dict[str, LaunchRecord] = field(default_factory=dict)
    compile_reports: list[CompileReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.verification is not None and self.verification.passed


class _Recorder:
    """Wraps the innermost ``run`` of every module-level Triton kernel: counts launches, records
    the first one's arguments, and can switch the kernels off."""

    def __init__(self, module: Any):
        from ..backends.triton.launches import module_kernels

        self.off = False
        self.records: dict[str, LaunchRecord] = {}
        for name, (inner, python_fn) in module_kernels(module).items():
            self._wrap(name, inner, python_fn)

    def _wrap(self, name: str, inner: Any, python_fn: Any) -> None:
        original = inner.run
        record = self.records[name] = LaunchRecord(name)
        params = inspect.signature(python_fn).parameters

        def run(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            if warmup:
                return original(*args, grid=grid, warmup=warmup, **kwargs)
            record.count += 1
            if record.count == 1:
                _note_arguments(record, params, args, kwargs)
            if self.off:
                return None
            return original(*args, grid=grid, warmup=warmup, **kwargs)

        inner.run = run

    @property
    def total(self) -> int:
        return sum(r.count for r in self.records.values())


def _note_arguments(record: LaunchRecord, params: Any, args: tuple, kwargs: dict) -> None:
    names = list(params)
    options = {k: v for k, v in kwargs.items() if k not in params}
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in params})
    for name, p in params.items():
        if name not in values and p.default is not inspect.Parameter.empty:
            values[name] = p.default
    record.num_warps = int(options.get("num_warps", 4))
    record.num_stages = int(options.get("num_stages", 3))
    constexpr = {name for name, p in params.items() if "constexpr" in str(p.annotation)}
    divisible, ones = [], []
    for name, value in values.items():
        if name in constexpr or value is None:
            record.constexprs[name] = getattr(value, "value", value)
            continue
        kind = _triton_type(value)
        if kind is None:
            record.unsupported = f"argument {name} is a {type(value).__name__}"
            continue
        record.signature[name] = kind
        if kind in ("i32", "i64") and int(value) % 16 == 0:
            divisible.append(name)
        if kind in ("i32", "i64") and int(value) == 1:
            ones.append(name)
    record.divisible, record.ones = tuple(divisible), tuple(ones)


def _triton_type(value: Any) -> str | None:
    import torch

    if isinstance(value, torch.Tensor):
        kind = _TYPES.get(str(value.dtype).removeprefix("torch."))
        return None if kind is None else "*" + kind
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2 ** 31) <= value < 2 ** 31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def verify_module(path: Path, spec_fields: dict, target_name: str, params: dict[str, int], interpret: bool | None,
                  compile_for_target: bool = True) -> ModuleVerdict:
    """The sandbox job: load, verify, knock the kernels out, compile for the target (see the module doc)."""
    from ..backends.triton.kernel import GeneratedKernel
    from ..errors import AttnforgeError
    from ..spec import AttentionSpec
    from ..targets import get_target
    from ..verify import verification_shapes, verify

    spec = AttentionSpec.from_dict(spec_fields)
    target = get_target(target_name)
    verdict = ModuleVerdict()
    try:
        kernel = GeneratedKernel(path, interpret=interpret)
    except AttnforgeError as err:
        verdict.problems.append(("import", err.message + _module_frames(err.__cause__, path)))
        return verdict
    wrong = [f"{name} = {got!r} (the spec needs {want!r})" for name, got, want in (
        ("HEAD_DIM", kernel.head_dim, spec.head_dim), ("HEAD_DIM_V", kernel.head_dim_v, spec.head_dim_v)) if got != want]
    if wrong:
        verdict.problems.append(("contract", "the module sets " + "; ".join(wrong)))
        return verdict
    recorder = _Recorder(kernel.module)
    if not recorder.records:
        verdict.problems.append(("no-kernel", "the module has no module-level @triton.jit kernel to launch"))
        return verdict
    verdict.verification = verify(kernel, spec, params, target=target)
    verdict.launches = recorder.records
    if recorder.total == 0:
        verdict.problems.append(("no-kernel", "launch() never launched a @triton.jit kernel: the answer must come from Triton"))
        return verdict
    failed = [c for c in verdict.verification.cases if not c.passed]
    if failed:
        verdict.problems.append(("verify", f"{len(failed)} of {len(verdict.verification.cases)} verification case(s) fail"))
    # The answer with every kernel switched off: it must be gone.
    recorder.off = True
    shapes = verification_shapes(spec, params, native=not kernel.interpret)[:2]
    verdict.host_only = verify(kernel, spec, params, target=target, shapes=shapes, seed=1000)
    recorder.off = False
    passed = [c for c in verdict.host_only.cases if c.passed]
    if passed:
        verdict.problems.append(("host-compute", f"with its Triton kernels switched off, launch() still produces the right answer "
                                                 f"(case {passed[0].shape}): the host computes it, not the kernel"))
    if compile_for_target:
        _compile(path, recorder.records, target, verdict)
    return verdict


def _compile(path: Path, records: dict[str, LaunchRecord], target: Any, verdict: ModuleVerdict) -> None:
    """Each launched kernel compiled for ``target`` with the arguments of its first launch."""
    from ..backends.triton.compile import compile_for_target
    from ..backends.triton.kernel import GeneratedKernel
    from ..compile_report import check_fits
    from ..errors import AttnforgeError, DoesNotFitError

    launched = {name: r for name, r in records.items() if r.count}
    if not launched:
        return
    try:
        jit = GeneratedKernel(path, interpret=False).module
    except AttnforgeError as err:
        verdict.problems.append(("compile", err.message))
        return
    for name, record in launched.items():
        if record.unsupported:
            verdict.notes.append(f"{name} was not compiled ahead of time for {target.name}: {record.unsupported}")
            continue
        fn = getattr(jit, name)
        while not hasattr(fn, "params") and hasattr(fn, "fn"):  # through autotune/heuristics wrappers
            fn = fn.fn
        # As Triton's JIT specialises at launch: an integer argument equal to 1 (a contiguous
        # innermost stride) becomes a constant, unless the kernel asks it not to.
        keep = {p.name for p in getattr(fn, "params", []) if getattr(p, "do_not_specialize", False)}
        signature = {k: v for k, v in record.signature.items() if k not in record.ones or k in keep}
        constexprs = {**record.constexprs, **{k: 1 for k in record.ones if k not in keep}}
        try:
            report, _ = compile_for_target(fn, signature, constexprs, target, record.num_warps,
                                           record.num_stages, divisible=frozenset(record.divisible))
            verdict.compile_reports.append(report)
            check_fits(report, target)
        except DoesNotFitError as err:
            verdict.problems.append(("compile", f"{name} does not fit {target.name}: {err.message}"))
        except AttnforgeError as err:
            cause = err.__cause__
            detail = next((line for line in str(cause).splitlines() if line.strip()), "") if cause is not None else ""
            verdict.problems.append(("compile", err.message + (f": {detail}" if detail and detail not in err.message else "")))


def _module_frames(err: BaseException | None, path: Path, limit: int = 8) -> str:
    """The lines of a traceback that are in the model's module (where its own code failed)."""
    if err is None:
        return ""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).name == path.name][-limit:]
    lines = [f"  line {f.lineno}, in {f.name}: {f.line}" for f in frames]
    return ("\n" + "\n".join(lines)) if lines else ""


def time_module(path: Path, spec_fields: dict) -> float:
    """The sandbox job for ``--optimize``: the median time in milliseconds of one ``launch`` on
    the spec's own sizes, natively on the GPU (``backends.triton.timing``)."""
    import torch

    from ..backends.triton.kernel import GeneratedKernel
    from ..backends.triton.timing import median_ms
    from ..dtypes import torch_dtype
    from ..spec import AttentionSpec

    spec = AttentionSpec.from_dict(spec_fields)
    kernel = GeneratedKernel(path, interpret=False)
    dtype = torch_dtype(spec.dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(spec.batch, spec.heads, spec.seqlen_q, spec.head_dim, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(spec.batch, spec.kv_heads, spec.seqlen_k, spec.head_dim, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(spec.batch, spec.kv_heads, spec.seqlen_k, spec.head_dim_v, device="cuda", dtype=dtype, generator=g)
    o = torch.empty(spec.batch, spec.heads, spec.seqlen_q, spec.head_dim_v, device="cuda", dtype=dtype)
    lse = torch.empty(spec.batch, spec.heads, spec.seqlen_q, device="cuda", dtype=torch.float32)
    scalars: dict[str, Any] = dict(spec.runtime_scalars())
    if spec.alibi_slopes is not None:
        scalars["alibi_slopes"] = torch.tensor(spec.alibi_slopes, dtype=torch.float32, device="cuda")
    ms = median_ms(lambda: kernel.launch(q, k, v, o, lse, **scalars))
    if not math.isfinite(ms) or ms <= 0:
        raise RuntimeError(f"the timing came out as {ms!r} ms")
    return ms
