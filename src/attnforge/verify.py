"""Verification: a generated kernel against the float64 reference, on fresh inputs per case.

Each case draws new random inputs (the hot query rows of ``numerics`` scaled so their logits reach
about +-1000: a kernel that exponentiates without subtracting the running max overflows there) inside rows
of NaN (a read past a head's rows, even one a mask then weights by 0, poisons its output), poisons the
outputs with NaN (an element the kernel never writes fails), runs the kernel (natively on a GPU,
in Triton's interpreter on a CPU), and compares O and the log-sum-exp with the reference computed
in float64 from the same rounded inputs. Shapes cover odd lengths, tails of every tile, Sq < Sk
and Sq > Sk, GQA/MQA ratios, and both BHSD and BSHD strides.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np
import torch

from .backends.base import Kernel
from .dtypes import torch_dtype
from .numerics import ACCUMULATE_UNIT, O_TOLERANCE, OPERAND_ROUNDING, lse_tolerance, o_row_bound, scale_hot_rows, worst_row
from .oracle import spec_reference
from .reference import lse_error, relative_error
from .spec import AttentionSpec, alibi_slopes_for
from .sizes import next_pow2
from .targets import Target, detect_local_target

# Threads that judge natively run cases at once (float64 references and bounds on the GPU, the last rows on the host).
JUDGE_THREADS = 4


@dataclass(frozen=True)
class CaseShape:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    layout: str = "bhsd"  # or "bshd": tensors are (B, S, H, D) in memory, passed as transposed views

    def __str__(self) -> str:
        return f"{self.B}x{self.Hq}/{self.Hkv}x{self.Sq}x{self.Sk} {self.layout}"


@dataclass
class CaseResult:
    shape: str
    err_o: float
    err_lse: float
    tol_o: float
    tol_lse: float
    seconds: float
    passed: bool
    error: str | None = None  # the exception, when the kernel raised instead of returning
    o_ratio: float = math.nan  # the worst row's |O - ref| over its bound (numerics.o_row_bound): <= 1 passes
    worst: str | None = None  # the first problem found, naming its (b, h, row); else the row closest to its bound


@dataclass
class VerifyRecord:
    """The structured result of one verification run (goes into report.json as is)."""

    device: str
    dtype: str
    cases: list[CaseResult] = field(default_factory=list)
    mode: str = "interpreter"  # "native" (the target's architecture), "native-other-arch" or "interpreter"
    ran: str = ""  # what ran, in words: which GPU or interpreter, and whether it was the target's code

    @property
    def statement(self) -> str:
        """One sentence a report can print as the kernel's status."""
        if not self.passed:
            return f"verification FAILED: {self.ran}"
        return f"verified {self.ran}"

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def max_err_o(self) -> float:
        return max((c.err_o for c in self.cases), default=math.nan)

    @property
    def max_err_lse(self) -> float:
        return max((c.err_lse for c in self.cases), default=math.nan)

    def to_dict(self) -> dict:
        return {"device": self.device, "dtype": self.dtype, "passed": self.passed, "mode": self.mode, "statement": self.statement, "max_err_o": self.max_err_o,
                "max_err_lse": self.max_err_lse, "cases": [asdict(c) for c in self.cases]}


def verification_shapes(spec: AttentionSpec, params: dict[str, int], *, native: bool) -> list[CaseShape]:
    """Shapes for ``spec``'s kernel: its own GQA ratio and MHA/MQA, odd lengths that leave tails in
    every tile (from the kernel's BM/BN), Sq < Sk and Sq > Sk; larger ones when running natively.

    Decode shapes take every kind of split a launch-time split count (``splits.split_count``) gives:
    with the interpreter's 4 SMs, 1 split of 1 tile (Sk = 1, and Sk < BN), 2 splits of 1 and of 2
    tiles, 4 splits of 3 tiles with a ragged last one, and 1 split of 3 tiles where 8 programs
    fill the SMs; natively (130-odd SMs) the same small shapes take up to 16 splits, some empty,
    and the large ones 32 and 64."""
    g = spec.group_size
    bm, bn = params.get("BM", 64), params.get("BN", 64)
    if spec.is_decode:
        shapes = [CaseShape(2, 2 * g, 2, 1, 1), CaseShape(1, 2 * g, 2, 1, bn + 13, "bshd"),
                  CaseShape(2, g, 1, 1, 9 * bn + 5), CaseShape(1, 4, 4, 3, 3 * bn + 1, "bshd"),
                  CaseShape(1, 4, 1, 1, bn // 2 + 3), CaseShape(4, 2 * g, 2, 1, 2 * bn + 3, "bshd")]
        if native:
            shapes += [CaseShape(4, 4 * g, 4, 1, 4099), CaseShape(3, 2 * g, 2, 1, 32769, "bshd"), _one_split_many_tiles(g, bn)]
        return shapes
    shapes = [
        CaseShape(1, 2 * g, 2, 37, 53),
        CaseShape(2, g, 1, 70, 45, "bshd"),
        CaseShape(1, 4, 4, bm + 3, 2 * bn + 7),
        CaseShape(1, 4, 1, 2 * bm + 5, bm + 1, "bshd"),
        CaseShape(1, 2, 2, 1, 2 * bn + 3),
        # many K/V tiles per row: an error that grows with each tile (a 16-bit accumulator) shows
        CaseShape(1, 2, 1, 3, (256 if native else 96) * bn + 5),
    ]
    if native:
        # The float64 reference materialises B x Hq x Sq x Sk scores on the host: keep that under ~50M.
        shapes += [CaseShape(2, 2 * g, 2, 1000, 1037), CaseShape(1, g, 1, 2048, 2048, "bshd"),
                   CaseShape(3, 6, 6, 777, 1999), CaseShape(1, 2 * g, 2, 2049, 300, "bshd"),
                   _more_tiles_than_sms(g, bm, bn)]
    return shapes


def _one_split_many_tiles(g: int, bn: int) -> CaseShape:
    """A decode batch of 384 programs (one row block each), at least two per SM on GPUs of up to 192 SMs:
    the split rule launches one split, so a pair whose merge of one split is the identity runs its
    partial kernel alone, storing into o and lse after several K/V tiles (the small shapes above reach
    one split only with one tile)."""
    return CaseShape(192, 2 * g, 2, 1, 3 * bn + 7, "bshd")


def _more_tiles_than_sms(g: int, bm: int, bn: int) -> CaseShape:
    """Three row tiles per (b, h) and B x Hq such that there are about three times as many work
    tiles as the GPU has SMs: a persistent kernel's programs (one per SM) each take several, so
    what one carries from tile to tile (ring positions, barrier phases) is checked; a kernel with a
    program per tile runs several waves."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    kv_heads = -(-3 * sms // (3 * 4 * g))  # B = 4, three row tiles per (b, h)
    return CaseShape(4, kv_heads * g, kv_heads, 2 * bm + 5, 2 * bm + 2 * bn + 7, "bshd")


def _mma_format(spec: AttentionSpec) -> str:
    return "tf32" if spec.allow_tf32 else spec.dtype


def _tensor(gen: torch.Generator, shape: CaseShape, heads: int, seq: int, dim: int, dtype: torch.dtype, device: str, guard: int,
            hot: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(an input in the case's layout, the buffer it is a view of): each head's ``seq`` rows sit between
    ``guard`` rows of NaN before and after (BSHD: positions before and after, across the heads). A kernel
    that reads rows outside the view -- a tile past Sk, or before a window's first key -- reads NaN, which
    survives a mask's -inf (0 * NaN is NaN in the PV GEMM) where another head's finite rows would not show.
    ``guard`` is a multiple of 16 rows: every stride equals a contiguous tensor's modulo 16 and the data is as
    aligned, so the kernel specialises (Triton's divisibility by 16) and loads (TMA, 16-byte copies) as it does
    for a contiguous tensor of the same sizes."""
    x = torch.randn(shape.B, heads, seq, dim, generator=gen, dtype=torch.float64, device=gen.device)
    if hot:  # rows 3, 10, 17, ...; with fewer rows (decode) the (batch, head) slices 3, 10, ... (numerics.scale_hot_rows)
        scale_hot_rows(x)
    assert guard % 16 == 0, guard
    rows = guard + seq + guard
    bshd = shape.layout == "bshd"
    buf = torch.full((shape.B, rows, heads, dim) if bshd else (shape.B, heads, rows, dim), math.nan, dtype=dtype, device=device)
    view = (buf.transpose(1, 2) if bshd else buf)[:, :, guard:guard + seq]
    view.copy_(x.to(dtype).to(device))
    return view, buf


def _input_guards_intact(buf: torch.Tensor, layout: str, guard: int, seq: int) -> bool:
    rows = buf.transpose(1, 2) if layout == "bshd" else buf
    return bool(torch.isnan(rows[:, :, :guard]).all() and torch.isnan(rows[:, :, guard + seq:]).all())


# Outputs live inside larger buffers filled with CANARY: a kernel that writes past Sq rows or Dv
# columns changes a canary and fails, however the case's strides lay the rows out. The guards are
# as deep as one tile can overrun (a whole query block past Sq, the padding of a head dim), so the
# writes land in them rather than in memory the case does not own.
CANARY = 1234.5


def _guarded(shape: CaseShape, dims: tuple[int, ...], dtype: torch.dtype, device: str, guard_rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output view filled with NaN, the whole buffer, a mask of the buffer outside the view), in
    the case's layout (BSHD: heads are not the outer stride), with ``guard_rows`` rows (and, for
    O, guard columns) of CANARY around the view."""
    if len(dims) == 4:
        B, H, S, D = dims
        cols = 16 + next_pow2(D) - D
        full = (B, S + guard_rows, H, D + cols) if shape.layout == "bshd" else (B, H, S + guard_rows, D + cols)
        def window(t: torch.Tensor) -> torch.Tensor:
            return (t.transpose(1, 2) if shape.layout == "bshd" else t)[:, :, :S, :D]
    else:
        B, H, S = dims
        full = (B, H, S + guard_rows)
        def window(t: torch.Tensor) -> torch.Tensor:
            return t[..., :S]
    buf = torch.full(full, CANARY, dtype=dtype, device=device)
    outside = torch.ones(full, dtype=torch.bool, device=device)
    window(outside).fill_(False)
    view = window(buf)
    view.fill_(math.nan)
    return view, buf, outside


def _guards_intact(buf: torch.Tensor, outside: torch.Tensor) -> bool:
    return bool((buf[outside] == CANARY).all())


def _row_name(index: tuple[int, ...]) -> str:
    return f"b={index[0]} h={index[1]} row={index[2]}"


@dataclass
class _Launched:
    """One case after its launch: what the judge needs (tensors on the kernel's device)."""

    shape: CaseShape
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    inputs: list[torch.Tensor]
    o: torch.Tensor
    lse: torch.Tensor
    guards: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # o buffer, outside, lse buffer, outside
    slopes: np.ndarray | None
    seconds: float
    crash: str | None = None
    input_guards: tuple[tuple[torch.Tensor, int], ...] = ()  # q, k, v's buffers (NaN around the views) and their rows per head
    guard_rows: int = 0


def run_case(kernel: Kernel, spec: AttentionSpec, shape: CaseShape, seed: int, *, block_rows: int = 128) -> CaseResult:
    """One case; ``block_rows``: the kernel's query block (BM), the deepest a store can overrun."""
    return _judge(spec, _launch(kernel, spec, shape, seed, block_rows))


def _launch(kernel: Kernel, spec: AttentionSpec, shape: CaseShape, seed: int, block_rows: int) -> _Launched:
    """Draw the case's inputs, guard its outputs and run the kernel (a crash is recorded, not raised;
    drawing the inputs raises: running out of memory, or a context an earlier kernel left unusable,
    is no verdict on this kernel)."""
    dtype = torch_dtype(spec.dtype)
    device = kernel.device
    gen = torch.Generator(device).manual_seed(seed)  # inputs drawn where the kernel runs: a GPU draws the large cases at once
    guard = max(16, next_pow2(block_rows))  # a whole query block: as deep as one tile can overrun
    q, q_buf = _tensor(gen, shape, shape.Hq, shape.Sq, spec.head_dim, dtype, device, guard, hot=True)
    k, k_buf = _tensor(gen, shape, shape.Hkv, shape.Sk, spec.head_dim, dtype, device, guard)
    v, v_buf = _tensor(gen, shape, shape.Hkv, shape.Sk, spec.head_dim_v, dtype, device, guard)
    inputs = [t.clone() for t in (q, k, v)]
    o, o_buf, o_outside = _guarded(shape, (shape.B, shape.Hq, shape.Sq, spec.head_dim_v), dtype, device, guard)
    lse, lse_buf, lse_outside = _guarded(shape, (shape.B, shape.Hq, shape.Sq), torch.float32, device, guard)
    slopes = None
    args: dict = spec.runtime_scalars()
    if spec.alibi_slopes is not None:
        slopes = np.array(spec.alibi_slopes if shape.Hq == spec.heads else alibi_slopes_for(shape.Hq))
        args["alibi_slopes"] = torch.tensor(slopes, dtype=torch.float32, device=device)
    launched = _Launched(shape, q, k, v, inputs, o, lse, (o_buf, o_outside, lse_buf, lse_outside), slopes, 0.0,
                         input_guards=((q_buf, shape.Sq), (k_buf, shape.Sk), (v_buf, shape.Sk)), guard_rows=guard)
    start = time.perf_counter()
    try:
        kernel.launch(q, k, v, o, lse, **args)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as err:  # a crash is a failed case with its reason, not a lost run
        launched.crash = f"{type(err).__name__}: {err}"[:500]
    launched.seconds = time.perf_counter() - start
    return launched


def _judge(spec: AttentionSpec, case: _Launched) -> CaseResult:
    """The case's outputs against the spec's float64 reference, row by row."""
    shape, q, k, v = case.shape, case.q, case.k, case.v
    fmt = _mma_format(spec)
    tol_o, tol_lse = O_TOLERANCE[fmt], lse_tolerance(fmt)
    if case.crash is not None:
        return CaseResult(str(shape), math.inf, math.inf, tol_o, tol_lse, case.seconds, False, case.crash)
    o_buf, o_outside, lse_buf, lse_outside = case.guards
    problems = []
    if not (_guards_intact(o_buf, o_outside) and _guards_intact(lse_buf, lse_outside)):
        problems.append("wrote outside o or lse (past Sq rows or Dv columns)")
    if not all(torch.equal(a, b) for a, b in zip(case.inputs, (q, k, v))):
        problems.append("changed its inputs q, k or v")
    if not all(_input_guards_intact(buf, shape.layout, case.guard_rows, seq) for buf, seq in case.input_guards):
        problems.append("wrote outside q, k or v (into the rows around them)")
    try:
        err_o, ref_norm, ref_lse, out_lse, score_err, row_err, bound = _float64_rows(spec, case, fmt, case.q.device)
    except torch.cuda.OutOfMemoryError:  # the GPU is full (a small GPU, other work): the same numbers on the host
        err_o, ref_norm, ref_lse, out_lse, score_err, row_err, bound = _float64_rows(spec, case, fmt, torch.device("cpu"))
    err_lse = lse_error(out_lse, ref_lse)
    index, o_ratio = worst_row(row_err, bound)
    if not o_ratio <= 1.0:
        problems.append(f"O at {_row_name(index)}: |O - ref| {row_err[index]:.3g} > bound {bound[index]:.3g} (|ref| {ref_norm[index]:.3g})")
    lse_ok, tol_lse, lse_index = _lse_within_bound(out_lse, ref_lse, score_err, tol_lse)
    if not lse_ok or not err_lse < math.inf:
        where = lse_index if lse_index is not None else _first_bad_lse(out_lse, ref_lse)
        problems.append(f"LSE at {_row_name(where)}: {out_lse[where]:.6g} vs ref {ref_lse[where]:.6g}")
    if not err_o <= tol_o:
        problems.append(f"||O - ref|| / ||ref|| = {err_o:.3g} > {tol_o:g}")
    return CaseResult(str(shape), err_o, err_lse, tol_o, tol_lse, case.seconds, not problems, o_ratio=o_ratio,
                      worst=problems[0] if problems else f"O closest to its bound at {_row_name(index)} ({o_ratio:.2f} of it)")


def _float64_rows(spec: AttentionSpec, case: _Launched, fmt: str, device: torch.device) -> tuple:
    """The case's float64 reference and per-row numbers, computed on ``device`` (the kernel's
    GPU: the reference's B x Hq x Sq x Sk weights and the row bounds are the heavy part):
    (||O - ref|| / ||ref||, then host arrays of |ref O| per row, ref LSE, out LSE, score error
    bound per row, |O - ref| per row, bound per row)."""
    shape = case.shape
    sizes = {"B": shape.B, "Hq": shape.Hq, "Hkv": shape.Hkv, "Sq": shape.Sq, "Sk": shape.Sk}
    q, k, v = (t.to(device=device, dtype=torch.float64) for t in (case.q, case.k, case.v))
    ref_o, ref_lse, weights, row_sum = spec_reference(spec, sizes, q, k, v, case.slopes, weights=True)
    out_o = case.o.to(device=device, dtype=torch.float64)
    # O row by row (NaN: an unwritten element; err = inf)
    row_err = torch.where(torch.isnan(out_o).any(dim=-1), math.inf, torch.linalg.vector_norm(torch.nan_to_num(out_o - ref_o), dim=-1))
    score_err = score_error_bound(case.q.to(device), case.k.to(device), spec.scale, fmt)
    bound = o_row_bound(weights, row_sum, v.repeat_interleave(shape.Hq // shape.Hkv, dim=1), ref_o, score_err, fmt, spec.dtype)
    rows = (torch.linalg.vector_norm(ref_o, dim=-1), ref_lse, case.lse.double(), score_err, row_err, bound)
    return (relative_error(out_o, ref_o), *(t.cpu().numpy() for t in rows))


def _judge_after_crash(spec: AttentionSpec, case: _Launched, crashed: _Launched) -> CaseResult:
    """``_judge`` once a launch has crashed: a crash such as an illegal address leaves the CUDA
    context unusable, so the tensors of cases launched before it cannot be read back. Such a case
    fails naming the crash, as the crashed case does, instead of the verification raising."""
    try:
        return _judge(spec, case)
    except Exception as err:
        fmt = _mma_format(spec)
        return CaseResult(str(case.shape), math.inf, math.inf, O_TOLERANCE[fmt], lse_tolerance(fmt), case.seconds, False,
                          f"not judged: case {crashed.shape} crashed first ({crashed.crash}); then {type(err).__name__}: {err}"[:500])


def _not_run(spec: AttentionSpec, shape: CaseShape, crashed: _Launched) -> CaseResult:
    """A case left unlaunched because an earlier one crashed: it fails, naming that crash."""
    fmt = _mma_format(spec)
    return CaseResult(str(shape), math.inf, math.inf, O_TOLERANCE[fmt], lse_tolerance(fmt), 0.0, False,
                      f"not run: case {crashed.shape} crashed first ({crashed.crash})"[:500])


def _first_bad_lse(out: np.ndarray, ref: np.ndarray) -> tuple[int, ...]:
    """The first row whose LSE is NaN, or -inf where the reference is not (or the reverse)."""
    bad = np.isnan(out) | (np.isfinite(out) != np.isfinite(ref)) | (~np.isfinite(ref) & (out != ref))
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else (0, 0, 0)


def score_error_bound(q: torch.Tensor, k: torch.Tensor, scale: float, fmt: str) -> torch.Tensor:
    """Per query row (B, Hq, Sq), float64 on q's device: the largest error any of its
    fp32-accumulated scores may carry."""
    group = q.shape[1] // k.shape[1]
    qa = q.abs().float()
    ka = k.abs().float().repeat_interleave(group, dim=1)
    worst = (qa @ ka.transpose(-1, -2)).amax(dim=-1)  # max over keys of sum_d |q_d| |k_d|
    unit = OPERAND_ROUNDING[fmt] + q.shape[-1] * ACCUMULATE_UNIT
    return unit * abs(scale) * worst.double()


def _lse_within_bound(out: np.ndarray, ref: np.ndarray, score_bound: np.ndarray, base: float) -> tuple[bool, float, tuple[int, ...] | None]:
    """Whether every finite row is within its bound, the bound (relative to 1 + |ref|) at the
    row closest to failing, and that row. Masked rows (-inf) and NaN are judged by lse_error."""
    finite = np.isfinite(ref) & np.isfinite(out)
    if not finite.any():
        return True, base, None
    scale = 1.0 + np.abs(ref)
    allowed = base * scale + score_bound
    with np.errstate(invalid="ignore"):  # -inf - -inf in masked rows, replaced below
        ratio = np.where(finite, np.abs(np.where(finite, out - ref, 0.0)) / allowed, 0.0)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
    return bool(ratio[worst] <= 1.0), float(allowed[worst] / scale[worst]), worst


def what_runs(kernel: Kernel, target: Target | None) -> tuple[str, str]:
    """(mode, sentence): where verification runs ``kernel``, and whether that is the target's code."""
    aimed = f"{target.name} ({target.sm})" if target is not None else "the target"
    if kernel.interpret:
        return "interpreter", f"in the interpreter on the CPU; the code compiled for {aimed} was not run"
    local = detect_local_target(torch.cuda.current_device())
    gpu = f"{torch.cuda.get_device_name()} ({local.sm})"
    if target is None or local.cc == target.cc:
        return "native", f"natively on {gpu}" + (", the target's architecture" if target is not None else "")
    return "native-other-arch", (f"natively on {gpu} with a build for that GPU; the code compiled for {aimed} was not run "
                                 "(a different architecture)")


def verify(
    kernel: Kernel,
    spec: AttentionSpec,
    params: dict[str, int],
    *,
    target: Target | None = None,
    shapes: list[CaseShape] | None = None,
    seed: int = 0,
    progress: Callable[[int, int, CaseResult], None] | None = None,
    fail_fast: bool = False,
) -> VerifyRecord:
    """Run every case and return the record; ``progress(done, total, case)`` after each.
    ``fail_fast`` stops at the first failing case (a refused kernel needs no second reason).
    ``target``: the GPU the kernel was generated for, so the record says whether what ran was
    the target's own code."""
    native = not kernel.interpret
    shapes = verification_shapes(spec, params, native=native) if shapes is None else shapes
    name = f"cuda:{torch.cuda.get_device_name()}" if native else "cpu (interpreter)"
    mode, ran = what_runs(kernel, target)
    record = VerifyRecord(name, _mma_format(spec), mode=mode, ran=ran)
    block_rows = params.get("BM", 128)
    if not native:  # the interpreter is the slow part: one case at a time, so fail_fast stops early
        results: Iterator[CaseResult] = (run_case(kernel, spec, shape, seed + i, block_rows=block_rows) for i, shape in enumerate(shapes))
    else:  # the GPU runs every case first; the float64 judging (torch and numpy, which release the GIL) overlaps in threads
        launched: list[_Launched] = []
        for i, shape in enumerate(shapes):
            launched.append(_launch(kernel, spec, shape, seed + i, block_rows))
            if launched[-1].crash is not None:
                break  # a fault (an illegal address) leaves the CUDA context unusable: no later case could run
        crashed = launched[-1] if launched[-1].crash is not None else None
        judge = _judge if crashed is None else lambda spec, case: _judge_after_crash(spec, case, crashed)
        pool = ThreadPoolExecutor(max_workers=min(len(launched), JUDGE_THREADS))
        futures = [pool.submit(judge, spec, case) for case in launched]
        not_run = [_not_run(spec, shape, crashed) for shape in shapes[len(launched):]]
        results = itertools.chain((future.result() for future in futures), not_run)
    try:
        for i, case in enumerate(results):
            record.cases.append(case)
            if progress is not None:
                progress(i + 1, len(shapes), case)
            if fail_fast and not case.passed:
                break
    finally:
        if native:
            pool.shutdown(cancel_futures=True)
    return record
