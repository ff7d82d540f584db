"""``attnforge generate --llm``: a model writes the kernel, attnforge's gates judge every answer.

Modes (``LLMOptions.mode``):

* ``tl`` (default): stage 1 by the model (stage1.write_tl: sketch, parameters, feedback); the
  accepted TL then goes through ``generate(..., tl=...)``, the same gates as any program, with
  attnforge's translator (``translate="builtin"``); or the model translates it too
  (``translate="llm"``: stage2.write_kernel, statically gated and verified in the sandbox).
* ``direct``: the paper's baseline: the model writes the Triton module from the spec alone.
* ``both``: ``tl`` into OUT and ``direct`` into OUT/direct, and OUT/comparison.json/.md side by side.

Each kernel directory gets the usual files (kernel.tl where there is TL, kernel_triton.py,
report.json, report.md), ``llm/transcript.jsonl`` (every prompt and answer) and an "llm" section
in report.json. ``optimize`` > 0 then tunes a verified kernel (optimize.py; a GPU times it).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import outdir
from ..backends import choose_backend, get_backend
from ..errors import AttnforgeError
from ..generate import GenerateResult, StepResult, generate
from ..plan import Plan
from ..report import KERNEL_TL, write_reports
from ..spec import AttentionSpec
from ..targets import Target
from ..tl.checker import check
from . import kernel_rules, report_llm
from .budget import Prices
from .clients import open_client
from .config import budget_for, parse_spec
from .errors import LLMError, SandboxError, UnsafeCodeError
from .kernel_feedback import sandbox_text, syntax_text, unsafe_text, verdict_text
from .kernel_jobs import ModuleVerdict, time_module, verify_module
from .messages import Client
from .optimize import BuildOutcome, Candidate, OptimizeResult, Timer, optimize
from .rounds import Round, Say, failures_by_kind, totals
from .sandbox import Limits, run_isolated, run_untrusted
from .stage1 import DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TOKENS, Built, write_tl
from .stage2 import MODULE_FILE, sandbox_limits, write_kernel
from .tl_judge import TLVerdict, judge_program
from .tracked import Tracked
from .transcript import Transcript

MODES = ("tl", "direct", "both")
_MARKS = {"ok": "ok  ", "fail": "FAIL", "info": "    "}
TRANSLATORS = ("builtin", "llm")
DIRECT_DIR = "direct"


@dataclass(frozen=True)
class LLMOptions:
    """How to run the model. ``client`` is ``PROVIDER:MODEL``; the key never passes through here
    (it comes from the environment or the config file, config.py)."""

    client: str
    base_url: str | None = None
    timeout_s: float | None = None
    retries: int | None = None
    prices: Prices | None = None
    mode: str = "tl"
    translate: str = "builtin"
    max_rounds: int = DEFAULT_MAX_ROUNDS
    max_tokens: int = DEFAULT_MAX_TOKENS
    optimize: int = 0
    sandbox_timeout_s: float = 900.0
    verify: bool = True
    backend: str = "auto"

    def check(self) -> None:
        """Refuse combinations that cannot run (exit 2 at the CLI)."""
        parse_spec(self.client)
        if self.mode not in MODES:
            raise AttnforgeError(f"--mode {self.mode!r} is not one of {', '.join(MODES)}", where="--mode")
        if self.translate not in TRANSLATORS:
            raise AttnforgeError(f"--translate {self.translate!r} is not one of {', '.join(TRANSLATORS)}", where="--translate")
        for name, value in (("--max-rounds", self.max_rounds), ("--max-tokens", self.max_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AttnforgeError(f"{name} {value!r} is not a positive integer", where=name)
        if isinstance(self.optimize, bool) or not isinstance(self.optimize, int) or self.optimize < 0:
            raise AttnforgeError(f"--optimize {self.optimize!r} is not a number of rounds >= 0", where="--optimize")
        if not self.sandbox_timeout_s > 0:
            raise AttnforgeError(f"--sandbox-timeout {self.sandbox_timeout_s!r} is not > 0", where="--sandbox-timeout")
        if self.backend == "cuda" and self.mode == "direct":
            raise AttnforgeError("--mode direct with the cuda backend (--backend cuda, or auto's choice for this target): the direct "
                                 "baseline writes Triton modules only", where="--backend",
                                 hint="use --mode tl (with --translate llm the model translates its TL to CUDA), or --backend triton")
        if self.backend == "cuda" and self.translate == "llm" and not gpu_present():
            raise AttnforgeError("--translate llm with the cuda backend needs a local CUDA GPU: the model's kernels are accepted only once "
                                 "verified, and CUDA has no CPU interpreter to verify them in", where="--translate",
                                 hint="run on a machine with a GPU, or use --translate builtin (attnforge's CUDA backend translates the "
                                      "model's TL; generate --no-verify compiles it here), or --backend triton")
        if self.backend == "cuda" and self.translate == "llm" and self.optimize:
            raise AttnforgeError("--optimize times Triton modules; a model-written CUDA translation is not timed by it yet", where="--optimize",
                                 hint="drop --optimize, or use --backend triton")
        if self.backend == "gluon" and (self.mode == "direct" or self.translate == "llm"):
            what = "--mode direct" if self.mode == "direct" else "--translate llm"
            raise AttnforgeError(f"{what} with the gluon backend: there the model writes TL in the Hopper form (docs/TL.md section 11) "
                                 "and attnforge's gluon backend translates it", where="--backend",
                                 hint="use --mode tl --translate builtin with --backend gluon, or --backend triton")
        if not self.verify and (self.mode != "tl" or self.translate == "llm"):
            raise AttnforgeError("--no-verify works with --mode tl --translate builtin only", where="--no-verify",
                                 hint="a module written by a model is accepted only once it is verified in the sandbox")
        if not self.verify and self.optimize:
            raise AttnforgeError("--optimize needs verified kernels; drop --no-verify", where="--optimize")

    def recorded(self) -> dict[str, Any]:
        """What a replay needs to run the same way (report.json's llm.options)."""
        return {"mode": self.mode, "translate": self.translate, "max_rounds": self.max_rounds, "max_tokens": self.max_tokens,
                "optimize": self.optimize, "verify": self.verify, "backend": self.backend}


@dataclass
class ModeRun:
    """One mode's run into one directory."""

    mode: str
    out: Path
    rounds: list[Round] = field(default_factory=list)
    result: GenerateResult | None = None
    error: str | None = None  # one line, when a step failed
    optimize: OptimizeResult | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    speed_ms: float | None = None
    timings: list[float] = field(default_factory=list)  # every time measured, in order

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok

    @property
    def verified(self) -> bool:
        return self.ok and self.result is not None and self.result.verified

    @property
    def status(self) -> str:
        if self.ok and self.result is not None:
            return self.result.status
        return f"FAILED: {self.error or (self.result.error if self.result else '')}"


def refuse_unverifiable_gluon(options: LLMOptions, target: Target) -> None:
    """Gluon kernels are verified natively on a GPU of their family only: without one, every
    accepted program would fail at verification and send the model after a problem it cannot fix."""
    if options.backend != "gluon" or not options.verify:
        return
    import torch

    if not gpu_present() or torch.cuda.get_device_capability()[0] != target.cc[0]:
        raise AttnforgeError(f"--llm with the gluon backend verifies its kernels on a {target.sm} GPU, and there is none here",
                             where="--backend", hint="add --no-verify (the program is checked and interpreted, the kernel compiled for the "
                                                      "target), or run on such a GPU, or use --backend triton")


def refuse_cuda_decode_by_model(options: LLMOptions, spec: AttentionSpec) -> None:
    """A model writes the CUDA kernels of one-kernel prefill programs only: the split-KV decode
    program (two kernels, scratch, a split count chosen per call) has no ABI for it, and its
    combine kernel would fail the PTX audit's prefill rules after the model's rounds were spent."""
    from ..plan.builtin import packs_gqa

    if options.backend == "cuda" and options.translate == "llm" and (spec.is_decode or packs_gqa(spec)):
        raise AttnforgeError(f"--translate llm with the cuda backend writes prefill kernels only; {spec.describe()} is a split-KV "
                             "decode program", where="--translate",
                             hint="use --translate builtin (attnforge's CUDA backend translates the model's TL), or --backend triton")


def gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


def refuse_optimize_without_gpu(options: LLMOptions) -> None:
    if options.optimize and not gpu_present():
        raise AttnforgeError("--optimize needs a GPU to time kernels, and none is present", where="--optimize",
                             hint="run on a machine with an NVIDIA GPU, or drop --optimize")


ClientFor = Callable[[str], Client]  # mode -> the client that answers it
TimerFor = Callable[[str], "Timer | None"]  # mode -> how its kernels are timed (None: on the GPU, if there is one)


def mode_directory(out: Path, options_mode: str, mode: str) -> Path:
    """Where a mode's kernel goes: OUT, or OUT/direct for the direct half of --mode both."""
    return out / DIRECT_DIR if options_mode == "both" and mode == "direct" else out


def run(options: LLMOptions, spec: AttentionSpec, target: Target, out: str | Path, *, say: Say | None = None,
        client: Client | ClientFor | None = None, timer: Timer | None = None, timer_for: TimerFor | None = None,
        interpret: bool | None = None, on_event: Callable[[str], None] | None = None) -> list[ModeRun]:
    """Every mode ``options`` asks for; one ModeRun each (tl first). ``client``: an open client,
    or a function giving one per mode (a replay answers each mode from its own transcript);
    default: opened from ``options``. ``timer``: how --optimize (and --mode both on a GPU) times a
    kernel (``timer_for``: one per mode); default: on the GPU in a child process (without a GPU
    --optimize is refused)."""
    options.check()
    refuse_unverifiable_gluon(options, target)
    refuse_cuda_decode_by_model(options, spec)
    if timer is None and timer_for is None:
        refuse_optimize_without_gpu(options)
    say = say or (lambda _line: None)
    out = Path(out)
    final = outdir.destination(out)  # refused before any request: a file, a directory of other files
    if client is None:
        client = open_client(options.client, base_url=options.base_url, timeout_s=options.timeout_s, retries=options.retries,
                             prices=options.prices, on_event=on_event or say)
    work = outdir.start(final)
    try:
        modes = ["tl", "direct"] if options.mode == "both" else [options.mode]
        runs = []
        for mode in modes:
            say(f"--mode {mode}{' --translate ' + options.translate if mode == 'tl' else ''} -> {mode_directory(out, options.mode, mode)}")
            answering = client if isinstance(client, Client) else client(mode)
            timing = timer_for(mode) if timer_for is not None else timer
            runs.append(_Run(options, spec, target, work, mode, answering, say, timing, interpret).run())
        # One directory, published whole: OUT (the first mode's kernel) with llm/, and direct/ for --mode both.
        top = runs[0].out
        if options.mode == "both":
            shutil.move(str(runs[1].out), str(top / DIRECT_DIR))
            runs[1].out = top / DIRECT_DIR
            write_comparison(top, runs)
        outdir.publish(top, final)
    finally:
        outdir.discard(work)
    for r in runs:
        r.out = mode_directory(Path(out), options.mode, r.mode)
        if r.result is not None:
            r.result.out = r.out
    return runs


class _Run:
    """One mode into one directory."""

    def __init__(self, options: LLMOptions, spec: AttentionSpec, target: Target, work: Path, mode: str, client: Client,
                 say: Say, timer: Timer | None, interpret: bool | None):
        self.options, self.spec, self.target, self.mode, self.say = options, spec, target, mode, say
        self.interpret = interpret
        # generate publishes whole directories (it replaces what is there): the kernel directory and
        # the model's records (llm/: transcript, optimize candidates) are kept apart until the end.
        self.out = work / f"{mode}-kernel"
        self.llm_dir = work / f"{mode}-llm"
        self.budget = budget_for(options.client, prices=options.prices)
        self.llm = Tracked(client, budget=self.budget, transcript=Transcript(self.llm_dir))
        self.limits = sandbox_limits(options.sandbox_timeout_s, gpu=gpu_present())
        self.timer = timer
        self.out.mkdir(parents=True)
        self.record = ModeRun(mode, self.out)
        self.steps: list[StepResult] = []  # the model's stages, for directories generate does not write
        self.stage_rounds: list[tuple[str, list[Round]]] = []
        self.start = time.perf_counter()

    def run(self) -> ModeRun:
        rec = self.record
        if self.mode == "direct":
            self.direct()
        elif self.options.translate == "llm":
            self.tl_then_llm_translation()
        else:
            self.tl_then_builtin()
        if self.options.optimize and rec.verified:
            try:
                self.optimize()
            except AttnforgeError as err:  # the verified kernel could not be timed
                rec.error = f"optimize: {err.render()}"
        elif self.options.mode == "both" and rec.verified and (self.timer is not None or gpu_present()):
            try:
                rec.speed_ms = self.measure(Candidate(self.out, (self.out / MODULE_FILE).read_text()))
            except AttnforgeError as err:  # the comparison goes without this time
                self.say(f"{self.mode}: not timed: {err.render()}")
        for number, r in enumerate(rec.rounds, 1):  # one numbering across the stages
            r.number = number
        rec.budget = self.budget.summary()
        if rec.result is None:  # nothing was accepted: a report that says so
            rec.result = self.failed_result()
        report_llm.add_to_reports(self.out, report_llm.llm_section(
            client=self.options.client, base_url=self.options.base_url, options=self.options.recorded(), rounds=rec.rounds,
            budget=rec.budget, ok=rec.ok, error=rec.error or (rec.result.error if not rec.result.ok else None),
            optimize=rec.optimize.to_dict() if rec.optimize else None, speed_ms=rec.speed_ms, timings_ms=rec.timings))
        shutil.move(str(self.llm_dir), str(self.out / "llm"))
        return rec

    # ------------------------------------------------------------------ the modes

    def tl_then_builtin(self) -> None:
        rec = self.record
        s1 = write_tl(self.llm, self.spec, self.target, max_rounds=self.options.max_rounds, max_tokens=self.options.max_tokens,
                      build=self.build_generate, say=self.say, form=choose_backend(self.options.backend, self.spec, self.target).tl_form)
        rec.rounds += s1.rounds
        rec.result = s1.built if isinstance(s1.built, GenerateResult) else None
        self.stage_rounds.append(("llm-tl", s1.rounds))
        if not s1.ok:
            rec.error = s1.error
        elif rec.result is not None:
            self.add_llm_steps(rec.result)

    def build_generate(self, source: str, out: Path | None = None) -> Built:
        """An accepted program through every gate of ``generate`` (into this run's directory)."""
        def progress(event: str, text: str) -> None:
            if event != "start":
                self.say(f"{_MARKS[event]} {text}")
        result = generate(self.spec, self.target, out or self.out, backend=self.options.backend, run_verification=self.options.verify,
                          interpret=self.interpret, tl=source, tl_file=KERNEL_TL, progress=progress)
        if result.ok:
            return Built(True, result)
        step = result.failed_step or "build"
        return Built(False, result, kind=step, feedback=(
            f"The program passed the TL checker and matched the reference in the TL interpreter, but attnforge's pipeline "
            f"failed at step {step}:\n{result.error}"))

    def tl_then_llm_translation(self) -> None:
        rec = self.record
        s1 = write_tl(self.llm, self.spec, self.target, max_rounds=self.options.max_rounds, max_tokens=self.options.max_tokens,
                      say=self.say)
        rec.rounds += s1.rounds
        self.steps.append(StepResult("llm-tl", s1.ok, round(sum(r.seconds + r.gate_seconds for r in s1.rounds), 3),
                                     f"{len(s1.rounds)} round(s); " + ("TL accepted" if s1.ok else str(s1.error))))
        if not s1.ok or s1.verdict is None or s1.source is None:
            rec.error = s1.error
            return
        (self.out / KERNEL_TL).write_text(s1.source)
        s2 = write_kernel(self.llm, self.spec, self.target, tl_source=s1.source, params=s1.verdict.params,
                          max_rounds=self.options.max_rounds, max_tokens=self.options.max_tokens, limits=self.limits,
                          interpret=self.interpret, say=self.say, first_number=len(rec.rounds) + 1,
                          backend=self.options.backend if self.options.backend == "cuda" else "triton", program=s1.verdict.program)
        rec.rounds += s2.rounds
        what = "CUDA kernels" if self.options.backend == "cuda" else "module"
        self.steps.append(StepResult("llm-translate", s2.ok, round(sum(r.seconds + r.gate_seconds for r in s2.rounds), 3),
                                     f"{len(s2.rounds)} round(s); " + (f"{what} verified in the sandbox" if s2.ok else str(s2.error))))
        rec.result = self.module_result(s2.source, s2.verdict, s1.verdict, s1.source, s2.error)
        if not s2.ok:
            rec.error = s2.error

    def direct(self) -> None:
        rec = self.record
        s2 = write_kernel(self.llm, self.spec, self.target, max_rounds=self.options.max_rounds, max_tokens=self.options.max_tokens,
                          limits=self.limits, interpret=self.interpret, say=self.say)
        rec.rounds += s2.rounds
        self.steps.append(StepResult("llm-direct", s2.ok, round(sum(r.seconds + r.gate_seconds for r in s2.rounds), 3),
                                     f"{len(s2.rounds)} round(s); " + ("module verified in the sandbox" if s2.ok else str(s2.error))))
        rec.result = self.module_result(s2.source, s2.verdict, None, None, s2.error)
        if not s2.ok:
            rec.error = s2.error

    # ------------------------------------------------------------------ results and reports

    def add_llm_steps(self, result: GenerateResult) -> None:
        """Put the model's stages in front of generate's steps and rewrite its reports."""
        for name, rounds in reversed(self.stage_rounds):
            result.steps.insert(0, StepResult(name, True, round(sum(r.seconds + r.gate_seconds for r in rounds), 3),
                                              f"{len(rounds)} round(s) with {self.options.client}"))
        write_reports(result, total_seconds=time.perf_counter() - self.start)

    def module_result(self, source: str | None, verdict: ModuleVerdict | None, tl: TLVerdict | None, tl_source: str | None,
                      error: str | None, out: Path | None = None) -> GenerateResult:
        """A directory for a model-written module: its files and reports, as generate writes them."""
        out = out or self.out
        out.mkdir(parents=True, exist_ok=True)
        backend = get_backend("cuda" if self.options.backend == "cuda" and self.options.translate == "llm" and tl_source is not None else "triton")
        if source is not None:
            (out / backend.source_file).write_text(source)
        if tl_source is not None:
            (out / KERNEL_TL).write_text(tl_source)
        elif (out / KERNEL_TL).exists():  # a direct module has no TL: a stale program must not be judged as its own
            (out / KERNEL_TL).unlink()
        result = GenerateResult(self.spec, self.target, backend, out, steps=list(self.steps))
        if tl is not None and tl.program is not None and tl_source is not None:
            checked = check(tl.program, self.target, head_dim=self.spec.head_dim, head_dim_v=self.spec.head_dim_v, file=KERNEL_TL)
            kind = "decode" if tl.program.declares("NSPLIT") else "prefill"  # a split count, fixed or chosen at launch
            result.plan = Plan(tl.program, tl_source, tl.params, kind, (f"TL and its {backend.name} translation written by {self.options.client}",), checked)
            result.interpret_runs = [{"shape": str(r.shape), "err_o": r.err_o, "err_lse": r.err_lse, "tol_o": r.tolerance,
                                      "tol_lse": r.tolerance_lse, "passed": r.passed, "worst": r.worst} for r in tl.runs]
        if verdict is not None:
            result.compile_reports = list(verdict.compile_reports)
            result.verification = verdict.verification
        if error is not None or verdict is None or not verdict.ok:
            result.failed_step = self.steps[-1].name if self.steps else "llm"
            result.error = error or (verdict_text(verdict) if verdict is not None else "no module was accepted")
        write_reports(result, total_seconds=time.perf_counter() - self.start)
        return result

    def failed_result(self) -> GenerateResult:
        result = GenerateResult(self.spec, self.target, get_backend("triton"), self.out, steps=list(self.steps))
        result.failed_step = "llm-tl" if self.mode == "tl" else "llm-direct"
        result.error = self.record.error or "the model's answers were not accepted"
        if not any(s.name == result.failed_step for s in result.steps):
            result.steps.append(StepResult(result.failed_step, False, 0.0, result.error))
        write_reports(result, total_seconds=time.perf_counter() - self.start)
        return result

    # ------------------------------------------------------------------ --optimize

    def optimize(self) -> None:
        rec = self.record
        result = rec.result
        assert result is not None and result.verification is not None
        module = (self.out / MODULE_FILE).read_text()
        if self.mode == "tl":
            code, language = result.plan.source, "tl"
        else:
            code, language = module, "python"
        start = Candidate(self.out, code, dict(result.plan.params) if result.plan else {}, list(result.compile_reports),
                          detail=result)
        build = self.build_tl_candidate if self.mode == "tl" else self.build_module_candidate
        work = self.llm_dir / "optimize"
        opt = optimize(self.llm, self.spec, self.target, start, rounds=self.options.optimize, language=language, build=build,
                       timer=self.measure, work_dir=work, max_tokens=self.options.max_tokens, say=self.say,
                       first_number=len(rec.rounds) + 1)
        rec.rounds += opt.rounds
        rec.optimize = opt
        rec.speed_ms = opt.best.ms
        self.stage_rounds.append(("llm-optimize", opt.rounds))
        if opt.improved:
            self.adopt(opt.best)

    def build_tl_candidate(self, code: str, directory: Path) -> BuildOutcome:
        verdict = judge_program(code, self.spec, self.target)
        if not verdict.ok:
            return BuildOutcome(None, verdict.kind, verdict.feedback)
        if self.options.translate == "builtin":
            built = self.build_generate(code, directory)
            result = built.value
            if not built.ok or not isinstance(result, GenerateResult) or not result.verified:
                return BuildOutcome(None, built.kind or "verify", built.feedback)
            return BuildOutcome(Candidate(directory, code, dict(verdict.params), list(result.compile_reports), detail=result))
        s2 = write_kernel(self.llm, self.spec, self.target, tl_source=code, params=verdict.params, max_rounds=self.options.max_rounds,
                          max_tokens=self.options.max_tokens, limits=self.limits, interpret=self.interpret, say=self.say,
                          first_number=len(self.record.rounds) + 1)
        if not s2.ok or s2.verdict is None:
            return BuildOutcome(None, "translate", s2.error or "", rounds=s2.rounds)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MODULE_FILE).write_text(s2.source or "")
        (directory / KERNEL_TL).write_text(code)
        return BuildOutcome(Candidate(directory, code, dict(verdict.params), list(s2.verdict.compile_reports),
                                      detail=(s2.source, s2.verdict, verdict)), rounds=s2.rounds)

    def build_module_candidate(self, code: str, directory: Path) -> BuildOutcome:
        try:
            kernel_rules.check_kernel_source(code, file=MODULE_FILE)
            verdict = run_untrusted(code, verify_module, self.spec.to_dict(), self.target.name, {}, self.interpret, True,
                                    limits=self.limits, file_name=MODULE_FILE)
        except UnsafeCodeError as err:
            return BuildOutcome(None, "unsafe", unsafe_text(err, code))
        except SandboxError as err:
            return BuildOutcome(None, f"sandbox-{err.kind}", sandbox_text(err))
        except LLMError as err:
            return BuildOutcome(None, "syntax", syntax_text(err))
        if not verdict.ok:
            return BuildOutcome(None, verdict.problems[0][0] if verdict.problems else "verify", verdict_text(verdict))
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MODULE_FILE).write_text(code)
        return BuildOutcome(Candidate(directory, code, {}, list(verdict.compile_reports), detail=(code, verdict, None)))

    def measure(self, candidate: Candidate) -> float:
        """The candidate's time: the given timer's, else the GPU's; every time is recorded (a replay reuses them)."""
        ms = float((self.timer or self.gpu_timer)(candidate))
        self.record.timings.append(ms)
        return ms

    def gpu_timer(self, candidate: Candidate) -> float:
        """The candidate's median time on the GPU, in a child process (attnforge's own translation
        runs as it is; a model-written module through the gate)."""
        source = (candidate.directory / MODULE_FILE).read_text()
        limits = Limits(timeout_s=self.options.sandbox_timeout_s, memory_bytes=None)
        trusted = self.mode == "tl" and self.options.translate == "builtin"
        runner = run_isolated if trusted else run_untrusted
        return runner(source, time_module, self.spec.to_dict(), limits=limits, file_name=MODULE_FILE)

    def adopt(self, best: Candidate) -> None:
        """Make the fastest candidate the directory's kernel."""
        rec = self.record
        if isinstance(best.detail, GenerateResult):
            shutil.rmtree(self.out)
            shutil.copytree(best.directory, self.out)  # the candidate stays in llm/optimize/ as tried
            best.detail.out = self.out
            rec.result = best.detail
            self.add_llm_steps(rec.result)
            return
        source, verdict, tl = best.detail  # type: ignore[misc]
        self.steps.append(StepResult("llm-optimize", True, 0.0, f"fastest: {best.label()}, {best.ms:.4g} ms"))
        rec.result = self.module_result(source, verdict, tl, best.code if tl is not None else None, None)


def write_comparison(out: Path, runs: list[ModeRun]) -> dict[str, Any]:
    """OUT/comparison.json and .md: rounds, failures by kind, tokens and (with a GPU) speed, per mode."""
    rows = []
    for r in runs:
        note = None if r.speed_ms is not None else ("not verified" if not r.verified else "not timed (no GPU)")
        rows.append({"mode": r.mode, "directory": DIRECT_DIR if r.mode == "direct" else ".", "verified": r.verified, "status": r.status,
                     "failures_by_kind": failures_by_kind(r.rounds), **totals(r.rounds), "speed_ms": r.speed_ms, "speed_note": note})
    data = report_llm.comparison(rows)
    (out / "comparison.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "comparison.md").write_text(report_llm.comparison_markdown(data))
    return data
