"""Compile the gluon backend's kernel for a spec with parameter overrides, for sm_90a (or another target) on
any machine, and print what each variant costs in registers: spill bytes, registers, shared memory.

A Hopper-form kernel that spills is refused by the gate (compile_report), and the tuner never times it, so
this is where a tile or schedule idea is tried first, without a GPU. Each variant is the planner's program for the spec
with the given parameters put over its first plan's (0 takes a switch out), as the checker admits it.

Usage (from the repository root):
    PYTHONPATH=src python3 bench/gluon_spills.py --head-dim 64 --causal --seqlen-q 16384 '{}' '{"BM": 192, "warps": 12}'
    PYTHONPATH=src python3 bench/gluon_spills.py --head-dim 128 --dtype fp16 '{"BM": 192, "warps": 12, "BN": 64, "stages": 4}'
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def main() -> int:
    from attnforge.backends import gluon
    from attnforge.backends.gluon import _import
    from attnforge.backends.gluon.compile import compile_for_target
    from attnforge.errors import AttnforgeError
    from attnforge.plan.hopper import hopper_plans
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.errors import TranslateError
    from attnforge.plan.builtin import Candidate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", metavar="JSON", help="parameters over the planner's first plan, e.g. '{\"BM\": 192, \"warps\": 12}' ('{}': as planned)")
    parser.add_argument("--target", default="h200")
    parser.add_argument("--dtype", default="bf16", choices=["fp16", "bf16"])
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=None)
    parser.add_argument("--seqlen-q", type=int, default=4096)
    parser.add_argument("--seqlen-k", type=int, default=None, help="default: --seqlen-q")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--keep", type=Path, help="write each variant's module and build here (default: a temporary folder)")
    args = parser.parse_args()
    target = get_target(args.target)
    spec = AttentionSpec(heads=args.heads, kv_heads=args.kv_heads or args.heads, head_dim=args.head_dim, dtype=args.dtype,
                         seqlen_q=args.seqlen_q, seqlen_k=args.seqlen_k or args.seqlen_q, causal=args.causal)
    base = next(hopper_plans(spec, target))
    print(f"{spec.describe()}\nplanned: {base.params}")
    root = args.keep or Path(tempfile.mkdtemp(prefix="gluon-spills-"))
    failed = False
    for i, text in enumerate(args.variants):
        try:
            over = json.loads(text)
        except json.JSONDecodeError as err:
            parser.error(f"variant {i + 1} is not JSON: {err}")
        folder = root / f"v{i}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            params = {k: v for k, v in {**base.params, **over}.items() if v != 0}  # (0 takes a switch out)
            plan = next(hopper_plans(spec, target, prefer=Candidate(params, "asked for")))
            if plan.params != params:
                raise TranslateError(f"the checker refused {params}; the planner's next candidate is {plan.params}")
            program = plan.program
            source = gluon.translate(program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
            (folder / "kernel.py").write_text(source)
            report = compile_for_target(_import(folder / "kernel.py"), target, folder / "build")
        except AttnforgeError as err:
            failed = True
            print(f"{json.dumps(over):50s} refused: {err.render().splitlines()[0]}")
            continue
        print(f"{json.dumps(over):50s} spill {report.spill_bytes:4d} B  registers {report.registers}  shared {report.shared_bytes} B  ({folder})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
