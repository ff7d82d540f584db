"""The reports ``attnforge generate`` writes beside a kernel: report.json (everything, for tools)
and report.md (the same for people)."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__, roofline
from .tl.printer import print_program

if TYPE_CHECKING:
    from .generate import GenerateResult

KERNEL_TL = "kernel.tl"
REPORTS = ("report.json", "report.md")


def contents(directory: Path) -> list[str]:
    """Every file in a kernel directory, as paths relative to it (build/ included), sorted."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")
                  if p.is_file() and "__pycache__" not in p.relative_to(directory).parts)


def gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


def _versions(backend_versions: dict[str, str]) -> dict[str, str]:
    import torch

    return {"attnforge": __version__, **backend_versions, "torch": torch.__version__, "python": platform.python_version()}


def report_dict(result: GenerateResult, total_seconds: float) -> dict:
    p = result.plan
    return {
        "ok": result.ok,
        "verified": result.verified,
        "status": result.status,
        "failed_step": result.failed_step,
        "error": result.error,
        "spec": result.spec.to_dict(),
        "spec_summary": result.spec.describe(),
        "target": {"name": result.target.name, "sm": result.target.sm, "product": result.target.product},
        "backend": result.backend.name,
        "backend_reason": result.backend_reason,
        "versions": _versions(result.backend.versions()),
        "gpu_present": gpu_present(),
        "plan": None if p is None else {"kind": p.kind, "parameters": p.params, "reasons": list(p.reasons)},
        "rejected_candidates": result.rejected,
        "tl": None if p is None else print_program(p.program),
        "check": None if p is None else {
            "findings": [str(f) for f in p.check.findings],
            "resources": [asdict(r) for r in p.check.resources],
        },
        "interpret": result.interpret_runs,
        "compile": [r.to_dict() for r in result.compile_reports],
        "estimate": [e.to_dict() for e in roofline.estimates(result.spec, result.target, result.compile_reports).values() if e is not None],
        "verification": None if result.verification is None else result.verification.to_dict(),
        "steps": [asdict(s) for s in result.steps],
        "total_seconds": round(total_seconds, 3),
        "rejected_compile_seconds": round(result.rejected_seconds, 3),
        "files": {"tl": KERNEL_TL, "source": result.backend.source_file},
        "contents": sorted(set(contents(result.out)) | set(REPORTS)),  # what is really in the directory
    }


def write_reports(result: GenerateResult, total_seconds: float) -> None:
    data = report_dict(result, total_seconds)
    (result.out / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (result.out / "report.md").write_text(report_markdown(data))


def add_section(directory: Path, key: str, title: str, data: dict, lines: list[str]) -> None:
    """Add ``data`` under ``key`` to a kernel directory's report.json, and a ``## title``
    section of ``lines`` to its report.md (what the directory's keeper knows, e.g. the cache)."""
    path = directory / REPORTS[0]
    report = json.loads(path.read_text())
    report[key] = data
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    md = directory / REPORTS[1]
    md.write_text(md.read_text().rstrip("\n") + "\n\n" + "\n".join([f"## {title}", "", *lines]) + "\n")


def report_markdown(d: dict) -> str:
    status = d["status"]
    lines = [f"# attnforge kernel: {d['spec_summary']}", "",
             f"- target: {d['target']['name']} ({d['target']['sm']}, {d['target']['product']}); backend: {d['backend']}",
             f"- status: **{status}**",
             *([f"- backend chosen: {d['backend_reason']}"] if d.get("backend_reason") else []),
             "- versions: " + ", ".join(f"{k} {v}" for k, v in d["versions"].items()), ""]
    if d["error"]:
        lines += ["## Failure", "", "```", d["error"], "```", ""]
    if d["plan"]:
        lines += ["## Plan", "", f"{d['plan']['kind']} program; parameters: " + ", ".join(f"{k}={v}" for k, v in d["plan"]["parameters"].items()), ""]
        lines += [f"- {r}" for r in d["plan"]["reasons"]]
        lines += [f"- rejected: {r}" for r in d["rejected_candidates"]] + [""]
    lines += ["## Steps", "", "| step | ok | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {s['name']} | {'yes' if s['ok'] else 'NO'} | {s['seconds']:.2f} | {s['detail'].splitlines()[0] if s['detail'] else ''} |" for s in d["steps"]]
    rejected = d.get("rejected_compile_seconds") or 0.0
    lines += ["", f"Total {d['total_seconds']:.2f} s" + (f", of which {rejected:.2f} s compiling plans that did not fit" if rejected else "") + ".", ""]
    lines += ["## Files", "", ", ".join(f"`{f}`" for f in d.get("contents", [])), ""]
    if d["compile"]:
        estimates = {e["kernel"]: e for e in d.get("estimate", [])}
        lines += ["## Compile", "", "| kernel | target | warps | stages | registers | shared KiB | spill B | instructions | estimate (roofline, not measured) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in d["compile"]:
            e = estimates.get(c["kernel"])
            guess = roofline.short(e) if e else "-"
            lines.append(f"| {c['kernel']} | {c['ptx_target']} | {c['num_warps']} | {c['num_stages']} | {c['registers']} | {c['shared_bytes'] / 1024:.1f} | {c['spill_bytes']} | {', '.join(c['instructions'])} | {guess} |")
        notes = [n for c in d["compile"] for n in c["notes"]]
        lines += [""] + [f"- {n}" for n in notes] + [""]
        if estimates:
            lines += [f"Performance {roofline.WORD}s, not measurements: a roofline from the target table for the spec's own sizes "
                      "(FLOPs as attention benchmarks count them at the rate of the MMA the kernel uses; Q, K, V read and O, LSE "
                      "written once at the memory bandwidth): no kernel can take less, real ones take more.", ""]
            lines += [f"- {k}: {roofline.line(e)}" for k, e in estimates.items()] + [""]
    v = d["verification"]
    if v:
        lines += ["## Verification", "", f"On {v['device']}, {v['dtype']}: {'all pass' if v['passed'] else 'FAILURES'}; max err(O) {v['max_err_o']:.3g}, max err(LSE) {v['max_err_lse']:.3g}.", "",
                  "| shape (B x Hq/Hkv x Sq x Sk, layout) | err(O) | bound | err(LSE) | bound | pass |", "|---|---|---|---|---|---|"]
        for c in v["cases"]:
            lines.append(f"| {c['shape']} | {c['err_o']:.3g} | {c['tol_o']:g} | {c['err_lse']:.3g} | {c['tol_lse']:g} | {'yes' if c['passed'] else 'NO'} |")
        lines.append("")
    if d["tl"]:
        lines += ["## TL program", "", "```", d["tl"].rstrip(), "```", ""]
    return "\n".join(lines)
