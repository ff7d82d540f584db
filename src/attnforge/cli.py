"""The ``attnforge`` command line: the parser, ``main``, and the commands that have no module of
their own (``tl`` is in ``tl/command.py``, ``bench``, ``tune``, ``warmup`` and the LLM commands in theirs).

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
from typing import NoReturn, Sequence

from rich.console import Console

from .bench.command import add_parser as add_bench_parser
from .tune.command import add_parser as add_tune_parser
from .warmup_command import add_parser as add_warmup_parser
from .llm.command import add_generate_llm_arguments, add_prompts_parser, add_replay_parser
from .errors import AttnforgeError, TargetError, shorten
from .generate_summary import print_summary
from .spec import add_spec_arguments, kernel_dtype_note, spec_from_args
from .targets import DEFAULT_TARGET, Target, format_targets_table, get_target, targets_as_dicts
from .tl.command import add_parser as add_tl_parser, read_tl

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
    print_summary(result, console)
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

    add_tl_parser(sub)  # attnforge tl check|run|library (tl/command.py)

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
