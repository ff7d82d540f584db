"""The ``attnforge tl`` commands: ``check``, ``run`` and ``library`` (the language is in ``tl/``),
and ``read_tl``, how the command line reads a TL program (a file, or ``lib:NAME`` for a shipped one)."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Sequence

from rich.console import Console

from ..dtypes import STORAGE_DTYPES
from ..errors import AttnforgeError, Position, TLSyntaxError, shorten
from ..targets import get_target
from . import catalog
from .limits import MAX_SOURCE_BYTES

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

def cmd_tl_check(ns: argparse.Namespace, console: Console) -> int:
    from .checker import check
    from .parser import parse

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
    from .checker import check
    from .harness import Shape, default_shapes, run_and_compare, specialize
    from .parser import parse

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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``tl`` and its subcommands on the CLI's subparsers."""
    fmt = argparse.RawDescriptionHelpFormatter
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
                        "several query blocks, ragged K/V tails, Sq > Sk and a decode step are all exercised; a fourth, a decode step "
                        "over ten K/V tiles, when the split count is chosen at launch)")
    p.add_argument("--dtype", choices=RUN_DTYPES, default="float64", help="float64 runs exactly; a format rounds inputs, casts and stores to it (default float64)")
    p.add_argument("--target", help="target to check the program for before running it (default: its 'target' line); a program the checker rejects is not run")
    p.add_argument("--param", action="append", metavar="NAME=INT", help="override a header parameter, or fix a launch-time value "
                   "(--param NSPLIT=4), e.g. --param BM=16 (repeatable)")
    p.add_argument("--scalar", action="append", metavar="NAME=VALUE", help="runtime scalar value, e.g. --scalar softcap=30 (defaults: scale=1/sqrt(D), softcap=1.5, window_left=37, window_right=11 or 0 when causal)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed for the inputs, >= 0 (default 0)")
    p.set_defaults(func=cmd_tl_run)

    p = tl_sub.add_parser("library", help="list the shipped TL programs, or print one", description="List the canonical TL programs shipped with attnforge, or print one by name.")
    p.add_argument("name", nargs="?", help="print this program")
    p.set_defaults(func=cmd_tl_library)
