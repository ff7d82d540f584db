"""``attnforge tune`` on the buckets of ``attnforge bench`` rows (timed on the tuner's shape for the
bucket: the row's own, but 16/4 heads for the GQA rows' 32/8), several
backends head to head (searched, then their best timed in turns), so that ``--backend auto`` can
choose between them by times taken side by side. Buckets already in --db for every backend are
skipped (a run cut short goes on where it stopped); no bucket starts after --deadline seconds.

Usage (on the GPU machine, from the repository root; carry .gpu_deps):
    PYTHONPATH=src:.gpu_deps python3 bench/tune_rows.py --backend triton,gluon --db $OUT/tuning.json \\
        --max-candidates 1 --deadline 420 d128-s16k gqa d256
    PYTHONPATH=src:.gpu_deps python3 bench/tune_rows.py --groups decode,decode-verify --db $OUT/tuning.json   # the decode rows
Then merge --db's entries into src/attnforge/tune/shipped.json.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path


_CANDIDATE_TIME = re.compile(r"^\s+\w+=\d+.*: \d+\.\d{3} ms")  # attnforge tune's line for a timed candidate


def main() -> int:
    from attnforge.bench.matrix import full_matrix, select
    from attnforge.spec import AttentionSpec
    from attnforge.tune import database

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="*", help="bench row name substrings, in priority order (default: every row of --groups)")
    parser.add_argument("--groups", default="prefill", help="the bench's row groups to take rows from: prefill, decode, decode-verify (comma-separated)")
    parser.add_argument("--backend", default="triton,gluon")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--max-candidates", type=int, default=1)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per backend and bucket")
    parser.add_argument("--deadline", type=float, default=420.0, help="start no bucket after this many seconds")
    args = parser.parse_args()
    groups = set(args.groups.split(","))
    taken = [row for row in full_matrix() if row.group in groups]
    rows = [row for p in args.patterns for row in select(taken, patterns=[p])] if args.patterns else taken
    backends = args.backend.split(",")
    t0, seen = time.monotonic(), set()
    for row in rows:
        spec = AttentionSpec(heads=row.heads, kv_heads=row.kv_heads, head_dim=row.head_dim, dtype=row.dtype, causal=row.causal,
                             batch=row.batch, seqlen_q=row.seqlen_q, seqlen_k=row.seqlen_k)
        bucket = (database.spec_key(spec), database.seq_bucket(spec))
        have = {e.backend for e in database.read(args.db) if (e.spec, e.seq) == bucket}
        if bucket in seen or set(backends) <= have:
            continue
        seen.add(bucket)
        if time.monotonic() - t0 > args.deadline:
            print(f"deadline: stopped before {row.name}")
            break
        command = [sys.executable, "-m", "attnforge.cli", "tune", "--backend", args.backend, "--dtype", row.dtype,
                   "--head-dim", str(row.head_dim), "--heads", str(row.heads), "--kv-heads", str(row.kv_heads),
                   "--batch", str(row.batch), "--seqlen-q", str(row.seqlen_q), "--seqlen-k", str(row.seqlen_k),
                   *(["--causal"] if row.causal else []), "--budget", str(args.budget),
                   "--max-candidates", str(args.max_candidates), "--db", str(args.db)]
        # (COLUMNS: rich would wrap the lines at 80 columns of a pipe)
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
        # each candidate's time too, so that a head-to-head run keeps the loser's (the database records the winner's only)
        said = [line.strip() for line in result.stdout.splitlines()
                if line.strip().startswith(("head to head", "best", "no candidate", "rejected")) or _CANDIDATE_TIME.search(line)]
        print(f"{row.name}: " + (" | ".join(said) if said else (result.stdout + result.stderr)[-400:]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
