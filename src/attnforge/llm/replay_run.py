"""``attnforge replay DIR``: re-run a saved ``generate --llm`` run offline and check that it ends
in the same kernel.

DIR is a kernel directory ``generate --llm`` wrote: its report.json holds the spec, the target
and the run's options (``llm.options``), ``llm/transcript.jsonl`` every answer. The replay asks
the same questions in the same order, answered from the transcript (the ``replay:`` client),
puts every answer through today's gates, and compares the kernel it ends in with DIR's
(``kernel.tl``, and ``kernel_triton.py`` where a model wrote it). Kernel times measured by
``--optimize`` (or ``--mode both`` on a GPU) are replayed from the report, so no GPU is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AttnforgeError
from ..report import KERNEL_TL
from ..spec import AttentionSpec
from ..targets import get_target
from .errors import LLMError
from .optimize import Candidate, Timer
from .pipeline import LLMOptions, ModeRun, mode_directory, run
from .replay import Replay
from .rounds import Say
from .stage2 import CUDA_FILE, MODULE_FILE
from .transcript import FILE_NAME


@dataclass
class ReplayOutcome:
    runs: list[ModeRun]
    compared: list[str] = field(default_factory=list)  # the files compared, relative to DIR
    differences: list[str] = field(default_factory=list)  # one line per file that differs

    @property
    def same(self) -> bool:
        return not self.differences

    @property
    def ok(self) -> bool:
        """The same kernel and the same verdicts as the recorded run (a failure reproduced is a
        faithful replay too; ``differences`` says what differs)."""
        return self.same


def _report(directory: Path) -> dict[str, Any]:
    path = directory / "report.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise AttnforgeError(f"no report.json in {directory}", where=str(directory),
                             hint="give a directory 'attnforge generate --llm ... --out DIR' wrote") from None
    except (OSError, ValueError) as err:
        raise AttnforgeError(f"{path} is not a readable report: {err}", where=str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("llm"), dict) or "options" not in data["llm"]:
        raise AttnforgeError(f"{path} has no llm section: the kernel was not written by 'generate --llm'", where=str(path),
                             hint="replay re-runs a model's answers; a kernel from the built-in planner is rebuilt by 'attnforge generate'")
    return data


def _recorded_timer(times: list[float], where: str) -> Timer:
    left = list(times)

    def timer(candidate: Candidate) -> float:
        if not left:
            raise LLMError(f"the recording holds {len(times)} kernel time(s) and the replay needs more", where=where,
                           hint="the replay took another path than the recorded run (a gate changed?)")
        return left.pop(0)
    return timer


def replay_directory(directory: str | Path, out: str | Path | None = None, *, check_prompts: bool = False,
                     say: Say | None = None, interpret: bool | None = None) -> ReplayOutcome:
    """Replay DIR into ``out`` (default DIR/replay) and compare the kernels (see the module doc)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise AttnforgeError(f"no such directory: {directory}", where=str(directory), hint="give a directory 'generate --llm' wrote")
    report = _report(directory)
    recorded = report["llm"]["options"]
    spec = AttentionSpec.from_dict(report["spec"])
    target = get_target(report["target"]["name"])
    out = Path(out) if out is not None else directory / "replay"
    if out.resolve() == directory.resolve():
        raise AttnforgeError("the replay would overwrite the run it replays", where="--out", hint="give another directory")
    mode = recorded.get("mode", "tl")
    modes = ["tl", "direct"] if mode == "both" else [mode]
    sources = {m: mode_directory(directory, mode, m) for m in modes}
    for m, source in sources.items():
        if not (source / "llm" / FILE_NAME).is_file():
            raise AttnforgeError(f"no transcript at {source / 'llm' / FILE_NAME}", where=str(source),
                                 hint="the directory lost its llm/ folder; nothing to replay")
    options = LLMOptions(client=f"replay:{sources[modes[0]] / 'llm' / FILE_NAME}", mode=mode,
                         translate=recorded.get("translate", "builtin"), max_rounds=int(recorded["max_rounds"]),
                         max_tokens=int(recorded["max_tokens"]), optimize=int(recorded.get("optimize", 0)),
                         verify=bool(recorded.get("verify", True)), backend=recorded.get("backend", "auto"))

    def client_for(m: str) -> Replay:
        return Replay(sources[m] / "llm" / FILE_NAME, check_prompts=check_prompts)

    def timer_for(m: str) -> Timer | None:
        times = _report(sources[m])["llm"].get("timings_ms") or []
        return _recorded_timer([float(t) for t in times], str(sources[m] / "report.json")) if times else None

    runs = run(options, spec, target, out, say=say, client=client_for, timer_for=timer_for, interpret=interpret)
    outcome = ReplayOutcome(runs)
    for m, again_run in zip(modes, runs):
        original, again = sources[m], mode_directory(out, mode, m)
        recorded_report = _report(original)
        was = (bool(recorded_report["llm"]["ok"]), bool(recorded_report.get("verified")))
        now = (again_run.ok, again_run.verified)
        if was != now:
            outcome.differences.append(f"{m}: the recorded run was {_verdict(*was)}, the replay is {_verdict(*now)}")
        written_by_model = m == "direct" or recorded.get("translate") == "llm"
        for name in (KERNEL_TL, MODULE_FILE, CUDA_FILE) if written_by_model else (KERNEL_TL,):
            mine = original / name
            if not mine.is_file():
                continue
            rel = str(mine.relative_to(directory))
            outcome.compared.append(rel)
            theirs = again / name
            if not theirs.is_file():
                outcome.differences.append(f"{rel}: the replay wrote no {name}")
            elif theirs.read_text() != mine.read_text():
                outcome.differences.append(f"{rel}: the replay's {name} differs")
    return outcome


def _verdict(ok: bool, verified: bool) -> str:
    return "verified" if ok and verified else "accepted, not verified" if ok else "not accepted"
