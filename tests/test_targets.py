"""The GPU target table: name resolution, feature flags, tensor-core dtypes and rendering."""

from __future__ import annotations

import json
import sys

import pytest
from rich.console import Console

from attnforge.errors import TargetError
from attnforge.targets import (
    TARGETS,
    format_targets_table,
    get_target,
    target_for_device,
    targets_as_dicts,
)

REQUIRED = ("t4", "rtx8000", "v100", "a10", "a100", "l4", "l40s", "rtx4090", "h100", "h200", "b200")


@pytest.mark.parametrize("name", REQUIRED)
def test_every_required_name_resolves(name: str) -> None:
    t = get_target(name)
    assert t.name == name
    assert get_target(f"  {name.upper()} ") is t


def test_table_is_ordered_oldest_to_newest() -> None:
    ccs = [t.cc for t in TARGETS.values()]
    assert ccs == sorted(ccs)
    assert set(TARGETS) == set(REQUIRED)


@pytest.mark.parametrize("spelling", ["sm_90", "sm_90a", "SM90", "sm90", " Sm_90A "])
def test_sm90_spellings_resolve_to_h100(spelling: str) -> None:
    assert get_target(spelling).name == "h100"


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("sm_70", "v100"), ("sm_75", "t4"), ("sm_80", "a100"), ("sm_86", "a10"), ("sm_89", "l40s"), ("sm_100a", "b200")],
)
def test_sm_forms_pick_the_documented_default(spelling: str, name: str) -> None:
    assert get_target(spelling).name == name


@pytest.mark.parametrize("bad", ["h300", "sm_80a", "sm_120", ""])
def test_unknown_names_raise_with_allowed_list(bad: str) -> None:
    with pytest.raises(TargetError) as info:
        get_target(bad)
    text = str(info.value)
    assert repr(bad) in text
    for name in REQUIRED:
        assert name in text
    assert "sm_90" in text


def test_sm_and_ptx_arch() -> None:
    assert get_target("h100").sm == "sm_90"
    assert get_target("h100").ptx_arch == "sm_90a"
    assert get_target("b200").ptx_arch == "sm_100a"
    assert get_target("a100").ptx_arch == "sm_80"


def test_turing_has_fp16_but_no_bf16_tensor_cores() -> None:
    t4 = get_target("t4")
    assert t4.tensor_core_dtype("fp16") == "fp16"
    assert t4.tensor_core_dtype("bf16") is None
    assert "bf16" not in t4.peak_tflops and "tf32" not in t4.peak_tflops


def test_feature_flags() -> None:
    h100, a100, b200 = get_target("h100"), get_target("a100"), get_target("b200")
    assert h100.has_wgmma and h100.has_tma and h100.has_cp_async
    assert not a100.has_wgmma and not a100.has_tma and a100.has_cp_async
    assert b200.has_tcgen05 and b200.has_tma and not b200.has_wgmma
    assert not get_target("t4").has_cp_async


def test_tf32_only_when_allowed_and_available() -> None:
    a100 = get_target("a100")
    assert a100.tensor_core_dtype("fp32", allow_tf32=True) == "tf32"
    assert a100.tensor_core_dtype("fp32") is None
    assert get_target("t4").tensor_core_dtype("fp32", allow_tf32=True) is None


@pytest.mark.parametrize("name", ["l40s", "h100", "b200"])
def test_fp8_supported(name: str) -> None:
    t = get_target(name)
    assert t.tensor_core_dtype("fp8e4m3") == "fp8e4m3"
    assert t.tensor_core_dtype("fp8e5m2") == "fp8e5m2"
    assert "fp8" in t.peak_tflops


def test_fp8_not_on_a100() -> None:
    assert get_target("a100").tensor_core_dtype("fp8e4m3") is None
    assert "fp8" not in get_target("a100").peak_tflops


def test_unknown_dtype_raises() -> None:
    with pytest.raises(TargetError, match="float16"):
        get_target("a100").tensor_core_dtype("float16")


@pytest.mark.parametrize(
    ("name", "optin"),
    [("v100", 98304), ("t4", 65536), ("rtx8000", 65536), ("a100", 166912), ("a10", 101376), ("l4", 101376),
     ("l40s", 101376), ("rtx4090", 101376), ("h100", 232448), ("h200", 232448), ("b200", 232448)],
)
def test_smem_opt_in(name: str, optin: int) -> None:
    t = get_target(name)
    assert t.smem_per_block_optin == optin
    assert t.smem_per_block_default == 48 * 1024
    # From sm_80 on, the driver keeps 1 KiB of each SM's shared memory per block.
    assert t.smem_per_block_optin == t.smem_per_sm - (1024 if t.cc >= (8, 0) else 0)


def test_mma_granules() -> None:
    assert get_target("v100").mma_m_granule() == 8
    assert get_target("h100").mma_m_granule() == 16
    assert all(t.mma_n_granule() == 8 for t in TARGETS.values())
    assert get_target("v100").mma_k_granule("fp16") == 4
    assert get_target("t4").mma_k_granule("fp16") == 8
    assert get_target("a100").mma_k_granule("bf16") == 16
    assert get_target("a100").mma_k_granule("fp32") == 8
    assert get_target("h100").mma_k_granule("fp8e4m3") == 32
    with pytest.raises(TargetError):
        get_target("a100").mma_k_granule("fp8e4m3")


def test_instruction_names() -> None:
    names = {i.name for i in get_target("a100").mma}
    assert {"mma.sync.m16n8k16", "mma.sync.m16n8k8", "mma.sync.m16n8k32"} <= names
    assert {i.name for i in get_target("v100").mma} == {"mma.sync.m8n8k4"}
    assert any(i.name == "wgmma.mma_async.m64n256k16" for i in get_target("h100").mma)


def test_peaks_quoted_with_fp32_accumulate_on_geforce() -> None:
    assert get_target("rtx4090").peak_tflops["fp16"] == 165.2
    assert get_target("h200").peak_tflops == get_target("h100").peak_tflops


def test_table_renders_every_target() -> None:
    console = Console(record=True, width=200)
    console.print(format_targets_table())
    text = console.export_text()
    for name in REQUIRED:
        assert name in text
    assert "wgmma" in text and "tcgen05" in text


def test_dicts_are_json_ready() -> None:
    rows = json.loads(json.dumps(targets_as_dicts()))
    assert [r["name"] for r in rows] == list(TARGETS)
    h100 = rows[[r["name"] for r in rows].index("h100")]
    assert h100["sm"] == "sm_90" and h100["has_wgmma"] and h100["cc"] == [9, 0]


@pytest.mark.parametrize(
    ("cc", "device", "name"),
    [((9, 0), "NVIDIA H200", "h200"), ((9, 0), "NVIDIA H100 80GB HBM3", "h100"), ((9, 0), "NVIDIA H800", "h100"),
     ((8, 0), "NVIDIA A100-SXM4-80GB", "a100"), ((8, 6), "NVIDIA A10G", "a10"), ((8, 9), "NVIDIA L4", "l4"),
     ((8, 9), "NVIDIA GeForce RTX 4090", "rtx4090"), ((8, 9), "NVIDIA L40S", "l40s"),
     ((7, 5), "Quadro RTX 8000", "rtx8000"), ((7, 5), "Tesla T4", "t4"), ((8, 7), "Orin", "a10")],
)
@pytest.mark.filterwarnings("ignore:GPU .* is not in attnforge's target table")
def test_device_matching(cc: tuple[int, int], device: str, name: str) -> None:
    assert target_for_device(cc, device).name == name


def test_unlisted_device_of_a_known_arch_warns_with_the_nearest_entry() -> None:
    with pytest.warns(UserWarning, match="nearest entry of its architecture, h100"):
        assert target_for_device((9, 0), "NVIDIA H800").name == "h100"
    with pytest.warns(UserWarning, match="a10"):
        assert target_for_device((8, 7), "Orin").name == "a10"


def test_device_with_unlisted_arch_raises() -> None:
    with pytest.raises(TargetError, match="RTX 5090"):
        target_for_device((12, 0), "NVIDIA GeForce RTX 5090")


def test_auto_without_gpu_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TargetError) as info:
        get_target("auto")
    text = str(info.value)
    assert "no local GPU" in text and "--target" in text and "h100" in text


def test_auto_without_torch_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(TargetError, match="no local GPU"):
        get_target("auto")
