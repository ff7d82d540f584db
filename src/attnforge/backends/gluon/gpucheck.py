"""GPU check of the Gluon backend (run on a Hopper or Blackwell machine from the repository root):

    PYTHONPATH=src:.gpu_deps python3 -m attnforge.backends.gluon.gpucheck --out $OUT [--phase mutants,ab] [--mutants NAME,...]

mutants: the Gluon mutants of selftest/mutants.py (a dropped barrier wait, a wrong phase, a wrong
stage index; on sm_100 a dropped MMA wait, an accumulator overwritten, a rescale dropped) whose
kernels are written for this GPU's family (the others are listed as skipped), each planted in its spec's generated kernel and verified natively in a process of
its own with a deadline: a mutant that hangs the GPU (a barrier wait that never completes) is
killed by the deadline, and so counts as caught. The unmutated kernel runs first as the control;
a mutant's deadline is a multiple of its control's time (the child compiles before it runs, and a
compile on a loaded machine once took a control past a fixed 40 s: a slow build is not a hang), and
each child builds into a Triton cache of its own, so that a control's time is never a cached build's;
an equivalent mutant (its ``equivalent`` says why) must pass, as the control does.
ab: the generated kernel timed beside variants of its own source (``AB_VARIANTS``) and SDPA's
cuDNN backend, for choosing what the translator emits. Prints one line per item; JSON under --out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

MUTANT_DEADLINE_S = 40.0  # the least a mutant is given
CONTROL_DEADLINE_S = 240.0  # a control must pass; its time sets its mutants' deadline
DEADLINE_PER_CONTROL = 2.5  # a mutant still running past this many times its control's time is taken as hung
# (name, old, new): edits of a generated module, timed against it (same row, same run)
AB_VARIANTS = (
    ("load-4-warps", "], [WG_WARPS, 1], [240, 24])", "], [WG_WARPS, 4], [240, 24])"),
)
AB_ROWS = (("bf16", 128, False), ("bf16", 128, True), ("bf16", 64, False))


def base_kernel(key: str, out: Path, tag: str) -> tuple[Path, dict]:
    """The base kernel of a GLUON_MUTANTS spec: generate's choice, or the plan of its SPEC_PLAN base (``mutants.base_params``)."""
    from ...selftest.mutants import SPECS, base_params

    spec, target_name = SPECS[key]
    return _build(spec, out, tag, target_name, base_params(key))


def _build(spec, out: Path, tag: str, target_name: str = "h200", want: dict[str, int] | None = None) -> tuple[Path, dict]:
    """The first plan's kernel (of those with ``want``'s parameters) that compiles for the target without spills:
    (module path, params)."""
    from ...compile_report import check_fits
    from ...errors import DoesNotFitError
    from ...plan.hopper import hopper_plans
    from ...targets import get_target
    from . import GluonBackend

    want = want or {}
    be, target = GluonBackend(), get_target(target_name)
    for i, p in enumerate(hopper_plans(spec, target)):
        if any(p.params.get(k) != v for k, v in want.items()):
            continue
        tr = be.translate(p.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl")
        path = out / "src" / f"{tag}-{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(tr.source)
        try:
            for report in be.compile(tr, path, target, out / "build"):  # (a split-KV pair: two kernels)
                check_fits(report, target)
        except DoesNotFitError:
            continue
        return path, p.params
    raise RuntimeError(f"no plan{' with ' + str(want) if want else ''} fits {target_name}")


def _verify_one(module: Path, spec_key: str, params: dict) -> None:
    """Child process: verify ``module`` for the spec; exit 0 passed, 1 failed (printing why)."""
    from ...selftest.child import exit_with_verdict
    from ...selftest.mutants import SPECS
    from ...targets import get_target
    from ...verify import verify
    from .kernel import GluonKernel

    spec, target = SPECS[spec_key]
    exit_with_verdict(verify(GluonKernel(module), spec, params, target=get_target(target)))


def phase_mutants(out: Path, only: set[str] | None = None) -> list[dict]:
    import torch

    from ...selftest.child import verify_in_child
    from ...selftest.mutants import GLUON_MUTANTS, SPECS
    from ...targets import get_target

    rows = []
    bases: dict[str, Path] = {}
    params: dict[str, dict] = {}
    here = torch.cuda.get_device_capability()[0]
    mutants = []
    for m in GLUON_MUTANTS:  # a mutant runs on its spec's GPU family only (a tcgen05 kernel needs sm_100)
        if only and m.name not in only:
            continue
        target = get_target(SPECS[m.spec][1])
        if target.cc[0] != here:
            rows.append(dict(name=m.name, skipped=f"needs {target.sm}"))
            print(f"{m.name:32s} skipped: its kernel is written for {target.sm}, this GPU is sm_{here}x", flush=True)
            continue
        mutants.append(m)
        if m.spec not in bases:
            bases[m.spec], params[m.spec] = base_kernel(m.spec, out, f"base-{m.spec}")
    jobs = [("control-" + key, key, path) for key, path in bases.items()]
    equivalent = {m.name for m in mutants if m.equivalent}
    for m in mutants:
        path = out / "src" / f"mutant-{m.name}.py"
        path.write_text(m.apply(bases[m.spec].read_text()))
        jobs.append((m.name, m.spec, path))
    control_s: dict[str, float] = {}
    for name, key, path in jobs:
        start = time.time()
        is_control = name.startswith("control-")
        if not is_control and key not in control_s:  # its base failed: a kill would say nothing of the mutant
            rows.append(dict(name=name, control=False, passed_verification=False, as_expected=False, detail="not judged: its control failed", seconds=0.0))
            print(f"{name:32s} mutant   NOT JUDGED (its control failed)", flush=True)
            continue
        deadline = CONTROL_DEADLINE_S if is_control else mutant_deadline(control_s[key])
        # a fresh Triton cache: the control's time includes its compile, as each mutant's does (run 15 call 4: a control
        # cached from an earlier call took 6 s, its mutant, built anew, 39 s to fail)
        cache = out / "triton-cache" / name
        shutil.rmtree(cache, ignore_errors=True)
        passed, caught, detail = verify_in_child("attnforge.backends.gluon.gpucheck", path, key, params[key], deadline,
                                                 env={"TRITON_CACHE_DIR": str(cache)})
        if is_control and passed:
            control_s[key] = time.time() - start
        control = is_control or name in equivalent  # these must pass verification
        ok = passed if control else caught
        rows.append(dict(name=name, control=control, passed_verification=passed, as_expected=ok, detail=detail, seconds=round(time.time() - start, 1)))
        print(f"{name:32s} {'control ' if control else 'mutant  '} {'PASSED' if passed else 'FAILED' if control else 'KILLED' if caught else 'CRASHED'}"
              f" ({'as expected' if ok else 'NOT AS EXPECTED'}; {time.time() - start:.0f} s) {detail[:160]}", flush=True)
    return rows


def mutant_deadline(control_seconds: float) -> float:
    """Seconds a mutant's child may take before it counts as hung: DEADLINE_PER_CONTROL times its control's
    (compile and verification alike), at least MUTANT_DEADLINE_S. (A mutant whose control failed is not run.)"""
    return max(MUTANT_DEADLINE_S, DEADLINE_PER_CONTROL * control_seconds)


def phase_ab(out: Path) -> list[dict]:
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ...spec import AttentionSpec
    from . import _import

    rows = []
    for dtype, d, causal in AB_ROWS:
        spec = AttentionSpec(batch=4, heads=2048 // d, head_dim=d, dtype=dtype, causal=causal, seqlen_q=4096, seqlen_k=4096)
        base, params = _build(spec, out, f"ab-{dtype}-d{d}-{'causal' if causal else 'full'}")
        variants = [("generated", base)]
        for name, old, new in AB_VARIANTS:
            text = base.read_text()
            if old in text:
                path = base.with_name(f"{base.stem}-{name}.py")
                path.write_text(text.replace(old, new))
                variants.append((name, path))
        q, k, v = (torch.randn(4, 2048 // d, 4096, d, device="cuda", dtype=getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype])) for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            t_ref = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        line = {"row": f"{dtype} D={d} {'causal' if causal else 'full'}", "params": params, "cudnn_ms": t_ref}
        for name, path in variants:
            module = _import(path)
            t = triton.testing.do_bench(lambda: module.launch(q, k, v, o, lse, scale=d ** -0.5, checked=True))
            line[name] = round(t_ref / t, 3)
        rows.append(line)
        print(f"{line['row']:22s} vs cuDNN: " + "  ".join(f"{n}={line[n]:.3f}x" for n, _ in variants), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/gluon-gpucheck")
    ap.add_argument("--phase", default="mutants,ab")
    ap.add_argument("--mutants", default="", help="comma-separated mutant names: run these (and their controls) only")
    ap.add_argument("--verify-one", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.verify_one:
        _verify_one(Path(args.verify_one), args.spec, json.loads(args.params))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {}
    only = set(filter(None, args.mutants.split(",")))
    for phase, fn in (("mutants", lambda out: phase_mutants(out, only)), ("ab", phase_ab)):
        if phase in args.phase.split(","):
            result[phase] = fn(out)
            (out / "gluon_gpucheck.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
