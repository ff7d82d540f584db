"""What a bench run ran on: versions, the GPU and its driver, the date, the code's commit."""

from __future__ import annotations

import datetime
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _run(*argv: str) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text.splitlines()[0].strip() if done.returncode == 0 and text else None


def driver_version() -> str | None:
    """The NVIDIA driver's version, from nvidia-smi or NVML (None when neither answers)."""
    found = _run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    if found:
        return found
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        found = pynvml.nvmlSystemGetDriverVersion()
        return found.decode() if isinstance(found, bytes) else str(found)
    except Exception:  # noqa: BLE001 (no NVML, no driver: say unknown)
        return None


def git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    commit = _run("git", "-C", str(here), "rev-parse", "--short=12", "HEAD")
    if commit and _run("git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--", str(here.parent)):
        commit += " (with uncommitted changes)"
    return commit


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA GeForce RTX 4090' -> 'geforce-rtx-4090'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
    return slug or "gpu"


def default_out(date: str, gpu: str) -> Path:
    return Path("bench") / "results" / f"{date}-{gpu_slug(gpu)}"


def environment() -> dict:
    """The record of where a run ran (needs torch; reads the CUDA device when there is one)."""
    import torch

    from .. import __version__

    env = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda": torch.version.cuda,
        "attnforge": __version__,
        "commit": git_commit(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update({
            "gpu": torch.cuda.get_device_name(0),
            "capability": "sm_%d%d" % torch.cuda.get_device_capability(0),
            "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "driver": driver_version(),
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        })
    return env
