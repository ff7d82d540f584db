"""A performance estimate for GPUs not at hand: a roofline per compiled kernel, from the target
table alone. It is an estimate, never a measurement: the time a kernel could take at best on the
spec's own sizes (the reference shape), the larger of

  * its FLOPs at the rate of the MMA instructions its compile report says it uses: the table's
    dense peak (``Target.peak_tflops``) for wgmma / tcgen05, and for mma.sync where that is the
    target's own tensor-core instruction (sm_75 to sm_89); mma.sync on a target whose peak is
    wgmma's or tcgen05's gets MMA_SYNC_FRACTION of it; a kernel whose GEMMs got no tensor-core
    instruction ("fma-only") the fp32 FMA peak;
  * its bytes at the memory bandwidth: Q, K and V read once, O and the LSE written once.

FLOPs are ``AttentionSpec.flops_fwd``: the two GEMMs, halved when causal with Sq == Sk, windows
and masks not discounted (the figure attention benchmarks report). A kernel with no GEMM (the
merge of split-KV partials) gets no estimate. Both backends' reports (``report.py``) and the
``generate`` summary print these beside each kernel.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .compile_report import TENSOR_CORE_TAGS
from .dtypes import FORMATS

if TYPE_CHECKING:
    from .compile_report import CompileReport
    from .spec import AttentionSpec
    from .targets import Target

# mma.sync on Hopper reaches about 2/3 of the tensor cores' (wgmma) peak: FlashAttention-3
# (Shah et al., arXiv 2407.08608, section 2), after Luo et al.'s Hopper microbenchmarks. Blackwell
# (tcgen05) has no published mma.sync figure; the Hopper fraction is assumed there and said so.
# Measured on the H200 (bench/RESULTS.md, run 20): m16n8k16 with its operands in registers, 634 TFLOPS
# at 16 warps an SM (0.64 of the 989 datasheet figure), 616 at 8.
MMA_SYNC_FRACTION = 2 / 3
LSE_BYTES = 4  # the log-sum-exp is written in fp32
WORD = "estimate"  # every line and field says it: a roofline from the table, not a timing


@dataclass(frozen=True)
class Estimate:
    kernel: str
    target: str
    shape: str  # the reference shape: the spec's own sizes
    flops: int
    bytes: int
    rate_tflops: float  # the compute roof used
    rate: str  # which instruction's rate, and where the figure comes from
    bandwidth_gbs: float
    compute_ms: float
    memory_ms: float
    ms: float  # the larger of the two: the estimate
    bound: str  # "compute" or "memory"

    @property
    def tflops(self) -> float:
        """The throughput the estimate implies (at most the compute roof)."""
        return self.flops / (self.ms * 1e9)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": WORD, **asdict(self), "tflops": round(self.tflops, 1)}

    def line(self) -> str:
        return line(self.to_dict())


def short(e: Mapping[str, Any]) -> str:
    """An estimate (``Estimate.to_dict()``, as report.json holds it) in a few words, for a table cell."""
    return f">= {e['ms']:.3g} ms, {e['bound']}-bound, <= {e['tflops']:g} TFLOPS"


def line(e: Mapping[str, Any]) -> str:
    """An estimate in one line for a report or the summary, called an estimate, with its figures."""
    return (f"{WORD} (roofline, not measured) at {e['shape']}: {short(e)} ({e['flops'] / 1e9:.4g} GFLOP at "
            f"{e['rate_tflops']:.4g} TFLOPS {e['rate']}; {e['bytes'] / 1e6:.4g} MB at {e['bandwidth_gbs']:g} GB/s)")


def reference_shape(spec: AttentionSpec) -> str:
    return f"B={spec.batch} Hq={spec.heads}/Hkv={spec.kv_heads} Sq={spec.seqlen_q} Sk={spec.seqlen_k} D={spec.head_dim}" + (
        f" Dv={spec.head_dim_v}" if spec.head_dim_v != spec.head_dim else "")


def min_bytes(spec: AttentionSpec) -> int:
    """Q, K and V read once, O and the LSE written once (the least traffic a forward kernel has)."""
    e = FORMATS[spec.dtype].bytes
    q_rows, kv_rows = spec.batch * spec.heads * spec.seqlen_q, spec.batch * spec.kv_heads * spec.seqlen_k  # type: ignore[operator]
    return e * (q_rows * spec.head_dim + kv_rows * (spec.head_dim + spec.head_dim_v) + q_rows * spec.head_dim_v) + LSE_BYTES * q_rows  # type: ignore[operator]


def compute_rate(spec: AttentionSpec, target: Target, instructions: Iterable[str]) -> tuple[float, str] | None:
    """(TFLOPS, what it is) for GEMMs that use ``instructions`` (CompileReport tags) on ``target``;
    None for a kernel without GEMMs."""
    tags = set(instructions)
    tc = [t for t in TENSOR_CORE_TAGS if t in tags]
    fma = target.peak_tflops.get("fp32", 0.0)
    if not tc:
        return (fma, "fp32 FMA peak: the GEMMs got no tensor-core instruction") if "fma-only" in tags else None
    operand = "tf32" if spec.dtype == "fp32" else spec.dtype
    peak = target.peak_tflops.get(operand)
    if peak is None:  # the table has no tensor-core rate for this format here
        return fma, f"fp32 FMA peak ({target.name} lists no {operand} tensor-core rate)"
    for family in ("tcgen05", "wgmma"):
        if family in tc:
            return peak, f"{family} {operand} dense peak (datasheet)"
    if target.has_wgmma or target.has_tcgen05:
        faster = "wgmma" if target.has_wgmma else "tcgen05"
        assumed = "" if target.has_wgmma else ", assumed as on Hopper"
        return peak * MMA_SYNC_FRACTION, f"mma.sync: about 2/3 of the {operand} {faster} dense peak{assumed}"
    return peak, f"mma.sync {operand} dense peak (datasheet)"


def estimate(spec: AttentionSpec, target: Target, report: CompileReport) -> Estimate | None:
    """The roofline of one compiled kernel for the spec's own sizes; None for a kernel without GEMMs."""
    rate = compute_rate(spec, target, report.instructions)
    if rate is None or rate[0] <= 0:
        return None
    tflops, what = rate
    flops, nbytes = spec.flops_fwd, min_bytes(spec)
    compute_ms = flops / (tflops * 1e9)
    memory_ms = nbytes / (target.mem_bandwidth_gbs * 1e6)
    bound = "compute" if compute_ms >= memory_ms else "memory"
    return Estimate(report.kernel, target.name, reference_shape(spec), flops, nbytes, tflops, what, target.mem_bandwidth_gbs,
                    compute_ms, memory_ms, max(compute_ms, memory_ms), bound)


def estimates(spec: AttentionSpec, target: Target, reports: Iterable[CompileReport]) -> dict[str, Estimate | None]:
    """Each compiled kernel's estimate, by kernel name."""
    return {r.kernel: estimate(spec, target, r) for r in reports}
