"""Run the mutation suite: plant each bug, put the result through the gate, and say who caught it.

For every spec the suite first generates the unmutated kernel and checks that the gate passes
it (the control: a gate that refuses correct kernels would "kill" everything). Then each
mutant is planted in a copy: a TL mutant goes through every step of ``generate --tl``; a kernel
mutant through ``attnforge verify`` (``gate.verify_directory``); a model mutant through the same,
in a copy whose module is written as a model writes it and whose report says a model wrote it
(so the LLM path's static gate and sandbox judge it; its control is ``control:model-SPEC``). A
mutant is killed when some step refuses it; an equivalent mutant must survive.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .. import manifest
from ..errors import AttnforgeError
from ..generate import generate
from ..gate import verify_directory
from ..report import KERNEL_TL
from ..plan.builtin import Candidate
from ..targets import get_target
from .model_style import model_style
from .mutants import MUTANTS, SPEC_BACKENDS, SPEC_PLAN, SPECS, Mutant, base_params


@dataclass(frozen=True)
class Outcome:
    name: str  # a mutant's name, or "control:SPEC"
    killed: bool
    step: str  # the step that refused it ("" when none did)
    detail: str
    seconds: float
    equivalent: str | None = None

    @property
    def as_expected(self) -> bool:
        """Killed, or (for an equivalent mutant and for a control) passed."""
        if self.name.startswith("control:"):
            return not self.killed
        return self.killed != bool(self.equivalent)

    def line(self) -> str:
        if self.name.startswith("control:"):
            verdict = "passes the gate" if not self.killed else f"REFUSED by the gate at {self.step}"
        elif self.equivalent:
            verdict = f"survived (equivalent: {self.equivalent})" if not self.killed else f"KILLED although equivalent, at {self.step}"
        else:
            verdict = f"killed at {self.step}: {self.detail[:110]}" if self.killed else "SURVIVED"
        return f"{'ok  ' if self.as_expected else 'FAIL'} {self.name:34s} {verdict}  [{self.seconds:.1f}s]" + (f"\n       {self.detail}" if self.detail and not self.as_expected else "")


def _native_only(key: str, interpret: bool | None) -> bool:
    """Whether the spec's kernels cannot be verified here: a backend without an interpreter (gluon)
    with --quick, without a GPU, or with a GPU of another family than the spec's target (a tcgen05
    kernel does not run on Hopper). Its mutants and control then stop before verification."""
    import torch

    key = key.removeprefix("model-")
    if key not in SPEC_BACKENDS:
        return False
    if interpret is True or not torch.cuda.is_available():
        return True
    # mma.sync kernels run on any newer GPU; a gluon kernel on its own family only
    return SPEC_BACKENDS[key] == "gluon" and torch.cuda.get_device_capability()[0] != get_target(SPECS[key][1]).cc[0]


def _base(root: Path, key: str, interpret: bool | None) -> Path:
    spec, target = SPECS[key]
    out = root / f"base-{key}"
    result = generate(spec, get_target(target), out, backend=SPEC_BACKENDS.get(key, "auto"), run_verification=False, interpret=interpret,
                      tuned=_planned(key))
    if not result.ok:
        raise AttnforgeError(f"selftest: the unmutated {key} kernel does not generate: {result.error}", where=f"selftest base {key}",
                             hint="fix the pipeline before trusting any mutant")
    return out


def _planned(key: str) -> bool | Candidate:
    """What generate offers first for a spec's base: its SPEC_PLAN candidate (``mutants.base_params``, as the GPU check's
    base, gluon.gpucheck.base_kernel), else the tuning database's (True)."""
    params = base_params(key)
    return True if params is None else Candidate(params, f"selftest base: SPEC_PLAN {SPEC_PLAN[key]}")


def _model_base(root: Path, key: str, base: Path) -> Path:
    """The base kernel directory with its module rewritten as a model writes it, and its report
    saying a model wrote it: ``attnforge verify`` then judges it as it judges a model's module."""
    from ..backends import backend_for_directory

    out = root / f"model-{key}"
    shutil.copytree(base, out)
    source = out / backend_for_directory(out).source_file
    if source.suffix == ".py":  # (a model writes a CUDA file's kernels only, attnforge its head: nothing to restyle)
        source.write_text(model_style(source.read_text()))
    report_path = out / "report.json"
    report = json.loads(report_path.read_text())
    report["llm"] = {"client": "selftest (attnforge's translation in a model's style)", "options": {"translate": "llm"}}
    report_path.write_text(json.dumps(report, indent=1))
    (out / manifest.NAME).unlink(missing_ok=True)  # the directory no longer matches what generate wrote
    return out


def _control(key: str, base: str, interpret: bool | None) -> Outcome:
    start = time.perf_counter()
    if _native_only(key, interpret) and not key.startswith("model-"):  # the gate's steps up to the compile, as its mutants get them
        spec, target = SPECS[key]
        text = (Path(base) / KERNEL_TL).read_text()
        result = generate(spec, get_target(target), Path(base).parent / f"control-{key}", backend=SPEC_BACKENDS[key], tl=text,
                          tl_file=f"control-{key}.tl", run_verification=False)
        return Outcome(f"control:{key}", not result.ok, result.failed_step or "", result.error or "", time.perf_counter() - start)
    verdict = verify_directory(base, interpret=interpret)
    failed = not verdict.ok and not _unverifiable(verdict.error)  # (a model's CUDA without a GPU: judged up to the compile)
    return Outcome(f"control:{key}", failed, verdict.step if failed else "", verdict.error or "", time.perf_counter() - start)


def _unverifiable(error: str | None) -> bool:
    """A model's CUDA kernels that passed every step but verification, which needs a GPU."""
    from ..llm.cuda_jobs import UNVERIFIABLE

    return bool(error) and error.startswith(UNVERIFIABLE + ":")


def _plant(mutant: Mutant, base: str, work: str, interpret: bool | None) -> Outcome:
    start = time.perf_counter()
    spec, target = SPECS[mutant.spec]
    out = Path(work) / mutant.name
    if mutant.where == "tl":
        text = mutant.apply((Path(base) / KERNEL_TL).read_text())
        native_only = _native_only(mutant.spec, interpret)
        result = generate(spec, get_target(target), out, backend=SPEC_BACKENDS.get(mutant.spec, "auto"), tl=text, tl_file=f"{mutant.name}.tl",
                          interpret=interpret, run_verification=not native_only)
        killed = not result.ok if native_only else not result.verified
        step, detail = result.failed_step or "", result.error or ""
    else:
        shutil.copytree(base, out)
        from ..backends import backend_for_directory

        source = out / backend_for_directory(out).source_file
        source.write_text(mutant.apply(source.read_text()))
        verdict = verify_directory(out, interpret=interpret, fail_fast=True)
        killed = not verdict.ok and not _unverifiable(verdict.error)
        step, detail = verdict.step if killed else "", verdict.error or ""
    return Outcome(mutant.name, killed, step, detail.splitlines()[0][:300] if detail else "", time.perf_counter() - start, mutant.equivalent)


def _job(args: tuple) -> Outcome:
    kind, item, base, work, interpret = args
    try:
        return _control(item, base, interpret) if kind == "control" else _plant(item, base, work, interpret)
    except AttnforgeError as err:  # a mutant whose pattern no longer applies is the suite's own failure
        name = f"control:{item}" if kind == "control" else item.name
        return Outcome(name, False, "", f"ERROR: {err.render()}", 0.0, None if kind == "control" else item.equivalent)


# One mutant may hang its process or crash it (an out-of-bounds write in the interpreter corrupts
# memory): each job runs in a process of its own, and a crash or a hang is recorded, not fatal.
JOB_TIMEOUT_S = 900


def _child(args: tuple, conn) -> None:
    conn.send(_job(args))
    conn.close()


def _lost(args: tuple, why: str, seconds: float) -> Outcome:
    kind, item = args[0], args[1]
    if kind == "control":
        return Outcome(f"control:{item}", True, "verify", why, seconds)
    return Outcome(item.name, True, "verify", why, seconds, item.equivalent)


def _isolated(work: list[tuple], jobs: int, progress: Callable[[Outcome], None] | None) -> list[Outcome]:
    ctx = mp.get_context("spawn")
    pending, running, done = list(enumerate(work)), {}, {}
    while pending or running:
        while pending and len(running) < max(1, jobs):
            index, args = pending.pop(0)
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(args, send), daemon=True)
            proc.start()
            send.close()
            running[proc] = (index, args, receive, time.perf_counter())
        for proc, (index, args, receive, started) in list(running.items()):
            outcome = None
            elapsed = time.perf_counter() - started
            if receive.poll(0.05):
                try:
                    outcome = receive.recv()
                except EOFError:  # it died while sending
                    outcome = _lost(args, f"the verifying process died (exit code {proc.exitcode})", elapsed)
            elif not proc.is_alive():
                outcome = _lost(args, f"the kernel crashed the verifying process (exit code {proc.exitcode})", elapsed)
            elif elapsed > JOB_TIMEOUT_S:
                proc.kill()
                outcome = _lost(args, f"the gate did not finish within {JOB_TIMEOUT_S} s", elapsed)
            if outcome is not None:
                proc.join()
                del running[proc]
                done[index] = outcome
                if progress:
                    progress(outcome)
    return [done[i] for i in range(len(work))]


def run(mutants: Iterable[Mutant] = MUTANTS, *, interpret: bool | None = None, jobs: int = 1,
        progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Controls first, then every mutant, each in a process of its own, ``jobs`` at a time."""
    mutants = list(mutants)
    keys = sorted({m.spec for m in mutants})
    with tempfile.TemporaryDirectory(prefix="attnforge-selftest-") as tmp:
        root = Path(tmp)
        bases = {key: str(_base(root, key, interpret)) for key in keys}
        models = {key: str(_model_base(root, key, Path(bases[key]))) for key in sorted({m.spec for m in mutants if m.where == "model"})}
        work = [("control", key, bases[key], tmp, interpret) for key in keys]
        work += [("control", f"model-{key}", models[key], tmp, interpret) for key in models]
        work += [("mutant", m, models[m.spec] if m.where == "model" else bases[m.spec], tmp, interpret) for m in mutants]
        return _isolated(work, jobs, progress)


def summary(outcomes: list[Outcome]) -> tuple[int, int, str]:
    """(killed, non-equivalent mutants, the closing line ``mutants: K of N killed``)."""
    real = [o for o in outcomes if not o.name.startswith("control:") and not o.equivalent]
    killed = sum(o.killed for o in real)
    equivalent = [o for o in outcomes if o.equivalent]
    line = f"mutants: {killed} of {len(real)} killed"
    if equivalent:
        line += f" ({sum(not o.killed for o in equivalent)} of {len(equivalent)} equivalent mutant(s) survived, as they should)"
    return killed, len(real), line
