"""The main job: spec + target -> a verified kernel and its reports, in one directory.

Steps (each timed, each failure named): plan (a TL program and its parameters, from a planner),
check (TL checker), interpret (the TL program itself, exactly in float64, against the
reference), translate (the backend's source), compile (for the target, no GPU needed: shared
memory, registers, spills, instructions), verify (the kernel against the float64 reference:
natively on a GPU, else in the backend's interpreter), report. A compile that does not fit the
target sends the pipeline to the planner's next plan. Whatever was produced before a failure
stays in the directory. A run writes into a private directory beside ``out`` and moves it into
place whole when it ends (``outdir``): the directory is always one run's, its report describing
the files beside it.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from . import outdir
from .backends import Backend, Translation, choose_backend_and_reason, get_backend
from .compile_report import CompileReport, check_fits
from .errors import AttnforgeError, DoesNotFitError, OutputError
from .judge import JudgeError, interpret_against_spec, interpret_shapes
from .plan import BuiltinPlanner, GivenPlanner, Plan
from .plan.builtin import Candidate, packs_gqa
from .report import KERNEL_TL, write_reports
from .spec import AttentionSpec
from .targets import Target
from .tl import harness
from .tune import database as tuning
from .verify import VerifyRecord, verify


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
    backend: Backend
    out: Path
    steps: list[StepResult] = field(default_factory=list)
    plan: Plan | None = None
    compile_reports: list[CompileReport] = field(default_factory=list)
    interpret_runs: list[dict] = field(default_factory=list)
    verification: VerifyRecord | None = None
    rejected: list[str] = field(default_factory=list)
    failed_step: str | None = None
    error: str | None = None
    total_seconds: float = 0.0  # wall time of the whole run
    rejected_seconds: float = 0.0  # of which compiles of plans that did not fit the target
    rejected_compiles: int = 0  # how many such compiles
    backend_reason: str = ""  # which backend and why: asked for by name, or auto's choice and reason

    @property
    def ok(self) -> bool:
        return self.failed_step is None

    @property
    def verified(self) -> bool:
        return self.ok and self.verification is not None and self.verification.passed

    @property
    def status(self) -> str:
        """One sentence: what was verified, and how; or that nothing was; or which step failed."""
        if not self.ok:
            return f"FAILED at step {self.failed_step}"
        if self.verification is None:
            return "generated and compiled, NOT verified (--no-verify)"
        return self.verification.statement


class StepFailed(AttnforgeError):
    """A pipeline step that ran and judged its input wrong (not a bad argument)."""

    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step


Progress = Callable[[str, str], None]  # (event, text): event is "start", "ok", "fail" or "info"


def generate(
    spec: AttentionSpec,
    target: Target,
    out: str | Path,
    *,
    backend: str | Backend = "auto",
    run_verification: bool = True,
    interpret: bool | None = None,
    tma: bool = True,
    tl: str | None = None,
    tl_file: str = KERNEL_TL,
    progress: Progress | None = None,
    tuned: bool | Candidate = True,
    backend_reason: str | None = None,
) -> GenerateResult:
    """Run every step; never raises for a step's failure (see ``result.failed_step``), only
    ``AttnforgeError`` for an ``out`` it may not write to (a file, a directory of other files)
    and ``OutputError`` when the directory cannot be written (a full disk).
    ``backend``: a name (``auto``: the first that builds the spec) or a Backend. ``tl``: a TL
    program (its text; ``tl_file`` names it in messages) to use instead of the built-in
    planner's, put through every gate. ``tma=False`` keeps pointer loads where the planner
    would use TMA descriptors; ``interpret`` forces (True) or forbids (False) the interpreter
    for verification (default: when there is no GPU). ``tuned``: offer the tuning database's
    parameters for this spec first (True), not (False), or offer the given candidate.
    ``backend_reason``: why a given Backend was chosen, for the reports (a name's is worked out here)."""
    if isinstance(backend, Backend):
        chosen, why = backend, backend_reason or f"{backend.name}: given by the caller"
    else:
        chosen, why = choose_backend_and_reason(backend, spec, target)
    prefer = tuned_candidate(spec, target, chosen.name) if tuned is True else (tuned or None)
    planner = GivenPlanner(tl, tl_file) if tl is not None else BuiltinPlanner(tma=tma, prefer=prefer, form=chosen.tl_form, mma=chosen.mma)
    final = outdir.destination(out)
    work = outdir.start(final)
    try:
        result = _Pipeline(spec, target, chosen, work, planner, interpret, progress, why).run(run_verification)
    except OSError as err:  # the reports could not be written
        outdir.discard(work)
        raise OutputError(f"cannot write the kernel directory {out}: {err.strerror or err}", where=str(out),
                          hint="free space on its file system, or give another --out") from None
    except BaseException:  # an interrupt: nothing half-written is left
        outdir.discard(work)
        raise
    outdir.publish(work, final)  # on failure it keeps the run in ``work`` and says so
    result.out = Path(out)
    return result


def tuned_candidate(spec: AttentionSpec, target: Target, backend: str) -> Candidate | None:
    """The tuning database's parameters for this spec, target and backend, as a plan candidate. None for a Hopper-form
    prefill entry whose tile (BM, warps) the planner does not offer this spec: the entry's bucket is keyed by the longer
    of Sq and Sk, so an entry timed at 16k x 16k also meets Sq = 512 against 16k keys, where three warpgroups' 192 rows
    are not offered (``plan.hopper.offers_tile``)."""
    entry = tuning.lookup(spec, target.name, backend)
    if entry is None:
        return None
    candidate = Candidate(dict(entry.params), tuning.describe(entry), tuning.kind_of(entry))
    if candidate.kind == "prefill" and get_backend(backend).tl_form == "hopper" and not (spec.is_decode or packs_gqa(spec)):
        from .plan.hopper import offers_tile

        if not offers_tile(spec, target, candidate.params):
            return None
    return candidate


class _Pipeline:
    """One generate run: each step is a method returning a one-line summary or raising."""

    def __init__(self, spec: AttentionSpec, target: Target, backend: Backend, out: Path, planner: BuiltinPlanner | GivenPlanner,
                 interpret: bool | None, progress: Progress | None, backend_reason: str = ""):
        out.mkdir(parents=True, exist_ok=True)
        self.spec, self.target, self.backend, self.out, self.planner, self.interpret = spec, target, backend, out, planner, interpret
        self.say: Progress = progress or (lambda _event, _text: None)
        self.result = GenerateResult(spec, target, backend, out, backend_reason=backend_reason)
        self.translation: Translation | None = None
        self.current = "plan"
        self.misfits: list[tuple[Plan, str]] = []  # compiled plans that did not fit: "spill" or "smem"

    @property
    def source_path(self) -> Path:
        return self.out / self.backend.source_file

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
        except OSError as err:  # a file the step writes (a full disk): the run's environment, not a bug
            result.failed_step, result.error = self.current, f"cannot write {err.filename or 'a file'}: {err.strerror or err}"
        except Exception as err:  # a bug in a step: recorded with its traceback in the report, not lost
            result.failed_step, result.error = self.current, f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}"
        if result.failed_step:
            result.steps.append(StepResult(result.failed_step, False, 0.0, result.error or ""))
            self.say("fail", f"{result.failed_step} failed: {result.error}")
        # The reports are written, timed, then written again so that they list their own step.
        t0 = time.perf_counter()
        write_reports(result, total_seconds=time.perf_counter() - start)
        result.steps.append(StepResult("report", True, round(time.perf_counter() - t0, 3), "report.json, report.md"))
        result.total_seconds = time.perf_counter() - start
        write_reports(result, total_seconds=result.total_seconds)
        return result

    def step(self, name: str, fn: Callable[[], str]) -> None:
        self.current = name
        self.say("start", name)
        t0 = time.perf_counter()
        detail = fn()
        self.result.steps.append(StepResult(name, True, round(time.perf_counter() - t0, 3), detail))
        self.say("ok", f"{name}: {detail}")

    def plan_until_it_fits(self) -> None:
        """plan .. compile; a compile that does not fit the target moves to the planner's next plan."""
        plans = self.planner.plans(self.spec, self.target, refused=self.backend.refused_strategies(self.target))
        last: DoesNotFitError | None = None
        while True:
            self.step("plan", lambda: self.plan(plans, last))
            self.step("check", self.check)
            self.step("interpret", self.interpret_tl)
            self.step("translate", self.translate)
            t0 = time.perf_counter()
            try:
                self.step("compile", self.compile)
                return
            except DoesNotFitError as err:  # other compile failures are not a matter of tile sizes
                self.result.rejected_seconds += time.perf_counter() - t0
                self.result.rejected_compiles += 1
                self.result.rejected.append(f"{_fmt(self.result.plan.params)}: {err}")
                self.say("info", f"compile: does not fit ({err}); trying the planner's next candidate")
                last = err
                reports = self.result.compile_reports
                if max((r.spill_bytes for r in reports), default=0) >= SPILL_SKIP_BYTES:
                    self.misfits.append((self.result.plan, "spill"))
                elif any(r.shared_bytes > self.target.smem_per_block_optin for r in reports):
                    self.misfits.append((self.result.plan, "smem"))

    # ---------------------------------------------------------------- the steps
    def plan(self, plans: Iterator[Plan], last_misfit: DoesNotFitError | None) -> str:
        while True:
            p = next(plans, None)
            if p is None:
                raise StepFailed("compile", f"no parameter candidate fits {self.target.name}; last: {last_misfit}")
            self.result.rejected += list(p.rejected)
            worse = next(((q, why) for q, why in self.misfits if _needs_at_least(p, q, why)), None)
            if worse is None:
                break
            # predicted not to fit from a compile already done: not planned, checked or compiled again
            q, why = worse
            what = "registers" if why == "spill" else "shared memory"
            self.result.rejected.append(f"{_fmt(p.params)}: not compiled: needs at least the {what} of {_fmt(q.params)}, which did not fit {self.target.name}")
            self.say("info", f"skip: {_fmt(p.params)} needs at least the {what} of {_fmt(q.params)}, which did not fit")
        self.result.plan = p
        return f"{p.kind} program, {_fmt(p.params)} ({p.reasons[0]})"

    def check(self) -> str:
        p = self.result.plan
        (self.out / KERNEL_TL).write_text(p.source)
        warnings = [f for f in p.check.findings if f.severity == "warning"]
        res = "; ".join(f"{r.kernel}: ~{(r.smem_bytes or 0) // 1024} KiB shared, ~{r.regs_per_thread} registers/thread (estimates)" for r in p.check.resources)
        return f"clean for {self.target.name}" + (f", {len(warnings)} warning(s)" if warnings else "") + (f" ({res})" if res else "")

    def interpret_tl(self) -> str:
        """The TL program judged against the spec: its claims, then its numbers exactly in
        float64 on small shapes against the spec's reference, before any GPU code."""
        p = self.result.plan
        try:
            reports = interpret_against_spec(p.program, self.spec, interpret_shapes(self.spec, p.params, p.program), file=getattr(self.planner, "file", KERNEL_TL))
        except JudgeError as err:
            self.result.interpret_runs = [_run_record(r) for r in err.reports]
            raise StepFailed("interpret", f"{err.message} (hint: {err.hint})" if err.hint else err.message) from err
        runs = self.result.interpret_runs = [_run_record(r) for r in reports]
        return f"{len(runs)} shape(s) exact in float64 against the spec, max err(O) {max(r['err_o'] for r in runs):.2g}"

    def translate(self) -> str:
        spec = self.spec
        self.translation = self.backend.translate(self.result.plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file=KERNEL_TL)
        self.source_path.write_text(self.translation.source)
        return f"{self.backend.source_file}: {len(self.translation.source.splitlines())} lines, kernels {', '.join(self.translation.kernels)}"

    def compile(self) -> str:
        reports = self.result.compile_reports = self.backend.compile(self.translation, self.source_path, self.target, self.out / "build")
        problems = []
        for rep in reports:
            try:
                check_fits(rep, self.target)
            except DoesNotFitError as err:
                problems.append(str(err))
        if problems:
            raise DoesNotFitError("; ".join(problems), where=f"compile for {self.target.name}")
        return "; ".join(f"{r.kernel}: {r.registers} regs, {r.shared_bytes // 1024} KiB shared, {r.spill_bytes} B spills, {'+'.join(r.instructions)}" for r in reports)

    def verify(self) -> str:
        kernel = self.backend.load(self.source_path, interpret=self.interpret)

        def case_done(done: int, total: int, case) -> None:
            mark = "ok" if case.passed else "FAIL"
            self.say("info", f"  verify {done}/{total} {case.shape}: err(O) {case.err_o:.2e} (bound {case.tol_o:.0e}), err(LSE) {case.err_lse:.2e} (bound {case.tol_lse:.1e}) {mark}")
        rec = self.result.verification = verify(kernel, self.spec, self.result.plan.params, target=self.target, progress=case_done)
        bad = [c for c in rec.cases if not c.passed]
        if bad:
            first = bad[0]
            raise StepFailed("verify", f"{len(bad)} of {len(rec.cases)} case(s) fail on {rec.device}; first: {first.shape}: "
                                       + (first.error or first.worst or f"err(O) {first.err_o:.3g}"))
        return f"{len(rec.cases)} cases pass on {rec.device}; max err(O) {rec.max_err_o:.2e}, max err(LSE) {rec.max_err_lse:.2e}; {rec.statement}"


def _run_record(rep: harness.RunReport) -> dict:
    return {"shape": str(rep.shape), "err_o": rep.err_o, "err_lse": rep.err_lse, "tol_o": rep.tolerance, "tol_lse": rep.tolerance_lse,
            "passed": rep.passed, "worst": rep.worst}


def _fmt(params: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


# A compile that spilled at least this much (32 registers a thread) spills again with tiles as
# large or fewer warps, whatever the pipeline stages: on h100, fp32 D=64, stages 3/2/1 moved the
# spills of one tile shape by at most 192 B of 600..6400 B. Smaller spills are compiled again.
SPILL_SKIP_BYTES = 128


def _needs_at_least(p: Plan, q: Plan, why: str) -> bool:
    """Whether plan ``p`` needs at least the registers (``why`` "spill": tiles as large, warps as
    few, any stages) or the shared memory ("smem": tiles as large, stages as many) of plan ``q``."""
    a, b = p.params, q.params
    if p.kind != q.kind or set(a) != set(b):
        return False
    for name, value in a.items():
        if name in ("BM", "BN") or (name == "stages" and why == "smem"):
            ok = value >= b[name]
        elif name == "warps" and why == "spill":
            ok = value <= b[name]
        elif name == "stages":
            ok = True
        else:
            ok = value == b[name]
        if not ok:
            return False
    return True
