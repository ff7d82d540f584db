"""nvcc -cubin for a table target (no GPU needed), cached; the report read off the PTX, the cubin
and its SASS (cuobjdump from the triton wheel); and a static lint of the cp.async pipeline."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from ...compile_report import CompileReport, find_cuobjdump, keep, report_for
from ...errors import CompileError, TargetError
from ...targets import Target
from .module import KERNEL_MARK, read_meta

# The paths one source compiles to: "native" (the target's own: m16n8k16 + cp.async from sm_80,
# m16n8k8 + vector loads on sm_75) or "turing" (the sm_75 code on any newer GPU).
PATHS = ("native", "turing")
_FLAGS = {"native": [], "turing": ["-DAF_TURING_PATH=1"]}
_SASS_OPS = ("HMMA.16816", "HMMA.1688", "LDSM", "LDGSTS", "LDG", "STG", "STS", "LDS", "SHFL", "MUFU.EX2", "BAR")


def find_nvcc() -> str:
    for c in (os.environ.get("ATTNFORGE_NVCC"), shutil.which("nvcc"), "/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise TargetError("nvcc not found: the CUDA backend compiles with nvcc (CUDA 12.x/13.x)", where="compile",
                      hint="install the CUDA toolkit or the nvidia-cuda-nvcc wheel, or set ATTNFORGE_NVCC; or use --backend triton")


def nvcc_version() -> str:
    try:
        out = subprocess.run([find_nvcc(), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (TargetError, OSError, subprocess.SubprocessError):
        return "missing"
    m = re.search(r"release (\S+), V(\S+)", out)
    return m[2] if m else "unknown"


def cache_root() -> Path:
    base = os.environ.get("ATTNFORGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "attnforge")
    return Path(base) / "cuda-cubin"


def arch_of(target_or_cc) -> str:
    cc = target_or_cc.cc if isinstance(target_or_cc, Target) else tuple(target_or_cc)
    return f"sm_{cc[0]}{cc[1]}"


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def lint(source: str) -> None:
    """Static checks of a generated (or edited) file before it is compiled: every pipelined
    loop still waits for each cp.async group at the depth the TL pipeline needs (a dropped or
    loosened ``af_cp_wait`` is a race no compiler notices)."""
    meta = read_meta(source)
    # Kernels by their marks at the start of a line; comments out in one left-to-right pass (a wait
    # inside a comment is no wait, and a "/*" inside a // comment opens nothing).
    pieces = re.split(rf"^{re.escape(KERNEL_MARK)}(\w+)\n", source, flags=re.MULTILINE)
    bodies = {name: _COMMENTS.sub("", body) for name, body in zip(pieces[1::2], pieces[2::2])}
    for info in meta["kernels"]:
        body = bodies.get(info["name"])
        if body is None:
            raise CompileError(f"kernel {info['name']} is missing from the CUDA source", where="lint")
        waits = re.findall(r"^\s*(af_cp_wait<\d+>\(\);)", body, flags=re.MULTILINE)
        if waits != info["waits"]:
            raise CompileError(f"kernel {info['name']}: the cp.async waits ({', '.join(waits) or 'none'}) are not the ones its pipeline needs "
                               f"({', '.join(info['waits'])}): a tile would be read before it lands in shared memory",
                               where=f"lint {info['name']}", hint="regenerate the kernel; a hand edit must keep one af_cp_wait per Copy at its depth")


def compile_cubin(source: str, arch: str, path: str = "native") -> tuple[bytes, str, float, bool]:
    """(cubin, ptx, seconds, cached) of ``source`` for ``arch`` (sm_XX); cached by content."""
    if not os.environ.get("ATTNFORGE_CUDA_NO_LINT"):  # set only by the GPU mutant check, to see what the GPU alone catches
        lint(source)
    flags = ["-O3", "-std=c++17", "-lineinfo", *_FLAGS[path]]
    key = hashlib.sha256("\0".join([source, arch, *flags, nvcc_version()]).encode()).hexdigest()[:32]
    entry = cache_root() / key
    if (entry / "k.cubin").is_file() and (entry / "k.ptx").is_file():
        return (entry / "k.cubin").read_bytes(), (entry / "k.ptx").read_text(), 0.0, True
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="attnforge-cuda-") as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(source)
        cmd = [find_nvcc(), "-cubin", f"-arch={arch}", *flags, "--keep", "--keep-dir", tmp, "-o", str(Path(tmp) / "k.cubin"), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            first = "\n".join(line for line in proc.stderr.splitlines() if "error" in line)[:800] or proc.stderr[:800]
            raise CompileError(f"nvcc cannot compile the CUDA kernel for {arch}: {first}", where=f"compile for {arch}",
                               hint="report a translator bug if the TL program is valid")
        cubin = (Path(tmp) / "k.cubin").read_bytes()
        ptx_files = sorted(Path(tmp).glob("*.ptx"))
        ptx = ptx_files[0].read_text() if ptx_files else ""
    seconds = time.perf_counter() - start
    try:
        entry.mkdir(parents=True, exist_ok=True)
        part = entry / f"k.cubin.{os.getpid()}"
        part.write_bytes(cubin)
        (entry / "k.ptx").write_text(ptx)
        os.replace(part, entry / "k.cubin")
    except OSError:
        pass  # a read-only cache only costs a recompile
    return cubin, ptx, seconds, False


def sass_mix(cubin: bytes) -> Counter:
    """Opcode counts of interest in the cubin's SASS (static counts, not executions)."""
    with tempfile.TemporaryDirectory(prefix="attnforge-") as tmp:
        p = Path(tmp) / "k.cubin"
        p.write_bytes(cubin)
        proc = subprocess.run([find_cuobjdump(), "-sass", str(p)], capture_output=True, text=True)
    counts: Counter = Counter()
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", proc.stdout):
        op = m[1]
        for name in _SASS_OPS:
            if op == name or op.startswith(name + "."):
                counts[name] += 1
                break
    return counts


def compile_for_target(source: str, target: Target, build_dir: Path | None, path: str = "native") -> list[CompileReport]:
    meta = read_meta(source)
    arch = arch_of(target)
    cubin, ptx, seconds, cached = compile_cubin(source, arch, path)
    mix = sass_mix(cubin)
    reports = []
    for info in meta["kernels"]:
        stages = int(info["params"].get("stages", 1))
        rep = report_for(info["name"], target, ptx, cubin, has_dot=True, num_warps=info["threads"] // 32, num_stages=stages,
                         shared_bytes=info["smem"], compile_seconds=seconds)
        turing = path == "turing" or target.cc < (8, 0)
        notes = [f"CUDA C++ ({'Turing path: mma.sync m16n8k8, 16-byte vector loads' if turing else 'mma.sync m16n8k16, cp.async pipeline of ' + str(stages) + ' stage(s)'}), "
                 f"nvcc {nvcc_version()} -arch={arch}" + (" (cubin from the cache)" if cached else ""),
                 "SASS: " + ", ".join(f"{op} x{mix[op]}" for op in _SASS_OPS if mix[op])]
        notes += info.get("notes", [])
        reports.append(dataclasses.replace(rep, notes=tuple(notes) + rep.notes))
        if build_dir is not None:
            keep(Path(build_dir), info["name"], target, ptx, cubin)
    return reports
