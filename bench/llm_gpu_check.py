"""GPU check of the LLM path (``generate --llm``), with scripted answers instead of a model:
what CI cannot run without a GPU.

1. --mode tl --optimize 2: the start kernel and two proposals verified natively, each timed on
   the GPU in a child process; the fastest is kept.
2. attnforge replay of that directory: offline, the recorded times, the same kernel.
3. --mode direct: a model-written module (attnforge's own translation, made self-contained)
   verified natively inside the sandbox (no address-space cap: CUDA), compiled for the GPU.
4. --mode both: both kernels timed, side by side in comparison.json.
5. --translate llm --backend cuda: model-written CUDA kernels (the CUDA backend's own, as a model
   must write them: kernels only, under attnforge's head) through the gate, nvcc, the PTX audit
   and native verification; then the same answer with a planted bug (the softmax scale halved),
   which verification must refuse.

Usage (on the H200 machine, from the repository root):
    PYTHONPATH=src:tests:.gpu_deps python3 bench/llm_gpu_check.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from attnforge import AttentionSpec, get_target
from attnforge.llm.pipeline import LLMOptions, run
from attnforge.llm.replay_run import replay_directory
from attnforge.plan.builtin import prefill_source
from llm_scripts import Scripted, fenced


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--parts", default="optimize,replay,direct,both,cuda", help="which checks, comma-separated")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    out = Path(args.out)
    target = get_target("auto")
    spec = AttentionSpec(heads=16, kv_heads=4, head_dim=64, dtype="bf16", seqlen_q=4096, batch=2)
    tiles = [dict(BM=64, BN=32, warps=4, stages=2), dict(BM=128, BN=64, warps=4, stages=3), dict(BM=128, BN=128, warps=8, stages=2)]
    programs = [prefill_source(spec, target, t) for t in tiles]
    results: dict = {"target": target.name}

    if "optimize" in parts:
        optimize_check(out, spec, target, programs, results)
    if "replay" in parts:
        replay_check(out, results)
    direct_source = _module(spec, target, tiles[1])
    if "direct" in parts:
        direct_check(out, spec, target, direct_source, results)
    if "both" in parts:
        both_check(out, spec, target, programs[1], direct_source, results)
    if "cuda" in parts:
        cuda_check(out, spec, target, programs[0], results)
    (out / "llm_gpu_check.json").write_text(json.dumps(results, indent=2, default=str) + "\n")


def optimize_check(out: Path, spec: AttentionSpec, target, programs: list[str], results: dict) -> None:
    t0 = time.perf_counter()
    runs = run(LLMOptions("openai:scripted", optimize=2), spec, target, out / "tl_opt",
               client=Scripted([fenced(p) for p in programs]), say=print)
    r = runs[0]
    results["optimize"] = {"verified": r.verified, "status": r.status, "optimize": r.optimize.to_dict() if r.optimize else None,
                           "kept": (out / "tl_opt" / "kernel.tl").read_text().split("param ", 1)[1].split("\n", 1)[0],
                           "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(results["optimize"], indent=1))


def replay_check(out: Path, results: dict) -> None:
    t0 = time.perf_counter()
    again = replay_directory(out / "tl_opt", out / "tl_opt_replay", say=print)
    results["replay"] = {"ok": again.ok, "compared": again.compared, "differences": again.differences,
                         "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(results["replay"], indent=1))


def direct_check(out: Path, spec: AttentionSpec, target, direct_source: str, results: dict) -> None:
    t0 = time.perf_counter()
    runs = run(LLMOptions("openai:scripted", mode="direct"), spec, target, out / "direct",
               client=Scripted([fenced(direct_source, "python")]), say=print)
    r = runs[0]
    rep = json.loads((out / "direct" / "report.json").read_text())
    results["direct"] = {"verified": r.verified, "status": r.status, "compile": rep["compile"],
                         "verification_mode": (rep["verification"] or {}).get("mode"), "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(results["direct"], indent=1))


def both_check(out: Path, spec: AttentionSpec, target, program: str, direct_source: str, results: dict) -> None:
    t0 = time.perf_counter()
    run(LLMOptions("openai:scripted", mode="both"), spec, target, out / "both",
        client=Scripted([fenced(program), fenced(direct_source, "python")]), say=print)
    results["both"] = json.loads((out / "both" / "comparison.json").read_text())
    results["both"]["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(results["both"], indent=1))


def cuda_check(out: Path, spec: AttentionSpec, target, program: str, results: dict) -> None:
    from attnforge.backends import get_backend
    from attnforge.backends.cuda.module import KERNEL_MARK
    from attnforge.tl.parser import parse

    source = get_backend("cuda").translate(parse(program), head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
    kernels = source[source.index(KERNEL_MARK):]
    planted = kernels.replace(" * scale);", " * 0.5f * scale);", 1)
    assert planted != kernels, "the planted bug found nothing to change"
    results["cuda"] = {}
    for name, answer in (("own", kernels), ("planted-scale", planted)):
        t0 = time.perf_counter()
        runs = run(LLMOptions("openai:scripted", translate="llm", backend="cuda", max_rounds=1), spec, target, out / f"cuda_{name}",
                   client=Scripted([fenced(program), fenced(answer, "cuda")]), say=print)
        r = runs[0]
        results["cuda"][name] = {"verified": r.verified, "status": r.status, "seconds": round(time.perf_counter() - t0, 1)}
        print(name, json.dumps(results["cuda"][name]))


def _module(spec: AttentionSpec, target, tiles: dict) -> str:
    """attnforge's translation of the planner's program, self-contained as a model must write it."""
    import re

    from attnforge.backends import get_backend
    from attnforge.tl.parser import parse

    source = get_backend("triton").translate(parse(prefill_source(spec, target, tiles)), head_dim=spec.head_dim,
                                             head_dim_v=spec.head_dim_v).source
    source = re.sub(r"^from attnforge\S* import .*\n", "", source, flags=re.MULTILINE)
    return re.sub(r"^\s*check_arguments\(.*\)\n", "", source, flags=re.MULTILINE)


if __name__ == "__main__":
    main()
