"""Tune one backend on the buckets the shipped tuning database holds for another, on the same
timing shapes, so that ``--backend auto`` can choose between them by measured time
(``backends._tuned_order``). Buckets already in --db are skipped (a run cut short goes on where
it stopped); no bucket starts after --deadline seconds.

Usage (on the GPU machine, from the repository root; carry .gpu_deps):
    PYTHONPATH=src:.gpu_deps python3 bench/tune_beside.py --backend gluon --beside triton \\
        --db $OUT/tuning.json --max-candidates 2 --deadline 480
Then merge --db's entries into src/attnforge/tune/shipped.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "src" / "attnforge" / "tune" / "shipped.json"


def tune_arguments(entry: dict) -> list[str]:
    """``attnforge tune`` arguments for an entry's bucket on the entry's own timing shape."""
    spec = json.loads(entry["spec"])
    shape = dict(re.findall(r"(\w+)=(\d+)", entry["shape"]))  # "B=16 Hq=32/Hkv=32 Sq=1024 Sk=1024"
    hq, hkv = shape["Hq"], shape["Hkv"]
    args = ["--dtype", spec["dtype"], "--head-dim", str(spec["head_dim"]), "--heads", hq, "--kv-heads", hkv,
            "--seqlen-q", shape["Sq"], "--seqlen-k", shape["Sk"], "--batch", shape["B"], "--seq", entry["seq"]]
    if spec["causal"]:
        args += ["--causal", "--causal-align", spec["causal_align"]]
    return args


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", required=True, help="the backend to tune")
    parser.add_argument("--beside", default="triton", help="whose shipped buckets to tune it on (default triton)")
    parser.add_argument("--db", type=Path, required=True, help="the database to write (and to skip buckets from)")
    parser.add_argument("--max-candidates", type=int, default=2)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per bucket")
    parser.add_argument("--deadline", type=float, default=480.0, help="start no bucket after this many seconds")
    args = parser.parse_args()
    done = set()
    if args.db.exists():
        done = {(e["spec"], e["seq"]) for e in json.loads(args.db.read_text())["entries"] if e["backend"] == args.backend}
    entries = [e for e in json.loads(SHIPPED.read_text())["entries"] if e["backend"] == args.beside and not e["spec"].count('"decode": true')]
    t0 = time.monotonic()
    for entry in entries:
        if (entry["spec"], entry["seq"]) in done:
            continue
        if time.monotonic() - t0 > args.deadline:
            print(f"deadline: {sum((e['spec'], e['seq']) not in done for e in entries)} bucket(s) left for another run")
            break
        command = [sys.executable, "-m", "attnforge.cli", "tune", "--backend", args.backend, *tune_arguments(entry),
                   "--budget", str(args.budget), "--max-candidates", str(args.max_candidates), "--db", str(args.db)]
        result = subprocess.run(command, capture_output=True, text=True)
        last = [line for line in result.stdout.splitlines() if line.startswith(("best", "no candidate"))]
        print(f"{entry['seq']:>7} {' '.join(tune_arguments(entry)[:4])} {'causal' if 'causal' in entry['spec'] and json.loads(entry['spec'])['causal'] else 'full'}"
              f" [{args.beside} {entry['ms']:.3f} ms]: {last[-1] if last else (result.stdout + result.stderr)[-300:]}", flush=True)
        done.add((entry["spec"], entry["seq"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
