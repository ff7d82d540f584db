"""The GPUs attnforge can generate kernels for, as a table of frozen dataclasses.

Where the numbers come from:
  * SM count, memory size and bandwidth, L2 size, clocks and peak TFLOPS: NVIDIA's product
    datasheets and architecture whitepapers (Volta, Turing, Ampere GA100/GA102, Ada, Hopper,
    Blackwell). L2 sizes are the bytes the driver reports (cudaDeviceProp.l2CacheSize).
  * Shared memory, register and warp limits: the per-compute-capability limits table in the
    CUDA C++ Programming Guide ("Technical Specifications per Compute Capability").
  * Tensor-core instructions: the PTX ISA manual (mma.sync, wgmma.mma_async, tcgen05.mma and
    their target-ISA notes).

Peak TFLOPS are *dense* (no 2:4 sparsity). Where a datasheet only prints the sparse figure
(L4) the dense one is half of it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
import warnings
from typing import TYPE_CHECKING, Any, Sequence

from .dtypes import STORAGE_DTYPES
from .errors import TargetError, shorten

if TYPE_CHECKING:  # rich is only needed when a table is actually drawn
    from rich.table import Table

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# What tensor_core_dtype maps onto operand dtypes: the storage formats, and int8.
_OPERAND_INPUTS = STORAGE_DTYPES + ("int8",)

# Generated for when there is no GPU to detect (``--target auto`` on a CPU, attention() on CPU tensors).
DEFAULT_TARGET = "h100"

# TMA (sm_90+) reads tensors whose innermost stride is 1 and whose other strides and base
# address are multiples of 16 bytes.
TMA_ALIGN_BYTES = 16


def tma_can_read(strides: Sequence[int], element_size: int, data_ptr: int = 0) -> bool:
    """Whether TMA can address a tensor with these strides (in elements) and base address."""
    return (strides[-1] == 1 and data_ptr % TMA_ALIGN_BYTES == 0
            and all(s * element_size % TMA_ALIGN_BYTES == 0 for s in strides[:-1]))


@dataclass(frozen=True)
class MmaInstruction:
    """One tensor-core matrix-multiply-accumulate instruction (shape is M, N, K)."""

    family: str  # "mma.sync", "wgmma.mma_async" or "tcgen05.mma"
    shape: tuple[int, int, int]
    operand_dtypes: tuple[str, ...]
    acc_dtypes: tuple[str, ...]
    note: str = ""

    @property
    def name(self) -> str:
        m, n, k = self.shape
        return f"{self.family}.m{m}n{n}k{k}"


def _mma(shape: tuple[int, int, int], ops: tuple[str, ...], acc: tuple[str, ...], note: str = "") -> MmaInstruction:
    return MmaInstruction("mma.sync", shape, ops, acc, note)


_FP8 = ("fp8e4m3", "fp8e5m2")

# Volta: the m8n8k4 quad-pair form only. PTX allows it on later targets too, but it is tuned
# for sm_70 and runs slowly elsewhere, so later targets do not list it.
_MMA_SM70 = (_mma((8, 8, 4), ("fp16",), ("fp16", "fp32"), "sm_70; four 8x8x4 products per warp"),)

# Turing. (int4 m8n8k32 and 1-bit m8n8k128 exist too; attnforge has no such dtypes.)
_MMA_SM75 = (
    _mma((16, 8, 8), ("fp16",), ("fp16", "fp32")),
    _mma((8, 8, 16), ("int8",), ("int32",)),
)

# Ampere adds bf16 and tf32, and the k16 fp16 / k32 int8 shapes. bf16 and tf32 accumulate
# in fp32 only, hence separate entries from fp16.
_MMA_SM80 = _MMA_SM75 + (
    _mma((16, 8, 16), ("fp16",), ("fp16", "fp32")),
    _mma((16, 8, 8), ("bf16",), ("fp32",)),
    _mma((16, 8, 16), ("bf16",), ("fp32",)),
    _mma((16, 8, 4), ("tf32",), ("fp32",)),
    _mma((16, 8, 8), ("tf32",), ("fp32",)),
    _mma((16, 8, 16), ("int8",), ("int32",)),
    _mma((16, 8, 32), ("int8",), ("int32",)),
)

# Ada (and everything after it) adds fp8 mma.sync.
_MMA_SM89 = _MMA_SM80 + (
    _mma((16, 8, 32), _FP8, ("fp16", "fp32"), "PTX ISA 8.4+ (fp32 acc); fp16 acc needs PTX ISA 8.7"),
)

_WGMMA_N = "warpgroup (128 threads); N in 8..256 step 8; needs sm_90a"
_MMA_SM90 = _MMA_SM89 + (
    MmaInstruction("wgmma.mma_async", (64, 256, 16), ("fp16",), ("fp16", "fp32"), _WGMMA_N),
    MmaInstruction("wgmma.mma_async", (64, 256, 16), ("bf16",), ("fp32",), _WGMMA_N),
    MmaInstruction("wgmma.mma_async", (64, 256, 8), ("tf32",), ("fp32",), _WGMMA_N),
    MmaInstruction("wgmma.mma_async", (64, 256, 32), _FP8, ("fp16", "fp32"), _WGMMA_N),
    MmaInstruction("wgmma.mma_async", (64, 256, 32), ("int8",), ("int32",),
                   "warpgroup; N in 8,16,24,32 then step 16 to 256; needs sm_90a"),
)

_TCGEN05 = ("single thread issues for the CTA; accumulator in tensor memory; M 64/128 per CTA "
            "(128/256 with cta_group::2); N up to 256 (step 8 at M=64, 16 at M=128); needs sm_100a")
_MMA_SM100 = _MMA_SM89 + (
    MmaInstruction("tcgen05.mma", (128, 256, 16), ("fp16",), ("fp16", "fp32"), "kind::f16; " + _TCGEN05),
    MmaInstruction("tcgen05.mma", (128, 256, 16), ("bf16",), ("fp32",), "kind::f16; " + _TCGEN05),
    MmaInstruction("tcgen05.mma", (128, 256, 8), ("tf32",), ("fp32",), "kind::tf32; " + _TCGEN05),
    MmaInstruction("tcgen05.mma", (128, 256, 32), _FP8 + ("fp6e2m3", "fp6e3m2", "fp4e2m1"), ("fp16", "fp32"),
                   "kind::f8f6f4; " + _TCGEN05),
    MmaInstruction("tcgen05.mma", (128, 256, 32), ("int8",), ("int32",), "kind::i8; " + _TCGEN05),
)


@dataclass(frozen=True)
class Target:
    """One GPU model: its limits, its peak rates and its tensor-core instructions."""

    name: str
    product: str
    arch: str
    cc: tuple[int, int]
    sm_count: int
    smem_per_block_optin: int  # bytes, the most a block can get with cudaFuncSetAttribute
    smem_per_sm: int  # bytes
    max_warps_per_sm: int
    l2_bytes: int
    mem_bytes: int  # the marketed capacity, in GiB as the chips are sized
    mem_bandwidth_gbs: float
    # Dense tensor-core TFLOPS by operand dtype ("fp16","bf16","tf32","fp8","int8" [TOPS]),
    # plus "fp32" for the plain FMA pipes. fp16/fp8 figures are for fp32 accumulation.
    peak_tflops: dict[str, float] = field(hash=False)
    mma: tuple[MmaInstruction, ...]
    boost_clock_mhz: int | None = None
    smem_per_block_default: int = 48 * KiB  # without opt-in, on every architecture
    regs_per_sm: int = 65536
    regs_per_thread_max: int = 255
    max_threads_per_block: int = 1024

    # ---- derived names and features

    @property
    def sm(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    @property
    def ptx_arch(self) -> str:
        """The -arch to compile for: wgmma (sm_90) and tcgen05 (sm_100) exist only on the
        arch-specific "a" targets, which the plain sm_XX target does not enable."""
        return self.sm + "a" if self.cc >= (9, 0) else self.sm

    @property
    def max_threads_per_sm(self) -> int:
        return self.max_warps_per_sm * 32

    @property
    def has_cp_async(self) -> bool:
        return self.cc >= (8, 0)

    @property
    def has_tma(self) -> bool:
        return self.cc >= (9, 0)

    @property
    def has_wgmma(self) -> bool:
        return any(i.family == "wgmma.mma_async" for i in self.mma)

    @property
    def has_tcgen05(self) -> bool:
        return any(i.family == "tcgen05.mma" for i in self.mma)

    # ---- tensor-core queries

    def mma_operand_dtypes(self) -> frozenset[str]:
        return frozenset(d for i in self.mma for d in i.operand_dtypes)

    def tensor_core_dtype(self, dtype: str, allow_tf32: bool = False) -> str | None:
        """The operand dtype the tensor cores would run `dtype` data as, or None if none can.

        fp32 data runs as tf32 only when the caller allows the precision loss."""
        if dtype not in _OPERAND_INPUTS and dtype != "tf32":
            raise TargetError(f"unknown dtype {dtype!r}", where=f"target {self.name}",
                              hint="use one of: " + ", ".join(_OPERAND_INPUTS))
        if dtype == "fp32":
            if not allow_tf32:
                return None
            dtype = "tf32"
        return dtype if dtype in self.mma_operand_dtypes() else None

    def _sync_mma(self, dtype: str | None = None) -> list[MmaInstruction]:
        return [i for i in self.mma if i.family == "mma.sync" and (dtype is None or dtype in i.operand_dtypes)]

    def mma_m_granule(self) -> int:
        """M of the warp-level fp16 mma.sync (16; 8 on Volta). Warpgroup/CTA instructions have
        larger M, but this is the tile granule every target can fall back to."""
        return min(i.shape[0] for i in self._sync_mma("fp16"))

    def mma_n_granule(self) -> int:
        return min(i.shape[1] for i in self._sync_mma())

    def mma_k_granule(self, dtype: str) -> int:
        """K of the widest mma.sync for `dtype` (a storage or operand dtype; fp32 means tf32)."""
        operand = dtype if dtype == "tf32" else self.tensor_core_dtype(dtype, allow_tf32=True)
        instrs = self._sync_mma(operand) if operand else []
        if not instrs:
            have = sorted({d for i in self._sync_mma() for d in i.operand_dtypes})
            raise TargetError(f"no mma.sync instruction takes {dtype!r} on {self.name} ({self.sm})",
                              where=f"target {self.name}", hint="tensor-core dtypes here: " + ", ".join(have))
        return max(i.shape[2] for i in instrs)


# ------------------------------------------------------------------------------ the table

_T = Target
# Ordered oldest to newest (by compute capability, then launch).
TARGETS: dict[str, Target] = {t.name: t for t in (
    _T("v100", "Tesla V100 SXM2 32GB", "volta", (7, 0), sm_count=80,
       smem_per_block_optin=96 * KiB, smem_per_sm=96 * KiB, max_warps_per_sm=64,
       l2_bytes=6 * MiB, mem_bytes=32 * GiB, mem_bandwidth_gbs=900, boost_clock_mhz=1530,
       # Volta tensor cores are fp16 only (int8 runs on dp4a, not tensor cores).
       peak_tflops={"fp16": 125.0, "fp32": 15.7}, mma=_MMA_SM70),
    _T("t4", "Tesla T4", "turing", (7, 5), sm_count=40,
       smem_per_block_optin=64 * KiB, smem_per_sm=64 * KiB, max_warps_per_sm=32,
       l2_bytes=4 * MiB, mem_bytes=16 * GiB, mem_bandwidth_gbs=320, boost_clock_mhz=1590,
       peak_tflops={"fp16": 65.0, "int8": 130.0, "fp32": 8.1}, mma=_MMA_SM75),
    _T("rtx8000", "Quadro RTX 8000", "turing", (7, 5), sm_count=72,
       smem_per_block_optin=64 * KiB, smem_per_sm=64 * KiB, max_warps_per_sm=32,
       l2_bytes=6 * MiB, mem_bytes=48 * GiB, mem_bandwidth_gbs=672, boost_clock_mhz=1770,
       peak_tflops={"fp16": 130.5, "int8": 261.0, "fp32": 16.3}, mma=_MMA_SM75),
    _T("a100", "A100 SXM4 80GB", "ampere", (8, 0), sm_count=108,
       smem_per_block_optin=163 * KiB, smem_per_sm=164 * KiB, max_warps_per_sm=64,
       l2_bytes=40 * MiB, mem_bytes=80 * GiB, mem_bandwidth_gbs=2039, boost_clock_mhz=1410,
       peak_tflops={"fp16": 312.0, "bf16": 312.0, "tf32": 156.0, "int8": 624.0, "fp32": 19.5},
       mma=_MMA_SM80),
    _T("a10", "A10", "ampere", (8, 6), sm_count=72,
       smem_per_block_optin=99 * KiB, smem_per_sm=100 * KiB, max_warps_per_sm=48,
       l2_bytes=6 * MiB, mem_bytes=24 * GiB, mem_bandwidth_gbs=600, boost_clock_mhz=1695,
       peak_tflops={"fp16": 125.0, "bf16": 125.0, "tf32": 62.5, "int8": 250.0, "fp32": 31.2},
       mma=_MMA_SM80),
    _T("rtx4090", "GeForce RTX 4090", "ada", (8, 9), sm_count=128,
       smem_per_block_optin=99 * KiB, smem_per_sm=100 * KiB, max_warps_per_sm=48,
       l2_bytes=72 * MiB, mem_bytes=24 * GiB, mem_bandwidth_gbs=1008, boost_clock_mhz=2520,
       # GeForce runs fp16/fp8 at half rate when accumulating in fp32 (Ada whitepaper): fp16 is
       # 330.3 with fp16 accumulate but 165.2 with fp32, fp8 660.6 vs 330.3. We store the
       # fp32-accumulate figures because attention accumulates in fp32.
       peak_tflops={"fp16": 165.2, "bf16": 165.2, "tf32": 82.6, "fp8": 330.3, "int8": 660.6, "fp32": 82.6},
       mma=_MMA_SM89),
    _T("l4", "L4", "ada", (8, 9), sm_count=58,
       smem_per_block_optin=99 * KiB, smem_per_sm=100 * KiB, max_warps_per_sm=48,
       l2_bytes=48 * MiB, mem_bytes=24 * GiB, mem_bandwidth_gbs=300, boost_clock_mhz=2040,
       # The L4 datasheet prints sparse figures only (120/242/242/485/485); these are half.
       peak_tflops={"fp16": 121.0, "bf16": 121.0, "tf32": 60.0, "fp8": 242.5, "int8": 242.5, "fp32": 30.3},
       mma=_MMA_SM89),
    _T("l40s", "L40S", "ada", (8, 9), sm_count=142,
       smem_per_block_optin=99 * KiB, smem_per_sm=100 * KiB, max_warps_per_sm=48,
       l2_bytes=96 * MiB, mem_bytes=48 * GiB, mem_bandwidth_gbs=864, boost_clock_mhz=2520,
       peak_tflops={"fp16": 362.05, "bf16": 362.05, "tf32": 183.0, "fp8": 733.0, "int8": 733.0, "fp32": 91.6},
       mma=_MMA_SM89),
    _T("h100", "H100 SXM5 80GB", "hopper", (9, 0), sm_count=132,
       smem_per_block_optin=227 * KiB, smem_per_sm=228 * KiB, max_warps_per_sm=64,
       l2_bytes=50 * MiB, mem_bytes=80 * GiB, mem_bandwidth_gbs=3350, boost_clock_mhz=1980,
       peak_tflops={"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp8": 1978.9, "int8": 1978.9, "fp32": 66.9},
       mma=_MMA_SM90),
    # Same GH100 silicon and clocks as the H100 SXM5; only the memory differs.
    _T("h200", "H200 SXM 141GB", "hopper", (9, 0), sm_count=132,
       smem_per_block_optin=227 * KiB, smem_per_sm=228 * KiB, max_warps_per_sm=64,
       l2_bytes=50 * MiB, mem_bytes=141 * GiB, mem_bandwidth_gbs=4800, boost_clock_mhz=1980,
       peak_tflops={"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp8": 1978.9, "int8": 1978.9, "fp32": 66.9},
       mma=_MMA_SM90),
    # HGX B200 (1000 W) figures; 180 GB is the shipping HGX/DGX capacity (192 GB at launch).
    _T("b200", "B200 (HGX, 180GB)", "blackwell", (10, 0), sm_count=148,
       smem_per_block_optin=227 * KiB, smem_per_sm=228 * KiB, max_warps_per_sm=64,
       l2_bytes=132644864, mem_bytes=180 * GiB, mem_bandwidth_gbs=8000, boost_clock_mhz=1965,
       peak_tflops={"fp16": 2250.0, "bf16": 2250.0, "tf32": 1100.0, "fp8": 4500.0, "int8": 4500.0, "fp32": 80.0},
       mma=_MMA_SM100),
)}

# Several products share a compute capability; "sm_XX" picks the data-center part most
# people mean by it (sm_86 -> A10 rather than a GeForce 30-series, sm_89 -> L40S).
CC_DEFAULT: dict[tuple[int, int], str] = {
    (7, 0): "v100", (7, 5): "t4", (8, 0): "a100", (8, 6): "a10",
    (8, 9): "l40s", (9, 0): "h100", (10, 0): "b200",
}

# Device-name patterns (as torch/nvidia-smi print them) that pick a product among those
# sharing a cc. "H200" also matches GH200, whose memory is closer to H200's than H100's.
_DEVICE_NAME = {
    "t4": r"\bT4\b", "rtx8000": r"RTX\s*8000", "v100": r"V100", "a10": r"\bA10G?\b",
    "a100": r"A100", "l4": r"\bL4\b", "l40s": r"\bL40S?\b", "rtx4090": r"RTX\s*4090",
    "h100": r"H100", "h200": r"H200", "b200": r"B200",
}

_SM_RE = re.compile(r"sm_?(\d{2,3})(a?)")  # the last digit is the minor revision


def _allowed_hint(auto: bool = True) -> str:
    sms = ", ".join(TARGETS[n].sm + ("(a)" if TARGETS[n].cc >= (9, 0) else "") + f"->{n}" for n in CC_DEFAULT.values())
    return f"pass --target NAME with NAME one of: {', '.join(TARGETS)}; or {sms}" + ("; or auto" if auto else "")


def get_target(name: str) -> Target:
    """Resolve a short name ("h100"), a compute capability ("sm_90", "sm_90a", "sm90") or "auto"."""
    key = name.strip().lower()
    if key in TARGETS:
        return TARGETS[key]
    if key == "auto":
        return detect_local_target()
    m = _SM_RE.fullmatch(key)
    if m:
        cc = (int(m[1][:-1]), int(m[1][-1]))
        target = TARGETS.get(CC_DEFAULT.get(cc, ""))
        # The "a" suffix exists only where arch-specific instructions do (sm_90a, sm_100a).
        if target is not None and (not m[2] or target.ptx_arch.endswith("a")):
            return target
        raise TargetError(f"no target for {name.strip()!r} in the table", where="target", hint=_allowed_hint())
    raise TargetError(f"unknown target {shorten(repr(name.strip()), 80)}", where="target", hint=_allowed_hint())


def target_for_device(cc: tuple[int, int], device_name: str) -> Target:
    """The table entry for a device with this compute capability and name.

    A device the table does not name gets the nearest entry of its architecture, with a
    warning: the same compute capability, else (before sm_90) a lower minor revision, whose
    code it runs. From sm_90 on the "a" features (wgmma, TMA, tcgen05) are tied to the exact
    chip, so an unlisted one is an error that lists the known targets."""
    same_cc = [t for t in TARGETS.values() if t.cc == cc]
    for t in same_cc:
        if re.search(_DEVICE_NAME[t.name], device_name, re.IGNORECASE):
            return t
    nearest = None
    if same_cc:
        nearest = TARGETS[CC_DEFAULT[cc]]
    else:
        lower = [c for c in CC_DEFAULT if c[0] == cc[0] and c[1] < cc[1] and cc < (9, 0)]
        if lower:
            nearest = TARGETS[CC_DEFAULT[max(lower)]]
    if nearest is None:
        raise TargetError(f"GPU {device_name!r} (sm_{cc[0]}{cc[1]}) has no entry in the target table",
                          where="target auto", hint=_allowed_hint(auto=False))
    warnings.warn(f"GPU {device_name!r} (sm_{cc[0]}{cc[1]}) is not in attnforge's target table; using the nearest "
                  f"entry of its architecture, {nearest.name} ({nearest.product}, {nearest.sm}): limits and peak "
                  "rates may differ (pass --target / a target name to choose)", stacklevel=2)
    return nearest


def detect_local_target(device: int | None = None) -> Target:
    """The table entry for a local CUDA device (default: the current one), found through torch
    (imported only here). The CLI's ``--target auto`` and ``attention()`` both resolve GPUs here."""
    try:
        import torch
    except ImportError:
        raise TargetError("no local GPU: torch is not installed, so no CUDA device can be detected",
                          where="target auto", hint=_allowed_hint(auto=False)) from None
    if not torch.cuda.is_available():
        raise TargetError("no local GPU: torch sees no CUDA device",
                          where="target auto", hint=_allowed_hint(auto=False))
    index = torch.cuda.current_device() if device is None else device
    cc = tuple(torch.cuda.get_device_capability(index))
    return target_for_device((cc[0], cc[1]), torch.cuda.get_device_name(index))


# ------------------------------------------------------------------------------ output

_FAMILY_SHORT = {"mma.sync": "mma.sync", "wgmma.mma_async": "wgmma", "tcgen05.mma": "tcgen05"}


def _families(t: Target) -> str:
    return ", ".join(dict.fromkeys(_FAMILY_SHORT[i.family] for i in t.mma))


def _num(x: float) -> str:
    return f"{x:g}"


def format_targets_table() -> Table:
    """All targets as a rich Table (print it with a rich Console)."""
    from rich.table import Table

    table = Table(title="attnforge targets (dense peak TFLOPS)")
    for col in ("name", "product", "sm", "SMs", "smem/block KiB", "smem/SM KiB", "L2 MiB", "mem GB/s"):
        table.add_column(col, justify="left" if col in ("name", "product", "sm") else "right")
    peaks = ("fp16", "bf16", "tf32", "fp8", "fp32")
    for p in peaks:
        table.add_column(p, justify="right")
    table.add_column("tensor cores")
    for t in TARGETS.values():
        table.add_row(
            t.name, t.product, t.sm, str(t.sm_count),
            _num(t.smem_per_block_optin / KiB), _num(t.smem_per_sm / KiB),
            _num(round(t.l2_bytes / MiB, 1)), _num(t.mem_bandwidth_gbs),
            *(_num(t.peak_tflops[p]) if p in t.peak_tflops else "-" for p in peaks),
            _families(t),
        )
    return table


def targets_as_dicts() -> list[dict[str, Any]]:
    """Every target as plain JSON-ready data, derived properties included."""
    out = []
    for t in TARGETS.values():
        d = dataclasses.asdict(t)
        d["cc"] = list(t.cc)
        d["mma"] = [{**dataclasses.asdict(i), "name": i.name, "shape": list(i.shape),
                     "operand_dtypes": list(i.operand_dtypes), "acc_dtypes": list(i.acc_dtypes)} for i in t.mma]
        d.update(sm=t.sm, ptx_arch=t.ptx_arch, max_threads_per_sm=t.max_threads_per_sm,
                 has_cp_async=t.has_cp_async, has_tma=t.has_tma, has_wgmma=t.has_wgmma, has_tcgen05=t.has_tcgen05)
        out.append(d)
    return out
