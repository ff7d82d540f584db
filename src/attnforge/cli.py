"""The ``attnforge`` command line.

Exit codes: 0 success; 1 the program or kernel was checked or run and failed; 2 bad input
(unknown file, target, shape or flag), with a message saying what to change; 130 interrupted (Ctrl-C);
141 the reader of the output went away (a closed pipe).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from rich.console import Console

from .bench.command import add_parser as add_bench_parser
from .tune.command import add_parser as add_tune_parser
from .warmup_command import add_parser as add_warmup_parser
from .dtypes import STORAGE_DTYPES
from .llm.command import add_generate_llm_arguments, add_prompts_parser, add_replay_parser
from .errors import AttnforgeError, Position, TargetError, TLSyntaxError, shorten
from .spec import add_spec_arguments, kernel_dtype_note, spec_from_args
from .targets import DEFAULT_TARGET, Target, format_targets_table, get_target, targets_as_dicts
from .tl import catalog
from .tl.limits import MAX_SOURCE_BYTES

RUN_DTYPES = ("float64",) + STORAGE_DTYPES  # float64: exact; a storage format: rounded like a kernel


LIB_PREFIX = "lib:"  # `attnforge tl check lib:gqa_fwd` names a shipped program (attnforge tl library)


def read_tl(path: str) -> tuple[str, str]:
    """The text of a TL program and the name to report it by. ``lib:NAME`` is a shipped program;
    anything else is a path to a file, which must exist: a missing file is an error, never the
    shipped program of the same name."""
    shipped_names = ", ".join(LIB_PREFIX + name.removesuffix(".tl") for name in catalog.programs())
    if path.startswith(LIB_PREFIX):
        shipped = catalog.file_name(path[len(LIB_PREFIX):])
        if shipped is None:
            raise AttnforgeError(f"no shipped TL program {shorten(repr(path[len(LIB_PREFIX):]))}", where="FILE", hint="shipped: " + shipped_names)
        return catalog.source(shipped), shipped
    p = Path(path)
    same_name = catalog.file_name(p.name)
    hint = (f"for the shipped program of that name write {LIB_PREFIX}{same_name.removesuffix('.tl')}" if same_name
            else f"give the path of a TL file, or a shipped program: {shipped_names}")
    try:
        if not p.exists():
            raise AttnforgeError(f"no such TL file: {shorten(path)}", where="FILE", hint=hint)
        if not p.is_file():
            raise AttnforgeError(f"{shorten(path)} is not a regular file", where="FILE", hint=hint)
        if p.stat().st_size > MAX_SOURCE_BYTES:
            raise AttnforgeError(f"{shorten(path)} has {p.stat().st_size:,} bytes; a TL file has at most {MAX_SOURCE_BYTES:,}", where="FILE",
                                 hint="a TL program is a few kilobytes: is this the right file?")
        raw = p.read_bytes()
    except (OSError, ValueError) as err:  # unreadable, a name too long, a NUL in the path
        raise AttnforgeError(f"cannot read TL file {shorten(path)}: {getattr(err, 'strerror', None) or err}", where="FILE", hint=hint) from None
    try:
        return raw.decode("utf-8"), str(p)
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        col = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise TLSyntaxError(f"byte 0x{raw[err.start]:02x} is not UTF-8 text", where=Position(line, col, str(p)), hint="TL files are UTF-8 text") from None


def _head_dims(text: str | None) -> tuple[int, int | None]:
    if text is None:
        return 128, None
    parts = [p.strip() for p in text.split(",")]
    # isdecimal and ASCII: int() refuses other digits ('²') and more than 4300 of them
    if len(parts) not in (1, 2) or not all(p.isascii() and p.isdecimal() and len(p) <= 9 and int(p) > 0 for p in parts):
        raise AttnforgeError(f"--head-dim {shorten(repr(text), 80)} is not D or D,DV", where="--head-dim", hint="e.g. --head-dim 128 or --head-dim 192,128")
    return int(parts[0]), (int(parts[1]) if len(parts) == 2 else None)


def _seed(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return int(text)


def _number(text: str) -> int | float:
    """An integer when written as one (window sizes bound loops), else a real number."""
    text = text.strip()
    return int(text) if text.lstrip("+-").isdigit() else float(text)


def _assignments(items: Sequence[str], flag: str, cast) -> dict:
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = cast(value)
        except ValueError:
            raise AttnforgeError(f"{flag} {shorten(repr(item), 80)} is not NAME=VALUE", where=flag, hint=f"e.g. {flag} {'BM=64' if flag == '--param' else 'softcap=30'}") from None
    return out


# ---------------------------------------------------------------- commands


def cmd_targets(ns: argparse.Namespace, console: Console) -> int:
    if ns.json:
        print(json.dumps(targets_as_dicts(), indent=2))
    else:
        console.print(format_targets_table())
    return 0


def cmd_backends(ns: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from .backends import get_backend, names

    if ns.manual is not None or ns.target is not None:
        return _print_manual(ns)
    rows = [(name, get_backend(name)) for name in names()]
    if ns.json:
        print(json.dumps([{"name": name, "source_file": b.source_file, **dataclasses.asdict(b.capabilities())} for name, b in rows], indent=2))
        return 0
    table = Table(title="attnforge backends (stage 2: TL -> GPU code); --backend auto picks the first that builds a spec", title_justify="left")
    for col in ("name", "language", "targets", "dtypes", "features"):
        table.add_column(col)
    for name, b in rows:
        caps = b.capabilities()
        table.add_row(name, caps.language, caps.targets, ", ".join(caps.dtypes), ", ".join(caps.features))
    console.print(table)
    for name, b in rows:
        for note in b.capabilities().notes:
            console.print(f"{name}: {note}", style="dim", markup=False)
    return 0


def _print_manual(ns: argparse.Namespace) -> int:
    """``attnforge backends --manual NAME``: the translation manual a model reads for that backend."""
    if ns.manual != "cuda":
        raise AttnforgeError(f"no translation manual for {ns.manual!r}" if ns.manual else "--target goes with --manual NAME",
                             where="--manual", hint="'--manual cuda'; Triton's mapping is in the stage2_translate prompt "
                                                    "('attnforge prompts show stage2_translate')")
    from .backends.cuda.manual import translation_manual

    print(translation_manual(get_target(ns.target) if ns.target else None))
    return 0


def cmd_tl_check(ns: argparse.Namespace, console: Console) -> int:
    from .tl.checker import check
    from .tl.parser import parse

    text, name = read_tl(ns.file)
    program = parse(text, file=name)
    d, dv = _head_dims(ns.head_dim)
    target = get_target(ns.target) if ns.target is not None else None
    result = check(program, target, head_dim=d, head_dim_v=dv, sketch=ns.sketch, file=name)
    if ns.json:
        print(json.dumps({
            "file": name, "ok": result.ok, "target": result.target.name if result.target else None,
            "open_params": result.open_params,
            "findings": [f.__dict__ for f in result.findings],
            "resources": [r.__dict__ for r in result.resources],
        }, indent=2))
        return 0 if result.ok else 1
    shown = [f for f in result.findings if ns.verbose or f.severity != "info"]
    for f in shown:
        style = {"error": "red", "warning": "yellow"}.get(f.severity, "dim")
        console.print(f.render(name), style=style, markup=False, highlight=False)
    where = f"{result.target.name} ({result.target.sm})" if result.target else "no target"
    for r in result.resources:
        if r.smem_bytes is not None:
            console.print(f"{r.kernel}: shared memory {r.smem_bytes / 1024:.0f} KiB, about {r.regs_per_thread} registers/thread at {r.threads} threads", style="dim", highlight=False)
    if result.open_params:
        console.print(f"open parameters: {', '.join(result.open_params)}", markup=False, highlight=False)
    errors = len(result.errors)
    if errors:
        console.print(f"{name}: {errors} error(s) for {where}", style="bold red", markup=False, highlight=False)
        return 1
    console.print(f"{name}: clean for {where} (D={d}, Dv={dv or d})", style="bold green", markup=False, highlight=False)
    return 0


def cmd_tl_run(ns: argparse.Namespace, console: Console) -> int:
    from .tl.checker import check
    from .tl.harness import Shape, default_shapes, run_and_compare, specialize
    from .tl.parser import parse

    text, name = read_tl(ns.file)
    dtype = None if ns.dtype == "float64" else ns.dtype
    params = _assignments(ns.param, "--param", int)
    scalars = _assignments(ns.scalar, "--scalar", _number)
    # Check exactly the program that will run: --dtype and --param applied.
    program = specialize(parse(text, file=name), dtype=dtype, params=params)
    shapes = [Shape.parse(s) for s in ns.shape] if ns.shape else default_shapes(program)
    target = get_target(ns.target) if ns.target is not None else None
    result = check(program, target, head_dim=shapes[0].D, head_dim_v=shapes[0].Dv, file=name)
    for f in result.errors:
        console.print(f.render(name), style="red", markup=False, highlight=False)
    if not result.ok:
        where = f"{result.target.name}" if result.target else "any target"
        console.print(f"{name}: the checker rejects it for {where}; not run", style="bold red", markup=False, highlight=False)
        return 1
    failed = 0
    for shape in shapes:
        with _progress(console, str(shape)) as step:
            report = run_and_compare(program, shape, dtype=dtype, seed=ns.seed, scalars=scalars, file=name, progress=step)
        failed += not report.passed
        console.print(report.line(), style="green" if report.passed else "bold red", markup=False, highlight=False)
    verdict = "verified" if not failed else f"{failed} of {len(shapes)} shape(s) FAILED"
    console.print(f"{name}: {verdict} against the float64 reference", style="bold green" if not failed else "bold red", markup=False, highlight=False)
    return 1 if failed else 0


@contextlib.contextmanager
def _progress(console: Console, what: str):
    """A transient bar over program instances on a terminal; nothing when output is piped."""
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def step(kernel: str, done: int, total: int) -> None:
            if kernel not in tasks:
                tasks[kernel] = bar.add_task(f"{kernel} {what}", total=total)
            bar.update(tasks[kernel], completed=done)
        yield step


def cmd_tl_library(ns: argparse.Namespace, console: Console) -> int:
    if ns.name:
        print(catalog.source(ns.name.removeprefix(LIB_PREFIX)), end="")  # lib:NAME, as tl check and run take it
        return 0
    for file, doc in catalog.programs().items():
        console.print(f"{file:<28}{doc}", markup=False, highlight=False)
    return 0


def cmd_spec_validate(ns: argparse.Namespace, console: Console) -> int:
    from .spec import spec_from_args

    if ns.file is not None:
        if ns.spec is not None:
            raise AttnforgeError("give the spec file once: as FILE or as --spec", where="FILE")
        ns.spec = ns.file
    spec = spec_from_args(ns)
    if ns.json:
        print(json.dumps(spec.to_dict(), indent=2))
    else:
        console.print(f"{ns.spec or 'flags'}: valid: {spec.describe()}", style="green", markup=False, highlight=False)
    note = kernel_dtype_note(spec)
    if note is not None:  # on stderr, so that --json output stays JSON
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"note: the spec is valid, but {note}", style="yellow", markup=False)
    return 0


def resolve_target(name: str, console: Console) -> Target:
    """A table target; ``auto`` is the local GPU, or DEFAULT_TARGET (said aloud) when there is none."""
    if name != "auto":
        return get_target(name)
    try:
        return get_target("auto")
    except TargetError as err:
        console.print(f"note: {err.args[0]}; generating for the default target {DEFAULT_TARGET} (pass --target to choose)", style="yellow", markup=False)
        return get_target(DEFAULT_TARGET)


def cmd_generate(ns: argparse.Namespace, console: Console) -> int:
    if ns.llm is not None or ns.llm_flags: return cmd_generate_llm(ns, console)  # noqa: E701 (the LLM path: llm/command.py)
    from .errors import OutputError
    from .outdir import destination

    # Bad input is refused before torch is imported (seconds): the spec, the --tl file, --out.
    spec = spec_from_args(ns)
    tl_text, tl_name = read_tl(ns.tl) if ns.tl is not None else (None, "kernel.tl")
    destination(ns.out)  # a file, or a directory of other files, is refused before any work
    from .backends import choose_backend_and_reason
    from .generate import generate

    target = resolve_target(ns.target, console)
    backend, backend_reason = choose_backend_and_reason(ns.backend, spec, target)
    console.print(f"attnforge generate: {spec.describe()} for {target.name} ({target.sm}) with the {backend.name} backend -> {ns.out}", style="bold", markup=False)
    if ns.backend == "auto":
        console.print(f"backend {backend_reason}", style="dim", markup=False, highlight=False)
    status = console.status("") if console.is_terminal else contextlib.nullcontext()
    with status as spinner:
        def progress(event: str, text: str) -> None:
            if event == "start":
                if spinner is not None:
                    spinner.update(f"{text} ...")
                return
            style = {"ok": "green", "fail": "bold red", "info": "dim"}[event]
            mark = {"ok": "ok  ", "fail": "FAIL", "info": "    "}[event]
            if event == "fail" and "\n" in text.strip():  # a traceback (a bug in a step) goes to report.md only
                text = text.strip().splitlines()[0] + f" (the whole message is in {ns.out}/report.md)"
            console.print(f"{mark} {text}", style=style, markup=False, highlight=False)
        try:
            result = generate(spec, target, ns.out, backend=backend, run_verification=not ns.no_verify, tma=not ns.pointer_loads,
                              tl=tl_text, tl_file=tl_name, progress=progress, backend_reason=backend_reason)
        except OutputError as err:  # the run could not be written (a full disk): a failure, not bad input
            Console(stderr=True, highlight=False, soft_wrap=True).print(f"error: {err}", style="bold red", markup=False)
            return 1
    _summary(result, console)
    return exit_code(result.ok, result.verified)


def cmd_generate_llm(ns: argparse.Namespace, console: Console) -> int:
    """``generate --llm PROVIDER:MODEL``: a model writes the kernel, the gates judge it (llm/command.py)."""
    from .llm.command import cmd_generate_llm as command

    return command(ns, console)


def cmd_replay(ns: argparse.Namespace, console: Console) -> int:
    """``attnforge replay DIR``: a saved --llm run again, offline, to the same kernel (llm/replay_run.py)."""
    from .llm.command import cmd_replay as command

    return command(ns, console)


def cmd_prompts(ns: argparse.Namespace, console: Console) -> int:
    """``attnforge prompts list|show NAME``: the LLM prompt templates."""
    from .llm.command import cmd_prompts as command

    return command(ns, console)


# `generate` and `verify`: 0 verified, 1 a step or a check failed, 2 bad input, 3 generated but not verified.
NOT_VERIFIED = 3


def exit_code(ok: bool, verified: bool) -> int:
    return 1 if not ok else (0 if verified else NOT_VERIFIED)


def cmd_verify(ns: argparse.Namespace, console: Console) -> int:
    from .gate import verify_directory

    spec = spec_from_args(ns) if (ns.spec or ns.heads is not None) else None
    target = get_target(ns.target) if ns.target else None

    def case_done(done: int, total: int, case) -> None:
        mark = "ok  " if case.passed else "FAIL"
        console.print(f"{mark} verify {done}/{total} {case.shape}: err(O) {case.err_o:.2e}, err(LSE) {case.err_lse:.2e}; "
                      f"{case.error or case.worst}", style="green" if case.passed else "bold red", markup=False, highlight=False)
    verdict = verify_directory(ns.directory, spec=spec, target=target, interpret=True if ns.interpret else None, progress=case_done)
    console.print(f"{ns.directory}: {verdict.spec.describe()} for {verdict.target.name}", style="bold", markup=False)
    if verdict.model is not None:
        console.print(f"its kernel module was written by {verdict.model}: statically gated, then verified in the sandbox", markup=False, highlight=False)
    for rep in verdict.interpret:
        console.print(f"interpret {rep.line()}", style="green" if rep.passed else "bold red", markup=False, highlight=False)
    if verdict.ok:
        console.print(verdict.verification.statement, style="bold green", markup=False)
        return 0
    console.print(f"FAILED at {verdict.step}: {verdict.error}", style="bold red", markup=False, highlight=False)
    return 1


def cmd_selftest(ns: argparse.Namespace, console: Console) -> int:
    from .selftest import MUTANTS, run, summary

    chosen = [m for m in MUTANTS if not ns.only or m.name in ns.only]
    unknown = sorted(set(ns.only or ()) - {m.name for m in MUTANTS})
    if unknown:
        raise AttnforgeError(f"no mutant named {', '.join(unknown)}", where="--only", hint="mutants: " + ", ".join(m.name for m in MUTANTS))
    where = "in the interpreter" if ns.quick else "natively where a GPU is present, else in the interpreter"
    console.print(f"attnforge selftest: {len(chosen)} mutant(s) of planned kernels, through the gate {where}", style="bold", markup=False)
    outcomes = run(chosen, interpret=True if ns.quick else None, jobs=ns.jobs,
                   progress=lambda o: console.print(o.line(), style="green" if o.as_expected else "bold red", markup=False, highlight=False))
    killed, total, line = summary(outcomes)
    ok = all(o.as_expected for o in outcomes)
    console.print(line, style="bold green" if ok else "bold red", markup=False, highlight=False)
    return 0 if ok else 1


def _times(result) -> str:
    """Total wall time, each step's (summed over the plans tried), and the compiles of plans that did not fit."""
    per_step: dict[str, float] = {}
    for s in result.steps:
        per_step[s.name] = per_step.get(s.name, 0.0) + s.seconds
    text = f"total {result.total_seconds:.1f}s: " + ", ".join(f"{name} {sec:.1f}s" for name, sec in per_step.items())
    if result.rejected_compiles:
        text += f"; rejected compiles {result.rejected_seconds:.1f}s ({result.rejected_compiles} candidate(s) that did not fit {result.target.name})"
    return text


def _files(directory) -> str:
    """What is really in the kernel directory: its files, then build/'s."""
    from .report import contents

    files = contents(Path(directory)) if Path(directory).is_dir() else []
    top = [f for f in files if "/" not in f]
    nested: dict[str, list[str]] = {}
    for f in files:
        if "/" in f:
            head, _, rest = f.partition("/")
            nested.setdefault(head, []).append(rest)
    parts = top + [f"{d}/ ({', '.join(names)})" for d, names in nested.items()]
    return f"{directory}: " + (", ".join(parts) if parts else "(nothing)")


def _summary(result, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    from . import roofline

    # Text, not markup: a modifier such as score_mod[...] or a path with brackets is shown as it is.
    table = Table(title=Text(f"{result.spec.describe()} on {result.target.name}"), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    if result.backend_reason:
        table.add_row("backend", Text(result.backend_reason))
    if result.plan is not None:
        table.add_row("plan", f"{result.plan.kind}: " + ", ".join(f"{k}={v}" for k, v in result.plan.params.items()))
    estimates = roofline.estimates(result.spec, result.target, result.compile_reports)
    for r in result.compile_reports:
        tc = "tensor cores" if r.tensor_cores_used else ("NO tensor cores (FMA only)" if "fma-only" in r.instructions else "no GEMM")
        table.add_row(f"compile {r.kernel}", f"{r.ptx_target}: {r.registers} regs, {r.shared_bytes / 1024:.0f} KiB shared, {r.spill_bytes} B spills, {', '.join(r.instructions)}; {tc}")
        if estimates.get(r.kernel) is not None:
            table.add_row(f"{roofline.WORD} {r.kernel}", Text(estimates[r.kernel].line()))
    v = result.verification
    if v is not None:
        table.add_row("verify", f"{sum(c.passed for c in v.cases)}/{len(v.cases)} cases pass on {v.device}; max err(O) {v.max_err_o:.2e}, max err(LSE) {v.max_err_lse:.2e}")
    table.add_row("time", _times(result))
    table.add_row("files", Text(_files(result.out)))
    table.add_row("result", Text(result.status), style="bold green" if result.verified else ("bold yellow" if result.ok else "bold red"))
    console.print(table)


# ---------------------------------------------------------------- argument parsing


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), whose errors quote at most a short piece of a
    long argument (``argument --seed: invalid _seed value: '111...'``)."""

    def error(self, message: str) -> NoReturn:
        super().error(shorten(message, 300))


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="attnforge", formatter_class=fmt,
        description="Generate fast, verified attention kernels by way of a Thinking Language (TL).\n\n"
                    "TL-Code says how a kernel moves tiles through global, shared and register memory;\n"
                    "attnforge checks it against a GPU's limits and runs it against a float64 reference.",
        epilog="examples:\n"
               "  attnforge targets\n"
               "  attnforge backends\n"
               "  attnforge tl library\n"
               "  attnforge tl check lib:gqa_causal_fwd --target h100\n"
               "  attnforge tl run lib:gqa_causal_fwd --shape 2,32,8,300,437,128 --dtype bf16\n"
               "  attnforge spec validate myspec.toml\n"
               "  attnforge generate --target h100 --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16 --causal --out out/",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("generate", formatter_class=fmt, help="generate, compile and verify a kernel for a spec and a GPU (the main job)",
                       description="Plan a TL program for the spec and target, check it, interpret it against the float64\n"
                                   "reference, translate it to Triton, compile it for the target (no GPU needed: shared\n"
                                   "memory, registers, spills, tensor-core instructions), and verify the kernel against the\n"
                                   "reference (natively on a GPU, in Triton's interpreter on a CPU). Writes into --out:\n"
                                   "kernel.tl, kernel_triton.py (attnforge.load(DIR) gives a callable; or import it and call\n"
                                   "launch(q, k, v, o, lse, scale=...)),\n"
                                   "report.json, report.md, build/ (PTX and cubin). The summary says what was verified and how\n"
                                   "(natively on the target's architecture, on another GPU, or in the interpreter).\n"
                                   "Exit 0 verified, 1 a step failed, 2 bad input, 3 generated but not verified (--no-verify).",
                       epilog="examples:\n"
                              "  attnforge generate --target h100 --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16 --causal --out out/\n"
                              "  attnforge generate --spec examples/gqa_causal.toml --target a100 --out out-a100/\n"
                              "  attnforge generate --heads 8 --head-dim 96 --window=256,0 --softcap 30 --out out-swa/\n"
                              "  attnforge generate --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 8192 --head-dim 128 --out decode/\n"
                              f"\n--target auto (the default) picks the local GPU; without one it generates for {DEFAULT_TARGET}.")
    p.add_argument("--target", default="auto", help=f"GPU to generate for: a name from 'attnforge targets' (h100, a100, l4, t4, ...), sm_XX, or auto (default: the local GPU, else {DEFAULT_TARGET})")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the kernel and its reports, written whole when the run ends (created; an earlier "
                                                                "attnforge output there is replaced; a file or a directory of other files is refused)")
    p.add_argument("--backend", default="auto", metavar="NAME",
                   help="stage-2 backend: auto (the first that builds the spec) or a name from 'attnforge backends' (triton)")
    p.add_argument("--no-verify", action="store_true", help="stop after compiling (skip running the kernel against the reference); exits 3, never 0")
    p.add_argument("--tl", metavar="FILE", help="use this TL program instead of the built-in planner's; it goes through every gate "
                                                 "(checked for the target, judged against the spec's reference, translated, compiled, verified)")
    p.add_argument("--pointer-loads", action="store_true", help="never read q/k/v through TMA descriptors (sm_90+ uses them when head dims allow): for callers with strides TMA cannot take")
    add_spec_arguments(p, kernels=True)
    add_generate_llm_arguments(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("verify", formatter_class=fmt, help="re-run the whole gate on a kernel directory (after an edit, or for a kernel written elsewhere)",
                       description="Check the directory's kernel.tl for the target, judge it against the spec (its claims, then its\n"
                                   "numbers in float64), and verify its kernel source against the spec's float64 reference: natively\n"
                                   "on a GPU, else in the interpreter. The spec and target come from the directory's report.json\n"
                                   "unless given. Prints each case and the worst row; exit 0 verified, 1 refused, 2 bad input.",
                       epilog="examples:\n  attnforge verify out/\n  attnforge verify out/ --target a100 --interpret\n"
                              "  attnforge verify mykernel/ --spec myspec.toml --target h100")
    p.add_argument("directory", metavar="DIR", help="a directory 'attnforge generate --out DIR' wrote (kernel.tl, the kernel source, report.json)")
    p.add_argument("--target", help="the target the kernel is for (default: the one in DIR/report.json)")
    p.add_argument("--interpret", action="store_true", help="verify in the interpreter even when a GPU is present")
    add_spec_arguments(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("selftest", formatter_class=fmt, help="plant bugs in generated kernels and TL programs and check that the gate kills each",
                       description="The mutation suite: each mutant is one planted bug (a loop bound or mask off by one, causal\n"
                                   "alignment swapped, a window bound, the GQA head map, swapped strides, the LSE not stored, rows\n"
                                   "written past Sq, the rescale or normalisation dropped, the decode combine weights dropped, the\n"
                                   "causal split bound, exp vs exp2, a wrong TMA box, ...). TL mutants go through every step of\n"
                                   "'generate --tl'; kernel mutants through 'attnforge verify'. Each line says which step killed the\n"
                                   "mutant; an equivalent mutant must survive, and says why it is equivalent. The last line is\n"
                                   "'mutants: K of N killed'. Exit 0 when every non-equivalent mutant is killed.",
                       epilog="examples:\n  attnforge selftest --quick           # in the interpreter (CI)\n"
                              "  attnforge selftest --jobs 8           # natively on a GPU\n  attnforge selftest --quick --only gqa_map_changed")
    p.add_argument("--quick", action="store_true", help="verify in the interpreter even when a GPU is present (what CI runs)")
    p.add_argument("--jobs", type=int, default=2, metavar="N", help="worker processes (default 2)")
    p.add_argument("--only", action="append", metavar="NAME", help="run this mutant only (repeatable)")
    p.set_defaults(func=cmd_selftest)

    p = sub.add_parser("backends", help="list the stage-2 backends and what each supports",
                       description="List the backends that translate TL into GPU code, with the targets, data types and features each supports.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--manual", metavar="NAME", help="print a backend's translation manual (cuda: made from its translation table), "
                                                    "for one target with --target")
    p.add_argument("--target", help="with --manual: the target whose instructions it names (default: every target)")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("targets", help="print the table of GPU targets", description="Print the GPUs attnforge knows, with their limits, peak rates and tensor-core instructions.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_targets)

    tl = sub.add_parser("tl", help="check, run or list Thinking Language programs", description="Work with TL-Code (see docs/TL.md).")
    tl.set_defaults(help_parser=tl)
    tl_sub = tl.add_subparsers(dest="tl_command", metavar="TL_COMMAND")

    p = tl_sub.add_parser("check", formatter_class=fmt, help="statically check a TL program for a target",
                          description="Check names, shapes, data types, memory levels and the target's limits\n"
                                      "(tensor-core data types, shared memory, registers, MMA alignment).\n"
                                      "Prints file:line:col: code: message (hint) per finding; exit 1 on errors.",
                          epilog="FILE is a path, or lib:NAME for a shipped program (attnforge tl library), e.g. lib:gqa_causal_fwd.")
    p.add_argument("file", metavar="FILE", help="path of a TL file, or lib:NAME for a shipped program")
    p.add_argument("--target", help="GPU to check for: a name from 'attnforge targets' (h100, a100, t4, ...), sm_XX, or auto (default: the program's own 'target' line)")
    p.add_argument("--head-dim", metavar="D[,DV]", help="head dims used for the shared-memory and register estimates (default 128)")
    p.add_argument("--sketch", action="store_true", help="the program is a sketch: open parameters are expected, resource checks that need them are skipped")
    p.add_argument("--verbose", "-v", action="store_true", help="also print info findings")
    p.add_argument("--json", action="store_true", help="print findings and resource estimates as JSON")
    p.set_defaults(func=cmd_tl_check)

    p = tl_sub.add_parser("run", formatter_class=fmt, help="interpret a TL program and compare it with the float64 reference",
                          description="Run TL-Code tile by tile in numpy on fresh random inputs and compare O and the\n"
                                      "log-sum-exp with a float64 attention reference of what the program's 'computes'\n"
                                      "line claims. Exit 1 when any shape fails.",
                          epilog="tolerances: O by ||O - ref|| / ||ref||: float64 1e-10, fp32 1e-4, fp16 5e-3, bf16 2e-2, fp8e4m3 1.5e-1,\n"
                                 "fp8e5m2 3e-1; LSE by max |LSE - ref| / (1 + |ref|): float64 1e-10, any rounded run 1e-5.\n"
                                 "Every 7th query row has logits near +-1000 (not in fp8 runs) to expose a missing max subtraction.\n"
                                 "limits (exit 2 past them): 2**26 elements per array (inputs, tiles, the reference's B*Hq*Sq*Sk scores);\n"
                                 "1,000,000 interpreter steps per shape (program instances, loop trips, statements); finite --scalar values.\n"
                                 "FILE is a path, or lib:NAME for a shipped program (attnforge tl library), e.g. lib:gqa_causal_fwd.")
    p.add_argument("file", metavar="FILE", help="path of a TL file, or lib:NAME for a shipped program")
    p.add_argument("--shape", action="append", metavar="B,HQ,HKV,SQ,SK,D[,DV]",
                   help="problem shape; repeat for several (default: three shapes sized from the program's BM/BN/NSPLIT so that "
                        "several query blocks, ragged K/V tails, Sq > Sk and a decode step are all exercised)")
    p.add_argument("--dtype", choices=RUN_DTYPES, default="float64", help="float64 runs exactly; a format rounds inputs, casts and stores to it (default float64)")
    p.add_argument("--target", help="target to check the program for before running it (default: its 'target' line); a program the checker rejects is not run")
    p.add_argument("--param", action="append", metavar="NAME=INT", help="override a header parameter, e.g. --param BM=16 (repeatable)")
    p.add_argument("--scalar", action="append", metavar="NAME=VALUE", help="runtime scalar value, e.g. --scalar softcap=30 (defaults: scale=1/sqrt(D), softcap=1.5, window_left=37, window_right=11 or 0 when causal)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed for the inputs, >= 0 (default 0)")
    p.set_defaults(func=cmd_tl_run)

    p = tl_sub.add_parser("library", help="list the shipped TL programs, or print one", description="List the canonical TL programs shipped with attnforge, or print one by name.")
    p.add_argument("name", nargs="?", help="print this program")
    p.set_defaults(func=cmd_tl_library)

    spec = sub.add_parser("spec", help="validate an attention spec file", description="Work with AttentionSpec files (.toml or .json).")
    spec.set_defaults(help_parser=spec)
    spec_sub = spec.add_subparsers(dest="spec_command", metavar="SPEC_COMMAND")
    p = spec_sub.add_parser("validate", formatter_class=fmt, help="check a spec (file and/or flags) and print what it describes",
                            description="Load a .toml or .json spec and/or spec flags, check every field, print a one-line\n"
                                        "description; exit 2 naming the field, its value and what is allowed when invalid.",
                            epilog="examples:\n  attnforge spec validate examples/gqa_causal.toml\n"
                                   "  attnforge spec validate --heads 32 --kv-heads 8 --head-dim 128 --causal --window=1024,0\n"
                                   "  attnforge spec validate examples/gqa_causal.toml --dtype fp16 --json")
    p.add_argument("file", metavar="FILE", nargs="?", help="spec file (.toml or .json); flags override its fields")
    p.add_argument("--json", action="store_true", help="print the normalised spec as JSON")
    add_spec_arguments(p)
    p.set_defaults(func=cmd_spec_validate)

    add_replay_parser(sub, cmd_replay)
    add_prompts_parser(sub, cmd_prompts)
    add_bench_parser(sub)  # attnforge bench (bench/command.py)
    add_warmup_parser(sub)  # attnforge warmup (warmup_command.py)
    add_tune_parser(sub)  # attnforge tune (tune/command.py)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    # Findings are read by tools and LLMs: never wrap a line when the output is not a terminal.
    console = Console(highlight=False, soft_wrap=not sys.stdout.isatty(), width=None if sys.stdout.isatty() else 200)
    if not hasattr(ns, "func"):
        # `attnforge`, `attnforge tl` or `attnforge spec` alone: show that level's help; a command is missing.
        getattr(ns, "help_parser", parser).print_help(sys.stderr)
        return 2
    try:
        return ns.func(ns, console)
    except AttnforgeError as err:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"error: {err}", style="bold red", markup=False)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's code for SIGINT, not a traceback
        print("interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:  # the reader of the output went away (attnforge ... | head): stop quietly
        with contextlib.suppress(OSError, ValueError):  # so that the flush at exit does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # the shell's code for SIGPIPE, as any other tool in a pipe


if __name__ == "__main__":
    sys.exit(main())
