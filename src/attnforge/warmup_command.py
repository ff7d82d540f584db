"""The ``attnforge warmup`` command (the work is in ``warmup.py``)."""

from __future__ import annotations

import argparse

from rich.console import Console

WARMUP_HELP = """\
Build the cached kernels of a list of specs ahead of time, so that the first attention() call
of each in production is a cache hit (for deployment; the cache is $ATTNFORGE_CACHE or
~/.cache/attnforge, as attention() uses it).

A spec list is a JSON file holding a list of spec tables (or {"specs": [...]}), a TOML file with
[[specs]] tables, or a single spec file; fields as in `attnforge spec validate`. Batch and
sequence lengths do not matter for prefill (one kernel serves every length; where the tuning
database picks other parameters for another length bucket, that kernel is built too); for decode
(Sq = 1) they pick the split count, as at run time.

examples:
  attnforge warmup model_specs.json                 # for the local GPU
  attnforge warmup a.toml b.toml --target h100      # build for an H100 (verified in the interpreter here)

exit codes: 0 every spec built and verified, 1 a spec failed (the others still built), 2 bad input
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("warmup", formatter_class=argparse.RawDescriptionHelpFormatter, description=WARMUP_HELP,
                       help="build the cached kernels of a list of specs ahead of time (deployment)")
    p.add_argument("files", nargs="+", metavar="FILE", help="spec lists or spec files (.json / .toml)")
    p.add_argument("--target", default="auto", help="GPU to build for (default: the local GPU; without one, the default target)")
    p.add_argument("--backend", default="auto", help="stage-2 backend (default auto; see `attnforge backends`)")
    p.add_argument("--pointer-loads", action="store_true", help="kernels for strides TMA cannot read (as attention() builds for them)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace, console: Console) -> int:
    from .cli import resolve_target
    from .warmup import read_specs, warm

    specs = [spec for file in ns.files for spec in read_specs(file)]  # every file is read and validated before any build
    target = resolve_target(ns.target, console)
    console.print(f"attnforge warmup: {len(specs)} spec(s) for {target.name} ({target.sm})", style="bold", markup=False)

    def progress(i: int, built) -> None:
        if built.error is None:
            console.print(f"ok   [{i + 1}/{len(specs)}] {built.spec.describe()}: {built.seconds:.1f} s -> {built.path.parent}",
                          style="green", markup=False)
        else:
            console.print(f"FAIL [{i + 1}/{len(specs)}] {built.spec.describe()}: {built.error}", style="bold red", markup=False)

    results = warm(specs, target, backend=ns.backend, tma=not ns.pointer_loads, progress=progress)
    failed = sum(r.error is not None for r in results)
    total = sum(r.seconds for r in results)
    console.print(f"{len(results) - failed} of {len(results)} built in {total:.1f} s" + (f"; {failed} failed" if failed else ""),
                  style="bold red" if failed else "bold green", markup=False)
    return 1 if failed else 0
