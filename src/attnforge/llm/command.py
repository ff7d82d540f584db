"""The command line of the LLM path: ``generate --llm`` (its flags and its command),
``attnforge replay DIR`` and ``attnforge prompts list|show``. cli.py registers these; the work
is in pipeline.py and replay_run.py.

Exit codes, as for ``generate``: 0 verified; 1 a step failed (no answer accepted within the
round cap, a request that failed, a kernel that failed verification); 2 bad input (flags, the
--llm spec, no key, --optimize without a GPU); 3 generated but not verified (--no-verify).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from rich.console import Console

    from .pipeline import ModeRun

NOT_VERIFIED = 3
PROMPT_USES = {
    "stage1_sketch": "stage 1, step 1: the TL program with its tuning parameters open",
    "stage1_params": "stage 1, step 2 (a follow-up turn): choose BM, BN, warps, stages and write the full program",
    "stage2_translate": "stage 2 (--translate llm): the accepted TL program to a Triton module",
    "stage2_translate_cuda": "stage 2 (--translate llm --backend cuda): the accepted TL program to CUDA C++ kernels",
    "direct": "--mode direct: a Triton module straight from the spec (the paper's baseline)",
    "feedback": "a follow-up turn after a refused answer: what the gates found",
    "optimize": "--optimize: a faster variant of a verified kernel, given its time, the ceilings and the compile report",
}


class _LLMFlag(argparse.Action):
    """Stores the value and notes the flag, so that LLM flags given without --llm are refused."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.llm_flags = [*(getattr(namespace, "llm_flags", None) or []), option_string]


def add_generate_llm_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``generate`` flags of the LLM path."""
    from .rounds import DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TOKENS

    parser.set_defaults(llm_flags=[])
    g = parser.add_argument_group(
        "LLM", "Let a model write the kernel (docs/LLM.md): every answer goes through the same gates, its transcript is saved in "
               "OUT/llm/transcript.jsonl and report.json gains an 'llm' section. Keys come from the environment or the config file.")
    g.add_argument("--llm", metavar="PROVIDER:MODEL", default=None,
                   help="openai:MODEL (any OpenAI-compatible server: OpenAI, DeepSeek, vLLM, Ollama, llama.cpp), anthropic:MODEL, "
                        "file:DIR (a person answers prompts written to DIR), replay:TRANSCRIPT")
    g.add_argument("--llm-base-url", metavar="URL", default=None, action=_LLMFlag,
                   help="the server's base URL, e.g. http://127.0.0.1:8000/v1 for a local vLLM server")
    g.add_argument("--llm-timeout", metavar="S", type=float, default=None, action=_LLMFlag, help="seconds to wait for one answer (default 600)")
    g.add_argument("--llm-retries", metavar="N", type=int, default=None, action=_LLMFlag, help="retries on HTTP 429 and 5xx (default 4)")
    g.add_argument("--llm-prices", metavar="IN,OUT", default=None, action=_LLMFlag,
                   help="US dollars per million input and output tokens, for the cost in the report (or [prices] in the config file)")
    g.add_argument("--mode", choices=("tl", "direct", "both"), default="tl", action=_LLMFlag,
                   help="tl (default): the model writes TL, then the kernel; direct: the Triton module straight from the spec "
                        "(the paper's baseline); both: tl into OUT, direct into OUT/direct, and OUT/comparison.md")
    g.add_argument("--translate", choices=("builtin", "llm"), default="builtin", action=_LLMFlag,
                   help="stage 2 for --mode tl: attnforge's translator (default) or the model (its module runs only in the sandbox; "
                        "with --backend cuda it writes CUDA C++ kernels, verified on a local GPU)")
    g.add_argument("--max-rounds", metavar="N", type=int, default=DEFAULT_MAX_ROUNDS, action=_LLMFlag,
                   help=f"answers per stage before giving up (default {DEFAULT_MAX_ROUNDS})")
    g.add_argument("--max-tokens", metavar="N", type=int, default=DEFAULT_MAX_TOKENS, action=_LLMFlag,
                   help=f"longest answer, in tokens (default {DEFAULT_MAX_TOKENS})")
    g.add_argument("--optimize", metavar="N", type=int, default=0, action=_LLMFlag,
                   help="GPU only: N rounds in which the model sees the kernel's time, the ceilings and the compile report and "
                        "proposes a faster variant; the fastest verified kernel is kept")
    g.add_argument("--sandbox-timeout", metavar="S", type=float, default=900.0, action=_LLMFlag,
                   help="wall-clock limit for loading and verifying a model-written module in the sandbox (default 900)")


def _prices(text: str | None) -> Any:
    from ..errors import AttnforgeError
    from .budget import Prices

    if text is None:
        return None
    parts = text.split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        return Prices(float(parts[0]), float(parts[1]))
    except ValueError:
        raise AttnforgeError(f"--llm-prices {text!r} is not IN,OUT", where="--llm-prices", hint="e.g. --llm-prices 0.27,1.10") from None


def cmd_generate_llm(ns: argparse.Namespace, console: Console) -> int:
    """``attnforge generate ... --llm PROVIDER:MODEL``."""
    from ..backends import choose_backend
    from ..cli import resolve_target
    from ..errors import AttnforgeError
    from ..spec import spec_from_args
    from .pipeline import LLMOptions, refuse_optimize_without_gpu, run

    if ns.llm is None:
        flags = list(dict.fromkeys(ns.llm_flags))
        raise AttnforgeError(f"{', '.join(flags)} {'needs' if len(flags) == 1 else 'need'} --llm PROVIDER:MODEL", where=flags[0],
                             hint="e.g. --llm openai:gpt-4.1, or drop the LLM flags to use the built-in planner")
    if ns.tl is not None:
        raise AttnforgeError("--tl and --llm both say where the TL program comes from: give one", where="--tl")
    if ns.pointer_loads:
        raise AttnforgeError("--pointer-loads steers the built-in planner; with --llm the model's program says whether it uses TMA",
                             where="--pointer-loads", hint="drop it (or ask for 'param tma = 0' in the program)")
    spec = spec_from_args(ns)
    target = resolve_target(ns.target, console)
    backend = choose_backend(ns.backend, spec, target)
    options = LLMOptions(client=ns.llm, base_url=ns.llm_base_url, timeout_s=ns.llm_timeout, retries=ns.llm_retries,
                         prices=_prices(ns.llm_prices), mode=ns.mode, translate=ns.translate, max_rounds=ns.max_rounds,
                         max_tokens=ns.max_tokens, optimize=ns.optimize, sandbox_timeout_s=ns.sandbox_timeout,
                         verify=not ns.no_verify, backend=backend.name)
    options.check()
    refuse_optimize_without_gpu(options)  # before any request is sent
    console.print(f"attnforge generate --llm {ns.llm}: {spec.describe()} for {target.name} ({target.sm}) -> {ns.out}",
                  style="bold", markup=False)
    runs = run(options, spec, target, ns.out, say=_printer(console))
    return _finish(runs, console)


def _printer(console: Console) -> Any:
    def say(line: str) -> None:
        style = "bold red" if line.startswith("FAIL") or "refused (" in line else "green" if line.startswith("ok") or line.endswith("; ok") else None
        console.print(line, style=style, markup=False, highlight=False)
    return say


def _finish(runs: Sequence[ModeRun], console: Console) -> int:
    """The summary lines and the exit code of the first (main) run."""
    for r in runs:
        t = sum(x.input_tokens for x in r.rounds), sum(x.output_tokens for x in r.rounds)
        cost = r.budget.get("cost_usd")
        console.print(f"{r.mode}: {len(r.rounds)} round(s), {t[0]}+{t[1]} tokens" + (f", ${cost:.4f}" if cost is not None else "")
                      + (f", {r.speed_ms:.4g} ms" if r.speed_ms else "") + f"; files in {r.out} (report.json, llm/transcript.jsonl)",
                      markup=False, highlight=False)
    if len(runs) > 1:
        console.print(f"comparison: {runs[0].out / 'comparison.md'}", markup=False, highlight=False)
    main = runs[0]
    if not main.ok:
        line = (main.error or (main.result.error if main.result else "") or "failed").split("\n")[0]
        console.print(f"error: {main.mode}: {line}", style="bold red", markup=False, highlight=False)
        return 1
    style = "bold green" if main.verified else "bold yellow"
    console.print(f"result: {main.status}", style=style, markup=False, highlight=False)
    return 0 if main.verified else NOT_VERIFIED


def cmd_replay(ns: argparse.Namespace, console: Console) -> int:
    """``attnforge replay DIR``."""
    from .replay_run import replay_directory

    console.print(f"attnforge replay {ns.directory}: the recorded answers through today's gates, offline", style="bold", markup=False)
    outcome = replay_directory(ns.directory, ns.out, check_prompts=ns.strict_prompts, say=_printer(console))
    for r in outcome.runs:
        console.print(f"{r.mode}: {r.status}", markup=False, highlight=False)
    for line in outcome.differences:
        console.print(f"DIFFERS {line}", style="bold red", markup=False, highlight=False)
    if outcome.ok:
        what = f"the same kernel ({', '.join(outcome.compared)})" if outcome.compared else "the same outcome (no kernel was accepted)"
        console.print(f"replay: {what} and the same verdicts as the recorded run", style="bold green", markup=False)
        return 0
    return 1


def add_replay_parser(sub: Any, func: Any) -> None:
    """The ``replay`` subcommand, run by ``func``."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("replay", formatter_class=fmt, help="re-run a 'generate --llm' run offline from its transcript; same kernel?",
                       description="Answer every prompt of a saved 'generate --llm' run from its transcript (DIR/llm/transcript.jsonl),\n"
                                   "offline, through today's gates, and check that it ends in the same kernel (kernel.tl, and the\n"
                                   "module where a model wrote it). For regression tests and for sharing a run.\n"
                                   "Exit 0 same kernel and accepted, 1 otherwise, 2 bad input.",
                       epilog="examples:\n  attnforge replay out/\n  attnforge replay out/ --out /tmp/again --strict-prompts")
    p.add_argument("directory", metavar="DIR", help="a directory 'attnforge generate --llm ... --out DIR' wrote")
    p.add_argument("--out", metavar="DIR", default=None, help="where the replay writes its kernel (default DIR/replay)")
    p.add_argument("--strict-prompts", action="store_true",
                   help="also require every prompt to equal the recorded one (catches prompt drift: templates, TL manual)")
    p.set_defaults(func=func)


def cmd_prompts(ns: argparse.Namespace, console: Console) -> int:
    """``attnforge prompts list`` and ``attnforge prompts show NAME``."""
    from . import prompts

    if ns.prompts_command == "show":
        print(prompts.template_text(ns.name), end="")
        return 0
    for name in prompts.prompt_names():
        use = PROMPT_USES.get(name, "")
        console.print(f"{name:<18} v{prompts.prompt_version(name)}  {use}", markup=False, highlight=False)
        console.print(f"{'':<18}     fills: {', '.join(prompts.placeholders(name))}", style="dim", markup=False, highlight=False)
    return 0


def add_prompts_parser(sub: Any, func: Any) -> None:
    """The ``prompts list|show`` subcommands, run by ``func``."""
    p = sub.add_parser("prompts", help="list or print the LLM prompt templates",
                       description="The prompt templates the LLM path sends (attnforge/llm/prompts/), each with its version line.")
    p.set_defaults(help_parser=p)
    ps = p.add_subparsers(dest="prompts_command", metavar="PROMPTS_COMMAND")
    q = ps.add_parser("list", help="every template: name, version, use, placeholders")
    q.set_defaults(func=func)
    q = ps.add_parser("show", help="print one template as shipped")
    q.add_argument("name", metavar="NAME", help="a template name from 'attnforge prompts list'")
    q.set_defaults(func=func)
