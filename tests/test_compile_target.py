"""Compiling a Triton kernel for table targets on a CPU-only machine (no GPU needed)."""

from __future__ import annotations

import json

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from attnforge import compile_report as ct  # noqa: E402
from attnforge.backends.triton.compile import compile_for_target  # noqa: E402
from attnforge.compile_report import (  # noqa: E402
    CompileReport,
    check_fits,
    detect_instructions,
    format_report,
)
from attnforge.errors import TargetError  # noqa: E402
from attnforge.targets import get_target  # noqa: E402


@triton.jit
def tile_matmul(a, b, c, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K: tl.constexpr):
    # One BM x BN output tile of (BM x K) @ (K x BN), row-major, no masks.
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * BN + rn[None, :], acc)


def compile_mm(target: str, dtype: str, bm: int, bn: int, bk: int, warps: int, stages: int,
               k: int = 512, **kw) -> tuple[CompileReport, object]:
    sig = {"a": f"*{dtype}", "b": f"*{dtype}", "c": "*fp32"}
    consts = {"BM": bm, "BN": bn, "BK": bk, "K": k}
    return compile_for_target(tile_matmul, sig, consts, get_target(target), warps, stages, **kw)


@pytest.fixture(scope="module")
def h100() -> CompileReport:
    return compile_mm("h100", "bf16", 64, 64, 64, 4, 3)[0]


@pytest.fixture(scope="module")
def a100() -> CompileReport:
    return compile_mm("a100", "bf16", 64, 64, 64, 4, 3)[0]


@pytest.fixture(scope="module")
def t4() -> CompileReport:
    # fp16: the only 16-bit dtype T4's tensor cores take (Triton 3.6 also compiles bf16 for
    # sm_75, by upcasting, on the same FMA path).
    return compile_mm("t4", "fp16", 64, 64, 64, 4, 2)[0]


def test_h100_uses_wgmma_on_sm90a(h100: CompileReport) -> None:
    assert h100.ptx_target == "sm_90a"
    assert "wgmma" in h100.instructions and "mma.sync" not in h100.instructions
    assert h100.tensor_cores_used
    assert h100.registers > 0 and h100.shared_bytes > 0
    assert h100.spill_bytes == 0
    check_fits(h100, get_target("h100"))


def test_a100_uses_mma_sync_and_cp_async(a100: CompileReport) -> None:
    assert a100.ptx_target == "sm_80"
    assert "mma.sync" in a100.instructions and "wgmma" not in a100.instructions
    assert "cp.async" in a100.instructions and "tma" not in a100.instructions
    assert a100.tensor_cores_used
    assert a100.registers > 0 and a100.shared_bytes > 0
    assert a100.notes == ()
    check_fits(a100, get_target("a100"))


def test_t4_gets_no_tensor_cores_and_says_so(t4: CompileReport) -> None:
    assert t4.ptx_target == "sm_75"
    assert not t4.tensor_cores_used
    assert t4.instructions == ("fma-only",)
    assert any(n.startswith("Triton emits no tensor-core instructions for tl.dot on sm_75 (Turing)")
               and "FMA pipes" in n for n in t4.notes)


def test_huge_pipelined_tiles_do_not_fit_a100_shared_memory() -> None:
    # 4 stages of 256x32 + 32x256 fp32 tiles: 3 buffers x 64 KiB = 192 KiB > 163 KiB.
    report, _ = compile_mm("a100", "fp32", 256, 256, 32, 8, 4, k=1024)
    a100 = get_target("a100")
    assert report.shared_bytes > a100.smem_per_block_optin
    with pytest.raises(TargetError) as err:
        check_fits(report, a100)
    msg = str(err.value)
    assert "shared memory" in msg and str(report.shared_bytes) in msg and str(a100.smem_per_block_optin) in msg
    assert "lower BN/BM or the pipeline stages (stages)" in msg


def test_spilling_kernel_is_rejected_with_what_to_change() -> None:
    # A 256x256 fp32 accumulator over 4 warps is 512 values a thread: more than 255 registers.
    report, _ = compile_mm("a100", "fp16", 256, 256, 16, 4, 2)
    a100 = get_target("a100")
    assert report.shared_bytes <= a100.smem_per_block_optin
    assert report.spill_bytes > 0
    with pytest.raises(TargetError, match="lower BM or BN, or raise warps") as err:
        check_fits(report, a100)
    assert "shared memory:" not in err.value.message


def test_keep_dir_report_dict_and_lines(tmp_path, a100: CompileReport) -> None:
    report, kernel = compile_mm("a100", "bf16", 64, 64, 64, 4, 3, keep_dir=tmp_path)
    assert (tmp_path / "tile_matmul.a100.ptx").read_text().count("mma.sync") > 0
    assert (tmp_path / "tile_matmul.a100.cubin").read_bytes() == kernel.asm["cubin"]
    d = json.loads(json.dumps(report.to_dict()))
    assert d["instructions"] == list(report.instructions) and d["sm"] == "sm_80"
    lines = format_report(report)
    assert lines[0].startswith("tile_matmul for a100 (sm_80)")
    assert any("tensor cores used" in line for line in lines)


def test_detect_instructions_from_ptx_text() -> None:
    ptx = ("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {...};\n"
           "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [x], [y];\n")
    assert detect_instructions(ptx, has_dot=True) == ("tma", "wgmma")
    ptx = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {...};\ncp.async.cg.shared.global [x], [y], 16;\n"
    assert detect_instructions(ptx, has_dot=True) == ("cp.async", "mma.sync")
    assert detect_instructions("fma.rn.f32 %f1, %f2, %f3, %f4;", has_dot=True) == ("fma-only",)
    assert detect_instructions("fma.rn.f32 %f1, %f2, %f3, %f4;", has_dot=False) == ()


def test_compile_time_out_of_resources_becomes_target_error(monkeypatch) -> None:
    from triton.runtime.errors import OutOfResources

    def refuse(*args, **kwargs):
        raise OutOfResources(300_000, 166_912, "shared memory")

    monkeypatch.setattr(triton, "compile", refuse)
    with pytest.raises(TargetError, match=r"300000 B .*lower BN/BM or the pipeline stages \(stages\)"):
        compile_mm("a100", "bf16", 64, 64, 64, 4, 3)


def test_signature_mismatch_is_a_target_error() -> None:
    with pytest.raises(TargetError, match="missing: c"):
        compile_for_target(tile_matmul, {"a": "*fp16", "b": "*fp16"}, {"BM": 64, "BN": 64, "BK": 64, "K": 64},
                           get_target("a100"), 4, 2)


def test_missing_cuobjdump_says_how_to_get_it(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_CUOBJDUMP_PATH", raising=False)
    monkeypatch.setattr(ct.shutil, "which", lambda name: None)
    monkeypatch.setattr(ct.os.path, "isfile", lambda path: False)
    with pytest.raises(TargetError, match="cuobjdump") as err:
        ct.find_cuobjdump()
    assert "TRITON_CUOBJDUMP_PATH" in (err.value.hint or "")
