"""A planted kernel verified in a process of its own, for the GPU mutation checks of the Gluon and
CUDA backends: a mutant that faults (an illegal address) leaves its CUDA context unusable for
every later kernel, and one that hangs (a barrier wait that never completes) never returns. A child
process per mutant keeps either from deciding the next mutant's verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from ..verify import VerifyRecord


def verify_in_child(module: str, path: Path, spec_key: str, params: dict, deadline_s: float, extra: tuple[str, ...] = (),
                    env: dict[str, str] | None = None) -> tuple[bool, bool, str]:
    """Run ``python -m module --verify-one path --spec spec_key --params ...`` (the module's child
    mode, which ends in ``exit_with_verdict``; ``extra``: more of its arguments): (passed
    verification, caught, detail). Caught means
    verification said no (a fault included: it fails the cases) or the deadline passed; a child
    that crashed before verifying (an import, a build) catches nothing.
    The child's whole output is kept beside ``path`` (``.log``); ``env``: variables set for it on top of this process's."""
    command = [sys.executable, "-m", module, "--verify-one", str(path), "--spec", spec_key, "--params", json.dumps(params), *extra]
    log = Path(path).with_suffix(".log")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=deadline_s, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as late:
        log.write_text(_text(late.stdout) + _text(late.stderr))
        return False, True, f"no result within {deadline_s:.0f} s (a barrier wait that never completes)"
    log.write_text(done.stdout + done.stderr)
    verdict = [line for line in done.stdout.splitlines() if line.startswith(("PASSED", "FAILED"))]
    if verdict:
        return done.returncode == 0, verdict[-1].startswith("FAILED"), verdict[-1]
    raised = [line for line in done.stderr.splitlines() if line and not line[0].isspace() and ("Error" in line or "Exception" in line)]
    return False, False, "no verdict: " + (raised[-1] if raised else done.stderr.strip()[-300:])


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def exit_with_verdict(record: VerifyRecord) -> NoReturn:
    """The child's last line: PASSED, or FAILED and the first failing case's reason; exit 0 or 1."""
    bad = next((f"{c.shape}: {c.error or c.worst}" for c in record.cases if not c.passed), "")
    print(("PASSED" if record.passed else "FAILED ") + bad[:300], flush=True)
    sys.exit(0 if record.passed else 1)
