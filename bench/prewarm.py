"""Build (and verify) the kernels that ``attnforge bench`` rows will call, several at once, so the
bench's first calls find them in the cache: the builds are mostly CPU work (compiles) and short
GPU checks, the bench's timing then runs alone. Nothing here is timed.

Usage (GPU machine, repository root, same ATTNFORGE_CACHE as the bench):
    PYTHONPATH=src:.gpu_deps python3 bench/prewarm.py --backends triton,gluon --jobs 8 [bench row filters]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time


def _build(job: tuple[dict, str]) -> str:
    import torch

    import attnforge
    from attnforge.bench.matrix import Row
    from attnforge.bench.runner import make_inputs

    fields, backend = job
    row = Row(**fields)
    start = time.perf_counter()
    try:
        q, k, v = make_inputs(row, torch.device("cuda"), 0)
        attnforge.attention(q, k, v, causal=row.causal, backend=backend)
        torch.cuda.synchronize()
        return f"built    {row.name} {backend} ({time.perf_counter() - start:.0f} s)"
    except Exception as err:  # the bench reports the row's refusal itself; here only say it
        return f"refused  {row.name} {backend}: {str(err)[:160]}"


def main() -> None:
    from dataclasses import asdict

    from attnforge.bench.matrix import full_matrix, select

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="triton,gluon")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--rows", default=None, help="name substrings, comma-separated")
    args = parser.parse_args()
    rows = select(full_matrix(), dtypes=args.dtype.split(",") if args.dtype else None,
                  patterns=args.rows.split(",") if args.rows else None)
    jobs = [({k: v for k, v in asdict(row).items()}, b) for row in rows for b in args.backends.split(",")]
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for line in pool.imap_unordered(_build, jobs):
            print(line, flush=True)


if __name__ == "__main__":
    main()
