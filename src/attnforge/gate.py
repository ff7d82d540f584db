"""The whole gate, re-run on a kernel directory written by ``attnforge generate``.

After a hand edit, or for a kernel someone (or an LLM) wrote: the directory's TL program is
checked for the target and judged against the spec (claims, then numbers in float64), and its
kernel source is loaded and verified against the spec's reference (natively where a GPU can run
it, else in the interpreter). The spec and target come from the directory's report.json unless
given. ``attnforge verify DIR`` and ``attnforge selftest`` both use ``verify_directory``.

A kernel module a model wrote (report.json's "llm" section says so: ``--mode direct`` or
``--translate llm``) is never imported here: it goes through the LLM path's static gate and is
verified in the sandbox's child process, as when it was generated (``llm/kernel_jobs``; CUDA
kernels: ``llm/cuda_gate``, whose head must be attnforge's own, then ``llm/cuda_jobs``). A
direct module has no TL program; its gate is the module's alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .backends import backend_for_directory
from .errors import AttnforgeError, TLCheckError
from .judge import JudgeError, interpret_against_spec, interpret_shapes
from .report import KERNEL_TL
from .spec import AttentionSpec
from .targets import Target, get_target
from .tl.checker import check
from .tl.harness import RunReport
from .tl.parser import parse
from .verify import CaseResult, VerifyRecord, verify


@dataclass
class DirectoryVerdict:
    directory: Path
    spec: AttentionSpec
    target: Target
    step: str = "check"  # the last step reached: check, interpret, verify
    interpret: list[RunReport] = field(default_factory=list)
    verification: VerifyRecord | None = None
    error: str | None = None  # why the gate refused, when it did
    model: str | None = None  # who wrote the kernel module, when a model did (it ran in the sandbox)

    @property
    def ok(self) -> bool:
        return self.error is None and self.verification is not None and self.verification.passed


def _from_report(directory: Path) -> dict:
    path = directory / "report.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise AttnforgeError(f"{path} is not a readable report: {err}", where=str(path),
                             hint="give the spec and target on the command line (--spec FILE or spec flags, --target)") from None


def verify_directory(directory: str | Path, *, spec: AttentionSpec | None = None, target: Target | None = None,
                     interpret: bool | None = None, progress: Callable[[int, int, CaseResult], None] | None = None,
                     fail_fast: bool = False) -> DirectoryVerdict:
    """Check, judge and verify the kernel in ``directory``; never raises for what the gate
    refuses (see ``verdict.error`` and ``verdict.step``), only for a directory it cannot read.
    ``fail_fast``: stop verifying at the first failing case."""
    directory = Path(directory)
    if not directory.is_dir():
        raise AttnforgeError(f"no such kernel directory: {directory}", where=str(directory), hint="give a directory 'attnforge generate --out DIR' wrote")
    report = _from_report(directory)
    if spec is None:
        if "spec" not in report:
            raise AttnforgeError(f"{directory} has no report.json with the spec", where=str(directory), hint="give the spec: --spec FILE or spec flags")
        spec = AttentionSpec.from_dict(report["spec"])
    if target is None:
        if "target" not in report:
            raise AttnforgeError(f"{directory} has no report.json naming the target", where=str(directory), hint="give --target NAME")
        target = get_target(report["target"]["name"])
    backend = backend_for_directory(directory)
    tl_path = directory / KERNEL_TL
    if not tl_path.is_file() and not _direct(report):
        raise AttnforgeError(f"{directory} has no {KERNEL_TL}", where=str(directory), hint="the gate judges the TL program the kernel was translated from")
    verdict = DirectoryVerdict(directory, spec, target, model=model_writer(report))
    try:
        params: dict[str, int] = {}
        program = None
        if tl_path.is_file():
            program = parse(tl_path.read_text(), file=str(tl_path))
            result = check(program, target, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file=str(tl_path))
            if not result.ok:
                raise TLCheckError(result.errors, file=str(tl_path))
            params = {p.name: p.value for k in program.kernels for p in k.params}
            verdict.step = "interpret"
            verdict.interpret = interpret_against_spec(program, spec, interpret_shapes(spec, params, program), file=str(tl_path))
        verdict.step = "verify"
        if verdict.model is not None and backend.name == "cuda" and program is not None:
            _verify_model_cuda(directory / backend.source_file, spec, target, params, program, verdict, progress)
        elif verdict.model is not None:
            _verify_model_module(directory / backend.source_file, spec, target, params, interpret, verdict, progress)
        else:
            kernel = backend.load(directory / backend.source_file, interpret=interpret)
            verdict.verification = verify(kernel, spec, params, target=target, progress=progress, fail_fast=fail_fast)
    except JudgeError as err:
        verdict.interpret = err.reports
        verdict.error = err.render()
    except AttnforgeError as err:  # a program that does not parse or check, a module that does not load
        verdict.error = err.render()
    if verdict.verification is not None and not verdict.verification.passed:
        bad = [c for c in verdict.verification.cases if not c.passed]
        ran = len(verdict.verification.cases)
        verdict.error = f"{len(bad)} of {ran} case(s) run fail{' (stopped at the first)' if fail_fast else ''}; first: {bad[0].shape}: {bad[0].error or bad[0].worst}"
    return verdict


def _llm_section(report: dict) -> dict:
    section = report.get("llm")
    return section if isinstance(section, dict) else {}


def _direct(report: dict) -> bool:
    """Whether the directory holds a module a model wrote straight from the spec (no TL program)."""
    llm = _llm_section(report)
    stages = {r.get("stage") for r in llm.get("rounds") or [] if isinstance(r, dict)}
    return (llm.get("options") or {}).get("mode") == "direct" or ("direct" in stages and "tl" not in stages)


def model_writer(report: dict) -> str | None:
    """The model (report.json's llm.client) that wrote the directory's kernel module, or None
    when attnforge's translator wrote it (``--mode tl --translate builtin``: the model wrote
    only the TL program)."""
    llm = _llm_section(report)
    if not llm:
        return None
    stages = {r.get("stage") for r in llm.get("rounds") or [] if isinstance(r, dict)}
    if (llm.get("options") or {}).get("translate") == "llm" or _direct(report) or stages & {"direct", "translate"}:
        return str(llm.get("client") or "a model")
    return None


# The sandbox's wall-clock limit for a model-written module's whole gate (as generate --llm's default).
MODEL_MODULE_TIMEOUT_S = 900.0


def _verify_model_cuda(path: Path, spec: AttentionSpec, target: Target, params: dict[str, int], program,
                       verdict: DirectoryVerdict, progress: Callable[[int, int, CaseResult], None] | None) -> None:
    """Model-written CUDA kernels: the head must be attnforge's for the TL program, the kernels pass
    the CUDA gate, then compile and verification run in the sandbox's child process."""
    from .backends import get_backend
    from .llm import cuda_gate
    from .llm.cuda_jobs import verify_cuda_file
    from .llm.pipeline import gpu_present
    from .llm.sandbox import run_isolated
    from .llm.stage2 import CUDA_FILE, sandbox_limits

    source = path.read_text(encoding="utf-8", errors="replace")
    abi = get_backend("cuda").translate(program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
    cuda_gate.check_cuda_file(source, abi, file=str(path))
    found = run_isolated(source, verify_cuda_file, spec.to_dict(), target.name, params, abi,
                         limits=sandbox_limits(MODEL_MODULE_TIMEOUT_S, gpu=gpu_present()), file_name=CUDA_FILE)
    _take(found, verdict, progress)


def _verify_model_module(path: Path, spec: AttentionSpec, target: Target, params: dict[str, int], interpret: bool | None,
                         verdict: DirectoryVerdict, progress: Callable[[int, int, CaseResult], None] | None) -> None:
    """A model-written module: the static gate, then verification, the kernels-off check and the
    compile for the target in the sandbox's child process (raises LLMError when refused)."""
    from .llm import kernel_rules
    from .llm.kernel_jobs import verify_module
    from .llm.pipeline import gpu_present
    from .llm.sandbox import run_untrusted
    from .llm.stage2 import MODULE_FILE, sandbox_limits

    source = path.read_text(encoding="utf-8", errors="replace")
    kernel_rules.check_kernel_source(source, file=str(path))
    found = run_untrusted(source, verify_module, spec.to_dict(), target.name, params, interpret, True,
                          limits=sandbox_limits(MODEL_MODULE_TIMEOUT_S, gpu=gpu_present()), file_name=MODULE_FILE)
    _take(found, verdict, progress)


def _take(found, verdict: DirectoryVerdict, progress: Callable[[int, int, CaseResult], None] | None) -> None:
    """A sandboxed verdict into the directory's: its verification, and its first problem as the error."""
    verdict.verification = found.verification
    if found.verification is not None and progress is not None:
        for i, case in enumerate(found.verification.cases, 1):
            progress(i, len(found.verification.cases), case)
    if found.problems:
        kind, text = found.problems[0]
        more = f" (and {len(found.problems) - 1} more)" if len(found.problems) > 1 else ""
        verdict.error = f"{kind}: {text}{more}"
