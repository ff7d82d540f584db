"""The main job: spec + target -> a verified Triton kernel and its reports, in one directory.

Steps (each timed, each failure named): plan (TL program and parameters), check (TL checker),
interpret (the TL program itself, exactly in float64, against the reference), translate (Triton
module), compile (for the target, no GPU needed: shared memory, registers, spills, instructions),
verify (the kernel against the float64 reference: natively on a GPU, else in Triton's
interpreter), report. A compile that does not fit the target sends the planner to its next
parameter candidate. Whatever was produced before a failure stays in the directory.
"""

from __future__ import annotations

import functools
import json
import platform
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from . import __version__
from .compile_target import CompileReport, check_fits, compile_for_target
from .errors import AttnforgeError, DoesNotFitError
from .kernel import GeneratedKernel, gpu_available
from .plan.builtin import Plan, candidates, plan
from .spec import AttentionSpec
from .targets import Target
from .tl import harness
from .tl.printer import print_program
from .translate import translate
from .verify import VerifyRecord, scalar_arguments, verify

STEPS = ("plan", "check", "interpret", "translate", "compile", "verify", "report")
KERNEL_TL = "kernel.tl"
KERNEL_PY = "kernel_triton.py"


@dataclass
class StepResult:
    name: str
    ok: bool
    seconds: float
    detail: str


@dataclass
class GenerateResult:
    spec: AttentionSpec
    target: Target
    out: Path
    steps: list[StepResult] = field(default_factory=list)
    plan: Plan | None = None
    compile_reports: list[CompileReport] = field(default_factory=list)
    interpret_runs: list[dict] = field(default_factory=list)
    verification: VerifyRecord | None = None
    rejected: list[str] = field(default_factory=list)
    failed_step: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.failed_step is None


class StepFailed(Exception):
    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step


Progress = Callable[[str, str], None]  # (event, text): event is "start", "ok", "fail" or "info"


def _interpret_shapes(spec: AttentionSpec, params: dict[str, int]) -> list[harness.Shape]:
    """Small shapes that exercise every loop of the program: tails in both tiles, Sq != Sk."""
    g = spec.group_size
    bm, bn = params.get("BM", 64), params.get("BN", 64)
    d, dv = spec.head_dim, spec.head_dim_v
    if spec.is_decode:
        return [harness.Shape(1, 2 * g, 2, 1, (2 * params.get("NSPLIT", 1) + 1) * bn + 3, d, dv)]
    return [harness.Shape(1, g, 1, bm + 13, 2 * bn + 7, d, dv), harness.Shape(1, g, 1, 2 * bm + 3, bn + 5, d, dv)]


def generate(
    spec: AttentionSpec,
    target: Target,
    out: str | Path,
    *,
    run_verification: bool = True,
    interpret: bool | None = None,
    tma: bool = True,
    progress: Progress | None = None,
) -> GenerateResult:
    """Run every step; never raises for a step's failure (see ``result.failed_step``).
    ``tma=False`` keeps pointer loads where TMA descriptors would be used; ``interpret`` forces
    (True) or forbids (False) Triton's interpreter for verification (default: when no GPU)."""
    return _Pipeline(spec, target, Path(out), tma, interpret, progress).run(run_verification)


class _Pipeline:
    """One generate run: each step is a method returning a one-line summary or raising."""

    def __init__(self, spec: AttentionSpec, target: Target, out: Path, tma: bool, interpret: bool | None, progress: Progress | None):
        out.mkdir(parents=True, exist_ok=True)
        self.spec, self.target, self.out, self.tma, self.interpret = spec, target, out, tma, interpret
        self.say: Progress = progress or (lambda _event, _text: None)
        self.result = GenerateResult(spec, target, out)
        self.module = None
        self.current = "plan"

    def run(self, run_verification: bool) -> GenerateResult:
        result, start = self.result, time.perf_counter()
        try:
            self.plan_until_it_fits()
            for r in result.compile_reports:
                if "fma-only" in r.instructions:  # has GEMMs, no tensor-core instruction (a merge kernel has no GEMM)
                    self.say("info", f"note: {r.kernel} uses no tensor-core instructions on {self.target.name} ({self.target.sm}): " + (r.notes[0] if r.notes else ""))
            if run_verification:
                self.step("verify", self.verify)
        except StepFailed as err:
            result.failed_step, result.error = err.step, str(err)
        except AttnforgeError as err:
            result.failed_step, result.error = self.current, err.render()
        except Exception as err:  # an unexpected failure still leaves a report naming the step
            result.failed_step, result.error = self.current, f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}"
        if result.failed_step:
            result.steps.append(StepResult(result.failed_step, False, 0.0, result.error or ""))
            self.say("fail", f"{result.failed_step} failed: {result.error}")
        # The reports are written, timed, then written again so that they list their own step.
        t0 = time.perf_counter()
        write_reports(result, total_seconds=time.perf_counter() - start)
        result.steps.append(StepResult("report", True, round(time.perf_counter() - t0, 3), "report.json, report.md"))
        write_reports(result, total_seconds=time.perf_counter() - start)
        return result

    def step(self, name: str, fn: Callable[[], str]) -> None:
        self.current = name
        self.say("start", name)
        t0 = time.perf_counter()
        detail = fn()
        self.result.steps.append(StepResult(name, True, round(time.perf_counter() - t0, 3), detail))
        self.say("ok", f"{name}: {detail}")

    def plan_until_it_fits(self) -> None:
        """plan .. compile; a compile that does not fit the target moves to the next candidate."""
        skip, total = 0, len(candidates(self.spec, self.target, tma=self.tma)[1])
        while True:
            self.step("plan", functools.partial(self.plan, skip))
            self.step("check", self.check)
            self.step("interpret", self.interpret_tl)
            self.step("translate", self.translate)
            try:
                self.step("compile", self.compile)
                return
            except DoesNotFitError as err:  # other compile failures are not a matter of tile sizes
                p = self.result.plan
                self.result.rejected.append(f"{_fmt(p.params)}: {err}")
                skip += 1 + len(p.rejected)
                if skip >= total:
                    raise StepFailed("compile", f"no parameter candidate fits {self.target.name}; last: {err}") from err
                self.say("info", f"compile: does not fit ({err}); trying the planner's next candidate")

    # ---------------------------------------------------------------- the steps
    def plan(self, skip: int) -> str:
        p = self.result.plan = plan(self.spec, self.target, skip=skip, tma=self.tma)
        self.result.rejected += list(p.rejected)
        return f"{p.kind} program, {_fmt(p.params)} ({p.reasons[0]})"

    def check(self) -> str:
        p = self.result.plan
        (self.out / KERNEL_TL).write_text(p.source)
        warnings = [f for f in p.check.findings if f.severity == "warning"]
        res = "; ".join(f"{r.kernel}: ~{(r.smem_bytes or 0) // 1024} KiB shared, ~{r.regs_per_thread} registers/thread (estimates)" for r in p.check.resources)
        return f"clean for {self.target.name}" + (f", {len(warnings)} warning(s)" if warnings else "") + (f" ({res})" if res else "")

    def interpret_tl(self) -> str:
        """The TL program itself, exactly in float64, on small shapes: its logic before any GPU code."""
        p = self.result.plan
        declared = {name for k in p.program.kernels for name in k.scalars}
        scalars = {k: v for k, v in scalar_arguments(self.spec).items() if k in declared}
        runs = []
        for shape in _interpret_shapes(self.spec, p.params):
            rep = harness.run_and_compare(p.program, shape, dtype=None, scalars=scalars, file=KERNEL_TL)
            runs.append({"shape": str(shape), "err_o": rep.err_o, "err_lse": rep.err_lse, "tol_o": rep.tolerance, "tol_lse": rep.tolerance_lse, "passed": rep.passed})
            if not rep.passed:
                raise StepFailed("interpret", f"the TL program is wrong at {shape}: err(O) {rep.err_o:.3g} (bound {rep.tolerance:g}), err(LSE) {rep.err_lse:.3g}")
        self.result.interpret_runs = runs
        return f"{len(runs)} shape(s) exact in float64, max err(O) {max(r['err_o'] for r in runs):.2g}"

    def translate(self) -> str:
        spec = self.spec
        self.module = translate(self.result.plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file=KERNEL_TL)
        (self.out / KERNEL_PY).write_text(self.module.source)
        return f"{KERNEL_PY}: {len(self.module.source.splitlines())} lines, kernels {', '.join(i.name for i in self.module.kernels)}"

    def compile(self) -> str:
        reports = self.result.compile_reports = []
        loaded = GeneratedKernel(self.out / KERNEL_PY, interpret=False)
        problems = []
        for info in self.module.kernels:
            sig, const = info.signature()
            rep, _ = compile_for_target(getattr(loaded.module, info.name), sig, const, self.target, info.num_warps, info.num_stages,
                                        keep_dir=self.out / "build", divisible=info.divisible_strides((self.spec.head_dim, self.spec.head_dim_v)))
            reports.append(rep)
            try:
                check_fits(rep, self.target)
            except DoesNotFitError as err:
                problems.append(str(err))
        if problems:
            raise DoesNotFitError("; ".join(problems), where=f"compile for {self.target.name}")
        return "; ".join(f"{r.kernel}: {r.registers} regs, {r.shared_bytes // 1024} KiB shared, {r.spill_bytes} B spills, {'+'.join(r.instructions)}" for r in reports)

    def verify(self) -> str:
        kernel = GeneratedKernel(self.out / KERNEL_PY, interpret=self.interpret)

        def case_done(done: int, total: int, case) -> None:
            mark = "ok" if case.passed else "FAIL"
            self.say("info", f"  verify {done}/{total} {case.shape}: err(O) {case.err_o:.2e} (bound {case.tol_o:.0e}), err(LSE) {case.err_lse:.2e} (bound {case.tol_lse:.1e}) {mark}")
        rec = self.result.verification = verify(kernel, self.spec, self.result.plan.params, progress=case_done)
        bad = [c for c in rec.cases if not c.passed]
        if bad:
            first = bad[0]
            raise StepFailed("verify", f"{len(bad)} of {len(rec.cases)} case(s) fail on {rec.device}; first: {first.shape} err(O) {first.err_o:.3g} "
                                       f"(bound {first.tol_o:g}), err(LSE) {first.err_lse:.3g}" + (f", {first.error}" if first.error else ""))
        return f"{len(rec.cases)} cases pass on {rec.device}; max err(O) {rec.max_err_o:.2e}, max err(LSE) {rec.max_err_lse:.2e}"


def _fmt(params: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _versions() -> dict[str, str]:
    import torch
    import triton
    return {"attnforge": __version__, "triton": triton.__version__, "torch": torch.__version__, "python": platform.python_version()}


def report_dict(result: GenerateResult, total_seconds: float) -> dict:
    p = result.plan
    return {
        "ok": result.ok,
        "failed_step": result.failed_step,
        "error": result.error,
        "spec": result.spec.to_dict(),
        "spec_summary": result.spec.describe(),
        "target": {"name": result.target.name, "sm": result.target.sm, "product": result.target.product},
        "versions": _versions(),
        "gpu_present": gpu_available(),
        "plan": None if p is None else {"kind": p.kind, "parameters": p.params, "reasons": list(p.reasons)},
        "rejected_candidates": result.rejected,
        "tl": None if p is None else print_program(p.program),
        "check": None if p is None else {
            "findings": [str(f) for f in p.check.findings],
            "resources": [asdict(r) for r in p.check.resources],
        },
        "interpret": result.interpret_runs,
        "compile": [r.to_dict() for r in result.compile_reports],
        "verification": None if result.verification is None else result.verification.to_dict(),
        "steps": [asdict(s) for s in result.steps],
        "total_seconds": round(total_seconds, 3),
        "files": {"tl": KERNEL_TL, "triton": KERNEL_PY},
    }


def write_reports(result: GenerateResult, total_seconds: float) -> None:
    data = report_dict(result, total_seconds)
    (result.out / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (result.out / "report.md").write_text(report_markdown(data))


def report_markdown(d: dict) -> str:
    status = "verified" if d["ok"] and d["verification"] else ("generated (not verified)" if d["ok"] else f"FAILED at step {d['failed_step']}")
    lines = [f"# attnforge kernel: {d['spec_summary']}", "",
             f"- target: {d['target']['name']} ({d['target']['sm']}, {d['target']['product']})",
             f"- status: **{status}**",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in d["versions"].items()), ""]
    if d["error"]:
        lines += ["## Failure", "", "```", d["error"], "```", ""]
    if d["plan"]:
        lines += ["## Plan", "", f"{d['plan']['kind']} program; parameters: " + ", ".join(f"{k}={v}" for k, v in d["plan"]["parameters"].items()), ""]
        lines += [f"- {r}" for r in d["plan"]["reasons"]]
        lines += [f"- rejected: {r}" for r in d["rejected_candidates"]] + [""]
    lines += ["## Steps", "", "| step | ok | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {s['name']} | {'yes' if s['ok'] else 'NO'} | {s['seconds']:.2f} | {s['detail'].splitlines()[0] if s['detail'] else ''} |" for s in d["steps"]]
    lines.append("")
    if d["compile"]:
        lines += ["## Compile", "", "| kernel | target | warps | stages | registers | shared KiB | spill B | instructions |", "|---|---|---|---|---|---|---|---|"]
        for c in d["compile"]:
            lines.append(f"| {c['kernel']} | {c['ptx_target']} | {c['num_warps']} | {c['num_stages']} | {c['registers']} | {c['shared_bytes'] / 1024:.1f} | {c['spill_bytes']} | {', '.join(c['instructions'])} |")
        notes = [n for c in d["compile"] for n in c["notes"]]
        lines += [""] + [f"- {n}" for n in notes] + [""]
    v = d["verification"]
    if v:
        lines += ["## Verification", "", f"On {v['device']}, {v['dtype']}: {'all pass' if v['passed'] else 'FAILURES'}; max err(O) {v['max_err_o']:.3g}, max err(LSE) {v['max_err_lse']:.3g}.", "",
                  "| shape (B x Hq/Hkv x Sq x Sk, layout) | err(O) | bound | err(LSE) | bound | pass |", "|---|---|---|---|---|---|"]
        for c in v["cases"]:
            lines.append(f"| {c['shape']} | {c['err_o']:.3g} | {c['tol_o']:g} | {c['err_lse']:.3g} | {c['tol_lse']:g} | {'yes' if c['passed'] else 'NO'} |")
        lines.append("")
    if d["tl"]:
        lines += ["## TL program", "", "```", d["tl"].rstrip(), "```", ""]
    return "\n".join(lines)
