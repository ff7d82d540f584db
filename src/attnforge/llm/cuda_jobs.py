"""The sandbox job for model-written CUDA kernels (``sandbox.run_isolated(file, verify_cuda_file, ...)``):
the assembled file (attnforge's head, the model's kernels) compiled for the target as attnforge's
own CUDA kernels are (the pipeline lint, nvcc, the SASS report, the fit to the target), its PTX
audited (``cuda_gate.ptx_problems``: entry points, module-scope state, outside calls, traps,
launch directives, cp.async waits against attnforge's own translation), then loaded
for the local GPU and verified with the same verifier (fresh poisoned inputs, odd shapes, both
layouts, the spec's float64 reference).

The answer comes from the kernels by construction: the model writes no host code (attnforge's
loader launches the kernels with the launch facts of the file's head). There is no CPU interpreter
for CUDA: without a GPU the job stops after the compile with an "unverifiable" problem.
"""

from __future__ import annotations

from pathlib import Path

from .kernel_jobs import ModuleVerdict

UNVERIFIABLE = "unverifiable"


def verify_cuda_file(path: Path, spec_fields: dict, target_name: str, params: dict[str, int], abi_source: str) -> ModuleVerdict:
    """``abi_source``: attnforge's own translation of the program, whose compiled PTX the model's
    is held against (``cuda_gate.ptx_problems``)."""
    import torch

    from ..backends.cuda.compile import arch_of, compile_cubin, compile_for_target
    from ..backends.cuda.module import read_meta
    from .cuda_gate import ptx_problems
    from ..backends.cuda.kernel import CudaKernel
    from ..compile_report import check_fits
    from ..errors import AttnforgeError, DoesNotFitError
    from ..spec import AttentionSpec
    from ..targets import get_target
    from ..verify import verify

    spec = AttentionSpec.from_dict(spec_fields)
    target = get_target(target_name)
    verdict = ModuleVerdict()
    try:
        verdict.compile_reports = compile_for_target(Path(path).read_text(), target, None)
    except AttnforgeError as err:
        verdict.problems.append(("compile", err.message))
        return verdict
    for report in verdict.compile_reports:
        try:
            check_fits(report, target)
        except DoesNotFitError as err:
            verdict.problems.append(("does-not-fit", err.message))
    source = Path(path).read_text()
    ptx, own_ptx = (compile_cubin(text, arch_of(target))[1] for text in (source, abi_source))  # (cached by content)
    verdict.problems += [("ptx", text) for text in ptx_problems(ptx, own_ptx, read_meta(source))]
    if verdict.problems:
        return verdict
    if not torch.cuda.is_available():
        verdict.problems.append((UNVERIFIABLE, f"the kernels compile for {target.name}, but this machine has no CUDA GPU to verify them on "
                                               "(CUDA has no CPU interpreter)"))
        return verdict
    try:
        kernel = CudaKernel(path)
    except AttnforgeError as err:
        verdict.problems.append(("load", err.message))
        return verdict
    verdict.verification = verify(kernel, spec, params, target=target)
    failed = [c for c in verdict.verification.cases if not c.passed]
    if failed:
        verdict.problems.append(("verify", f"{len(failed)} of {len(verdict.verification.cases)} verification case(s) fail"))
    return verdict
