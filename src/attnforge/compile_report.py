"""What a compile for a target produced, read from its PTX and cubin, without a GPU.

Every backend that compiles through PTX (Triton; later CUDA C++) reports through here:

  * the tensor-core and copy instructions, from the PTX text (``wgmma.mma_async``,
    ``mma.sync``, ``tcgen05.mma``, TMA ``cp.async.bulk.tensor``, ``cp.async.ca/cg``);
  * registers and local memory per thread, from ``cuobjdump --dump-resource-usage`` on the
    cubin (the cuobjdump shipped inside the triton wheel);
  * shared memory, as the backend's compiler reports what the launch requests.

``check_fits`` then turns "does not fit this GPU" into one ``DoesNotFitError`` that says what
to change.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import DoesNotFitError, TargetError
from .targets import KiB, Target

# Instruction tags, as they appear in CompileReport.instructions.
TENSOR_CORE_TAGS = ("wgmma", "mma.sync", "tcgen05")

# PTX patterns per tag. The look-behind keeps "mma.sync" from matching inside other opcodes,
# and "cp.async" is the Ampere ca/cg form only, not the Hopper bulk (TMA) form.
_PTX_PATTERNS: dict[str, re.Pattern[str]] = {
    "wgmma": re.compile(r"\bwgmma\.mma_async\b"),
    "mma.sync": re.compile(r"(?<![\w.])mma\.sync\b"),
    "tcgen05": re.compile(r"\btcgen05\.mma\b"),
    "tma": re.compile(r"\bcp\.async\.bulk\.tensor\b"),
    "cp.async": re.compile(r"\bcp\.async\.(?:ca|cg)\b"),
}

_RESOURCE_RE = re.compile(r"Function\s+(\S+?):\s*\n\s*REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


@dataclass(frozen=True)
class CompileReport:
    """What one compile of one kernel for one target produced.

    shared_bytes: dynamic shared memory per block (Triton's ``metadata.shared``). The 1 KiB
        the system reserves per block on sm_80+ is not included; the table's
        ``smem_per_block_optin`` already excludes it.
    registers: registers per thread (cuobjdump REG).
    spill_bytes: local memory per thread in bytes, cuobjdump STACK + LOCAL. ptxas puts
        register spills in the stack frame, and Triton kernels have no other stack or local
        use unless they call printf (device_print/device_assert), so > 0 means spills. It is
        the frame size, not ptxas's "spill stores + spill loads" traffic count.
    instructions: sorted tags: TENSOR_CORE_TAGS, "tma", "cp.async" and "fma-only". "fma-only" means the kernel has a tl.dot but
        no tensor-core instruction, so its GEMMs run on the FMA pipes.
    compile_seconds: wall time of triton.compile (a Triton cache hit makes it small).
    """

    kernel: str
    target: str
    sm: str
    ptx_target: str  # the PTX .target line, e.g. "sm_90a"
    num_warps: int
    num_stages: int
    shared_bytes: int
    registers: int
    spill_bytes: int
    instructions: tuple[str, ...]
    tensor_cores_used: bool
    notes: tuple[str, ...]
    compile_seconds: float

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["instructions"] = list(self.instructions)
        d["notes"] = list(self.notes)
        return d


# ------------------------------------------------------------------------------ tools


def find_cuobjdump() -> str:
    """Path of cuobjdump: TRITON_CUOBJDUMP_PATH, then the triton wheel's copy, then PATH."""
    candidates: list[str] = []
    if env := os.environ.get("TRITON_CUOBJDUMP_PATH"):
        candidates.append(env)
    found = importlib.util.find_spec("triton")  # located, not imported
    if found is not None and found.origin:
        candidates.append(str(Path(found.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump"))
    if on_path := shutil.which("cuobjdump"):
        candidates.append(on_path)
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise TargetError("cuobjdump not found, so registers and spills cannot be read from the cubin",
                      where="compile",
                      hint="install triton==3.6.0 (its wheel ships triton/backends/nvidia/bin/cuobjdump), "
                           "or set TRITON_CUOBJDUMP_PATH to a CUDA toolkit cuobjdump")


@dataclass(frozen=True)
class _Resources:
    registers: int
    stack: int
    static_shared: int
    local: int


def _resource_usage(cubin: bytes, kernel: str) -> _Resources:
    """REG/STACK/SHARED/LOCAL of `kernel` from cuobjdump (it only reads files, hence the temp file)."""
    tool = find_cuobjdump()
    with tempfile.TemporaryDirectory(prefix="attnforge-") as tmp:
        path = Path(tmp) / f"{kernel}.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise TargetError(f"cuobjdump failed on the cubin of {kernel!r}: {proc.stderr.strip()}",
                          where="compile", hint="check that cuobjdump matches the installed triton")
    rows = {m[1]: _Resources(int(m[2]), int(m[3]), int(m[4]), int(m[5])) for m in _RESOURCE_RE.finditer(proc.stdout)}
    if not rows:
        raise TargetError(f"cuobjdump printed no resource usage for {kernel!r}", where="compile",
                          hint="run cuobjdump --dump-resource-usage on the kept cubin (keep_dir) to see why")
    # Triton inlines everything into one entry; fall back to the largest if names differ.
    return rows.get(kernel) or max(rows.values(), key=lambda r: r.registers)


# ------------------------------------------------------------------------------ compile


def shared_error(kernel: str, used: int, target: Target) -> str:
    allowed = target.smem_per_block_optin
    return (f"shared memory: kernel {kernel!r} uses {used} B ({used / KiB:.1f} KiB) per block but "
            f"{target.name} ({target.sm}) allows {allowed} B ({allowed / KiB:.0f} KiB) with opt-in; "
            "lower BN/BM or the pipeline stages (stages)")


def _spill_error(kernel: str, spill: int, registers: int, target: Target) -> str:
    return (f"register spills: kernel {kernel!r} spills to {spill} B of local memory per thread "
            f"({registers} registers used, at most {target.regs_per_thread_max} per thread on {target.name}); "
            "lower BM or BN, or raise warps")


FIT_HINT = ("shared memory grows with (BM*BK + BK*BN) * element size per pipeline stage; "
             "registers per thread grow with BM*BN / (32 * num_warps)")


def _ptx_target(ptx: str) -> str:
    m = re.search(r"^\s*\.target\s+(\w+)", ptx, re.MULTILINE)
    return m[1] if m else "?"


def detect_instructions(ptx: str, has_dot: bool) -> tuple[str, ...]:
    """Instruction tags found in PTX text; "fma-only" when a tl.dot got no tensor-core op."""
    tags = {tag for tag, pat in _PTX_PATTERNS.items() if pat.search(ptx)}
    if has_dot and not tags & set(TENSOR_CORE_TAGS):
        tags.add("fma-only")
    return tuple(sorted(tags))


def _notes(target: Target, tags: tuple[str, ...], has_dot: bool, num_stages: int,
           spill: int, shared: int, ptx_target: str) -> tuple[str, ...]:
    notes: list[str] = []
    fma_rate = target.peak_tflops.get("fp32")
    tc_rate = max((v for k, v in target.peak_tflops.items() if k in ("fp16", "bf16")), default=None)
    rates = (f" (fp32 FMA peak {fma_rate:g} TFLOPS vs {tc_rate:g} fp16 tensor-core TFLOPS on {target.name})"
             if fma_rate and tc_rate else "")
    if "fma-only" in tags and target.mma:
        if target.cc < (8, 0):
            # Triton 3.x generates tensor-core code (MMA v2+) only from sm_80 on.
            notes.append(f"Triton emits no tensor-core instructions for tl.dot on {target.sm} "
                         f"({target.arch.capitalize()}): this kernel runs GEMMs on the FMA pipes at a fraction "
                         f"of the tensor-core rate{rates}; expect it to be slow, and use sm_80 or newer "
                         "(or a hand-written mma.sync kernel) for tensor-core speed")
        else:
            notes.append(f"{target.name} has tensor cores but this kernel's tl.dot got none: its GEMMs run on the "
                         f"FMA pipes{rates}; fp32 operands need input_precision='tf32', and every dot dimension "
                         "must be at least 16")
    if target.has_wgmma and has_dot and "mma.sync" in tags and "wgmma" not in tags:
        notes.append(f"{target.name} has wgmma but this kernel uses the older mma.sync: wgmma needs num_warps "
                     "a multiple of 4 and tiles with BM a multiple of 64; expect well below Hopper peak")
    if not ptx_target.startswith(target.sm):
        notes.append(f"the PTX targets {ptx_target}, not {target.ptx_arch} as {target.name} needs")
    elif target.ptx_arch.endswith("a") and not ptx_target.endswith("a"):
        notes.append(f"the PTX targets {ptx_target}, without the 'a' features (wgmma, TMA) of {target.ptx_arch}")
    if has_dot and num_stages > 1 and target.has_cp_async and not {"cp.async", "tma"} & set(tags):
        notes.append(f"num_stages={num_stages} but no cp.async or TMA was emitted: loads are not pipelined "
                     "(pointers not known 16-byte aligned, or loads not feeding the dot)")
    if spill > 0:
        notes.append(f"registers spill: {spill} B of local memory per thread; spilled values go through L1/L2 "
                     "and slow the inner loop")
    if shared > target.smem_per_block_optin:
        notes.append(f"shared memory {shared} B exceeds the {target.smem_per_block_optin} B per-block limit "
                     f"of {target.name}: the kernel cannot launch there")
    return tuple(notes)


def report_for(kernel: str, target: Target, ptx: str, cubin: bytes, *, has_dot: bool, num_warps: int, num_stages: int,
               shared_bytes: int, compile_seconds: float) -> CompileReport:
    """The report of one compiled kernel, from its PTX text and cubin (any backend that compiles
    through PTX: registers and spills from cuobjdump, instructions from the PTX)."""
    res = _resource_usage(cubin, kernel)
    tags = detect_instructions(ptx, has_dot)
    spill = res.stack + res.local
    ptx_target = _ptx_target(ptx)
    return CompileReport(
        kernel=kernel, target=target.name, sm=target.sm, ptx_target=ptx_target,
        num_warps=num_warps, num_stages=num_stages, shared_bytes=shared_bytes,
        registers=res.registers, spill_bytes=spill, instructions=tags,
        tensor_cores_used=bool(set(tags) & set(TENSOR_CORE_TAGS)),
        notes=_notes(target, tags, has_dot, num_stages, spill, shared_bytes, ptx_target),
        compile_seconds=round(compile_seconds, 3),
    )


def keep(directory: Path, kernel: str, target: Target, ptx: str, cubin: bytes) -> None:
    """Write the PTX and cubin as <kernel>.<target>.ptx/.cubin under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{kernel}.{target.name}.ptx").write_text(ptx)
    (directory / f"{kernel}.{target.name}.cubin").write_bytes(cubin)


# ------------------------------------------------------------------------------ checks and output


def check_fits(report: CompileReport, target: Target) -> None:
    """Raise one TargetError if the kernel cannot launch on `target` (shared memory over the
    opt-in limit) or spills registers; its message names every problem and what to change."""
    problems = []
    if report.shared_bytes > target.smem_per_block_optin:
        problems.append(shared_error(report.kernel, report.shared_bytes, target))
    if report.spill_bytes > 0:
        problems.append(_spill_error(report.kernel, report.spill_bytes, report.registers, target))
    if problems:
        raise DoesNotFitError("; ".join(problems),
                          where=f"kernel {report.kernel} on {target.name} "
                                f"(num_warps={report.num_warps}, num_stages={report.num_stages})",
                          hint=FIT_HINT)


def format_report(report: CompileReport) -> list[str]:
    """A few human-readable lines."""
    instrs = ", ".join(report.instructions) or "none of note"
    lines = [
        f"{report.kernel} for {report.target} ({report.ptx_target}): num_warps={report.num_warps}, "
        f"num_stages={report.num_stages}, compiled in {report.compile_seconds:.2f} s",
        f"registers {report.registers}/thread, shared memory {report.shared_bytes} B "
        f"({report.shared_bytes / KiB:.1f} KiB), local memory (spills) {report.spill_bytes} B/thread",
        f"instructions: {instrs}; tensor cores {'used' if report.tensor_cores_used else 'NOT used'}",
    ]
    lines += [f"note: {n}" for n in report.notes]
    return lines
