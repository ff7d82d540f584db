"""``attnforge bench``: the subcommand's arguments (``add_parser``) and its run (``run``).

Exit 0 every attnforge row ran or was n/a and every one that ran passed its check; 1 an attnforge
row's output was off the reference; 2 bad input, or no CUDA GPU (``--dry-run`` needs none).
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from pathlib import Path
from typing import Any

from ..errors import AttnforgeError
from .matrix import CONVENTIONS, DTYPES, Row, full_matrix, quick_matrix, select
from .providers import BASELINE, SDPA_FLASH, Provider, choose, default_providers

DEFAULTS = {"rounds": 3, "quick_rounds": 2, "warmup_ms": 25.0, "rep_ms": 100.0, "seed": 0}

EXAMPLES = """examples:
  attnforge bench --dry-run                          # the matrix and the providers, no GPU needed
  attnforge bench --quick                            # six rows, one of each kind
  attnforge bench --dtype bf16 --head-dim 128        # a filtered part of the matrix
  attnforge bench --rows decode --providers sdpa-cudnn,attnforge-triton
  attnforge bench --out bench/results/mine --time-limit 540"""


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(t) for t in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def add_parser(sub: Any) -> None:
    """Register ``bench`` on the CLI's subparsers."""
    p = sub.add_parser(
        "bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="time attnforge beside SDPA (cuDNN, flash) and FlexAttention, every attnforge row verified",
        description="Time attnforge.attention (each backend) beside PyTorch SDPA's cuDNN and flash backends and\n"
                    "compiled FlexAttention on issue 11's matrix: forward prefill (fp16, bf16; D 64, 128, 256;\n"
                    "Sq = Sk = 1k, 4k, 16k at 2048 hidden; causal and not; GQA 32/8 at 4k), decode (Sq = 1) and\n"
                    "decode-verify (Sq = 2..16) rows. Every attnforge output is checked against the float64\n"
                    "reference in the same run. Writes bench.json, bench.md and bench.png to --out.\n"
                    "Exit 0 all checks passed, 1 an attnforge row failed its check, 2 bad input or no CUDA GPU.",
        epilog=EXAMPLES)
    p.add_argument("--dry-run", action="store_true", help="print the rows and providers and stop (no GPU needed)")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    p.add_argument("--quick", action="store_true", help="a small subset: one row of each kind")
    p.add_argument("--dtype", action="append", type=_names, metavar="LIST", help=f"only these dtypes ({', '.join(DTYPES)}; comma-separated)")
    p.add_argument("--head-dim", action="append", type=_ints, metavar="LIST", help="only these head dims (comma-separated)")
    p.add_argument("--rows", action="append", type=_names, metavar="SUBSTR",
                   help="only rows whose name contains one of these (comma-separated), e.g. decode, s1k, gqa, causal")
    p.add_argument("--providers", action="append", type=_names, metavar="LIST",
                   help="only these providers, in this order (default: all; see --dry-run)")
    p.add_argument("--out", metavar="DIR", help="where to write bench.json, bench.md, bench.png (default bench/results/DATE-GPU/)")
    p.add_argument("--rounds", type=_count, help=f"timing rounds per row, providers in turns (default {DEFAULTS['rounds']}, --quick {DEFAULTS['quick_rounds']})")
    p.add_argument("--warmup-ms", type=_positive, default=DEFAULTS["warmup_ms"], help="warm-up per timing (ms, default %(default)s)")
    p.add_argument("--rep-ms", type=_positive, default=DEFAULTS["rep_ms"], help="timed calls per timing (ms, default %(default)s)")
    p.add_argument("--no-flush", action="store_true", help="do not flush the L2 cache before each timed call")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seed of the random inputs (default %(default)s)")
    p.add_argument("--time-limit", type=_positive, metavar="S", help="start no new row after S seconds (the rest: skipped)")
    p.add_argument("--no-png", action="store_true", help="skip the plot")
    p.set_defaults(func=run)


def _flat(values: list | None) -> list:
    return [x for group in values or () for x in group]


def plan(ns: argparse.Namespace) -> tuple[list[Row], list[Provider]]:
    """The rows and providers the arguments ask for; a filter matching nothing is an error."""
    dtypes = _flat(ns.dtype)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise AttnforgeError(f"unknown dtype {', '.join(bad)}", where="--dtype", hint="dtypes: " + ", ".join(DTYPES))
    rows = select(quick_matrix() if ns.quick else full_matrix(), dtypes=dtypes, head_dims=_flat(ns.head_dim), patterns=_flat(ns.rows))
    if not rows:
        raise AttnforgeError("no row of the matrix passes the filters", where="bench", hint="'attnforge bench --dry-run' lists the rows")
    return rows, choose(default_providers(), _flat(ns.providers))


def canonical_command(ns: argparse.Namespace) -> str:
    """The command line that asks for this run, flags in a fixed order."""
    words = ["attnforge", "bench"]
    for flag in ("dry_run", "quick", "no_flush", "no_png"):
        if getattr(ns, flag):
            words.append("--" + flag.replace("_", "-"))
    for flag in ("dtype", "head_dim", "rows", "providers"):
        if getattr(ns, flag):
            words += ["--" + flag.replace("_", "-"), ",".join(str(x) for x in _flat(getattr(ns, flag)))]
    for flag in ("rounds", "time_limit", "out"):
        if getattr(ns, flag) is not None:
            words += ["--" + flag.replace("_", "-"), str(getattr(ns, flag))]
    for flag in ("warmup_ms", "rep_ms", "seed"):
        if getattr(ns, flag) != DEFAULTS[flag]:
            words += ["--" + flag.replace("_", "-"), str(getattr(ns, flag))]
    return shlex.join(words)


def print_plan(rows: list[Row], providers: list[Provider], console: Any, *, as_json: bool) -> None:
    if as_json:
        import json

        console.print_json(json.dumps({"rows": [r.to_dict() for r in rows], "providers": {p.name: p.description for p in providers},
                                       "not_run": {p.name: {r.name: p.unsupported(r) for r in rows if p.unsupported(r)} for p in providers},
                                       "conventions": CONVENTIONS}))
        return
    print_line = lambda text="": console.print(text, markup=False, highlight=False)  # noqa: E731
    print_line(f"{'row':48s} {'group':14s} {'dtype':5s} {'D':>4s} {'causal':6s} {'B x Hq/Hkv x Sq x Sk':26s} metric")
    for r in rows:
        print_line(f"{r.name:48s} {r.group:14s} {r.dtype:5s} {r.head_dim:4d} {'yes' if r.causal else 'no':6s} {r.shape:26s} "
                   f"{'TFLOP/s' if r.metric == 'tflops' else 'GB/s'}")
    print_line()
    print_line("providers:")
    for p in providers:
        skipped = [r.name for r in rows if p.unsupported(r)]
        print_line(f"  {p.name:20s} {p.description}" + (f" (n/a on {len(skipped)} row(s))" if skipped else ""))
    print_line()
    print_line(f"{len(rows)} rows x {len(providers)} providers; ratios to {BASELINE}; every attnforge row checked against the float64 reference")


def _cuda_or_fail() -> Any:
    try:
        import torch
    except ImportError:
        raise AttnforgeError("attnforge bench needs torch and a CUDA GPU; torch is not installed", where="bench",
                             hint="--dry-run prints the plan without them") from None
    if not torch.cuda.is_available():
        raise AttnforgeError("attnforge bench needs a CUDA GPU, and torch sees none", where="bench",
                             hint="run it on a machine with an NVIDIA GPU; --dry-run prints the plan without one")
    return torch


def _out_dir(ns: argparse.Namespace, env: dict) -> Path:
    from .environment import default_out

    out = Path(ns.out) if ns.out else default_out(datetime.date.today().isoformat(), env.get("gpu", "gpu"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnforgeError(f"cannot create {out}: {err.strerror or err}", where="--out", hint="give a directory that can be written") from None
    return out


def assemble(records: list[dict], providers: list[Provider], env: dict, ns: argparse.Namespace, timing: dict) -> dict:
    from .check import CHUNK
    from .summary import add_ratios, summarize

    baselines = [b for b in (BASELINE, SDPA_FLASH) if b in {p.name for p in providers}]
    add_ratios(records, baselines)
    return {
        "schema": 1,
        "environment": env,
        "command": canonical_command(ns),
        "argv": list(sys.argv),
        "timing": timing,
        "conventions": CONVENTIONS,
        "verification": ("each provider's output of two calls after its first (the second a replayed launch of attention()'s dispatch cache) "
                         "against the float64 reference (reference.attention_reference) on slices of "
                         f"its row: batches 0 and B-1, query heads 0 and Hq-1, query rows in chunks of {CHUNK} (first, middle, last); "
                         "attnforge: every checked row within numerics.o_row_bound and ||O - ref|| / ||ref|| <= numerics.O_TOLERANCE[dtype]; "
                         "baselines: the norm only"),
        "baseline": BASELINE,
        "providers": {p.name: p.description for p in providers},
        "rows": records,
        "summary": {b: summarize(records, [p.name for p in providers], b) for b in baselines},
    }


def row_line(record: dict, baseline: str) -> str:
    from .render import cell

    parts = []
    for name, result in record["results"].items():
        text = cell(record, result, baseline)
        if result.get("status") == "n/a":
            text += f" [{result.get('reason', '')[:80]}]"
        elif result.get("check") and name.startswith("attnforge"):
            text += " verified" if result["check"].get("passed") else " CHECK FAILED"
        parts.append(f"{name} {text}")
    return f"  {record['name']}: " + " | ".join(parts)


class _Progress:
    """A rich progress bar on a terminal; plain lines otherwise (a log, the GPU machine's output)."""

    def __init__(self, console: Any, total: int):
        self.console, self.total, self.bar = console, total, None
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=console, transient=True)
            self.task = self.bar.add_task("bench", total=total)
            self.bar.start()

    def start(self, i: int, row: Row, _record: dict) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=row.name)
        else:
            self.console.print(f"[{i + 1}/{self.total}] {row.name} ({row.shape})", markup=False, highlight=False)

    def done(self, record: dict, baseline: str) -> None:
        (self.bar.console if self.bar is not None else self.console).print(row_line(record, baseline), markup=False, highlight=False)
        if self.bar is not None:
            self.bar.advance(self.task)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def run(ns: argparse.Namespace, console: Any) -> int:
    rows, providers = plan(ns)
    if ns.dry_run:
        print_plan(rows, providers, console, as_json=ns.json)
        return 0
    _cuda_or_fail()
    from .environment import environment
    from .render import JSON_NAME, write_atomic, summary_table, to_json, write_all
    from .runner import run_rows
    from .timing import CudaTimer

    env = environment()
    out = _out_dir(ns, env)
    rounds = ns.rounds or (DEFAULTS["quick_rounds"] if ns.quick else DEFAULTS["rounds"])
    timing = {"method": f"CUDA events per call in the manner of triton.testing.do_bench: {ns.warmup_ms:g} ms warm-up, {ns.rep_ms:g} ms "
                        f"of timed calls (at least 10), " + ("no L2 flush" if ns.no_flush else "the L2 flushed (256 MB zeroed) before each")
                        + f", median; providers interleaved, {rounds} rounds per row, the median of the round medians",
              "warmup_ms": ns.warmup_ms, "rep_ms": ns.rep_ms, "rounds": rounds, "l2_flush": not ns.no_flush, "seed": ns.seed}
    console.print(f"attnforge bench: {len(rows)} rows x {len(providers)} providers on {env.get('gpu')} "
                  f"(torch {env.get('torch')}, triton {env.get('triton')}, driver {env.get('driver')}); writing to {out}",
                  markup=False, highlight=False)
    records: list[dict] = []
    progress = _Progress(console, len(rows))

    def on_row(i: int, row: Row, record: dict) -> None:
        records.append(record)
        result = assemble(records, providers, env, ns, timing)
        write_atomic(out / JSON_NAME, to_json(result))  # after every row: a run cut short keeps what it measured
        progress.done(record, BASELINE)

    try:
        run_rows(rows, providers, device=_device(), timer=CudaTimer(ns.warmup_ms, ns.rep_ms, flush=not ns.no_flush),
                 rounds=rounds, seed=ns.seed, time_limit_s=ns.time_limit, on_start=progress.start, on_row=on_row)
    finally:
        progress.stop()
    result = assemble(records, providers, env, ns, timing)
    written, notes = write_all(result, out, png=not ns.no_png)
    say = lambda text="": console.print(text, markup=False, highlight=False)  # noqa: E731
    say()
    for baseline in result["summary"]:
        say(f"ratio to {baseline}:")
        for line in summary_table(result, baseline):
            say(line)
        say()
    for note in notes:
        say(note)
    say("wrote " + ", ".join(str(p) for p in written))
    failed = [(r["name"], name) for r in records for name, res in r["results"].items()
              if res.get("status") == "failed" and any(p.name == name and p.verified for p in providers)]
    if failed:
        say("FAILED checks: " + ", ".join(f"{name} on {row}" for row, name in failed))
        return 1
    return 0


def _device() -> Any:
    import torch

    return torch.device("cuda")
