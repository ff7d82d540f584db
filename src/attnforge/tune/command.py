"""The ``attnforge tune`` command (the search is in ``tune/search.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

TUNE_HELP = """\
Search a spec's TL parameters (BM, BN, warps, stages, TMA, persistent scheduling) on the local
GPU, every candidate verified before it is timed, and keep the fastest in the tuning database
that `attnforge generate` and attention() consult ($ATTNFORGE_TUNING, else tuning.json in the
kernel cache; the package ships one measured on an H200). A rejected candidate says why, and
rules out the candidates that would fail the same way.

The spec's lengths pick the sequence bucket (<=1024, <=4096, <=16384, >16384); --seq names one.
Without a GPU the candidates run in the interpreter on a tiny shape: the search works, the times
mean nothing for a GPU, and the result is recorded only into a database named with --db.

With several backends (--backend triton,gluon) each is searched, then their best kernels are
timed in turns on the same inputs and each is recorded with its head-to-head time: with
--backend auto, attnforge then builds this bucket with the backend that measured faster.

examples:
  attnforge tune --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16 --causal --seqlen-q 4096
  attnforge tune --spec myspec.toml --budget 120 --db tuning.json
  attnforge tune --backend triton,gluon --head-dim 128 --dtype bf16 --seqlen-q 16384 --max-candidates 2

exit codes: 0 a choice was recorded, 1 no candidate passed the gate, 2 bad input
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..spec import add_spec_arguments

    p = sub.add_parser("tune", formatter_class=argparse.RawDescriptionHelpFormatter, description=TUNE_HELP,
                       help="search a spec's TL parameters on this GPU and record the fastest verified choice")
    add_spec_arguments(p, kernels=True)
    p.add_argument("--target", default="auto", help="GPU target (default: the local GPU; tuning times it there)")
    p.add_argument("--backend", default="auto",
                   help="stage-2 backend (default auto), or several, comma-separated, to search each and time their best head to head")
    p.add_argument("--seq", choices=["<=1024", "<=4096", "<=16384", ">16384"], help="sequence bucket (default: from the spec's lengths)")
    p.add_argument("--budget", type=float, default=300.0, metavar="SECONDS", help="stop starting candidates after this long (default 300)")
    p.add_argument("--max-candidates", type=int, metavar="N",
                   help="try at most N candidates, in order: the planner's first choice (for gluon, then its best at each other "
                        "count of compute warpgroups), then the first choice's neighbours, nearest first")
    p.add_argument("--db", type=Path, help="database file to write (default: $ATTNFORGE_TUNING or the cache's tuning.json)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace, console: Console) -> int:
    from ..cli import resolve_target
    from ..errors import AttnforgeError
    from ..spec import spec_from_args
    from .search import tune, tune_head_to_head

    spec = spec_from_args(ns)
    if ns.budget <= 0 or (ns.max_candidates is not None and ns.max_candidates < 1):
        raise AttnforgeError("--budget and --max-candidates must be positive", where="--budget/--max-candidates")
    target = resolve_target(ns.target, console)
    console.print(f"attnforge tune: {spec.describe()} on {target.name} ({target.sm}), budget {ns.budget:.0f} s", style="bold", markup=False)
    import torch

    # Interpreter times say nothing about a GPU: without one they go only into a database named with --db.
    record = torch.cuda.is_available() or ns.db is not None
    if not record:
        console.print("note: no GPU here: candidates run in the interpreter and the result is not recorded (pass --db FILE to record it anyway)",
                      style="yellow", markup=False)
    say = lambda text: console.print(f"  {text}", markup=False, highlight=False)  # noqa: E731
    search = dict(seq=ns.seq, budget_s=ns.budget, max_candidates=ns.max_candidates, db=ns.db, record=record, progress=say)
    backends = [b.strip() for b in ns.backend.split(",")]
    if len(backends) > 1:
        outcomes = tune_head_to_head(spec, target, backends, **search)
    else:
        outcomes = {backends[0]: tune(spec, target, backend=backends[0], **search)}
    from .database import user_path

    where = f"recorded in {ns.db or user_path()}" if record else "not recorded"
    for name, outcome in outcomes.items():
        e = outcome.entry
        if e is None:
            console.print(f"no candidate passed the gate ({len(outcome.trials)} tried){f' for {name}' if len(outcomes) > 1 else ''}",
                          style="bold red", markup=False)
            continue
        gain = f" ({e.planner_ms / e.ms:.2f}x the planner's first choice)" if e.planner_ms else ""
        console.print(f"best{f' ({name})' if len(outcomes) > 1 else ''}: {', '.join(f'{k}={v}' for k, v in e.params.items())}: "
                      f"{e.ms:.3f} ms on {e.shape}{gain}; {where}", style="bold green", markup=False)
    return 0 if any(o.entry is not None for o in outcomes.values()) else 1
