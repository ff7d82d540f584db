"""The Backend seam: the registry, choosing a backend, rules, and the CLI and API that expose them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnforge
from attnforge import AttentionSpec, get_target
from attnforge.backends import backend_for_directory, choose_backend, get_backend, names
from attnforge.backends.base import Backend
from attnforge.cli import main
from attnforge.errors import AttnforgeError, LaunchError
from attnforge.generate import generate
from attnforge.plan.builtin import candidates

SRC = Path(attnforge.__file__).parent


def test_registry_lists_triton_and_auto_picks_it():
    assert names() == ("triton", "cuda", "gluon")
    spec = AttentionSpec(heads=4, head_dim=64, dtype="bf16")
    backend = choose_backend("auto", spec, get_target("h100"))
    assert isinstance(backend, Backend) and backend.name == "triton" and backend is get_backend("triton")


def test_unknown_backend_is_refused_with_the_list():
    with pytest.raises(AttnforgeError, match="unknown backend 'metal'") as info:
        get_backend("metal")
    assert "triton" in info.value.hint


def test_a_spec_no_backend_builds_is_refused_with_each_reason():
    spec = AttentionSpec(heads=4, head_dim=64, dtype="fp8e4m3")
    with pytest.raises(AttnforgeError, match=r"no backend builds .* triton: dtype fp8e4m3"):
        choose_backend("auto", spec, get_target("h100"))


def test_rules_reach_the_planner_and_the_backend():
    triton = get_backend("triton")
    assert set(triton.refused_strategies(get_target("h100"))) == {"ws"}
    assert set(triton.refused_strategies(get_target("a100"))) == {"tma"}  # no TMA before sm_90; ws compiles on sm_80
    spec = AttentionSpec(heads=4, head_dim=64, dtype="bf16")
    assert candidates(spec, get_target("h100"))[1][0].params.get("tma") == 1
    assert "tma" not in candidates(spec, get_target("h100"), refused={"tma"})[1][0].params


def test_only_the_triton_backend_imports_triton():
    # (Gluon ships inside Triton: its backend imports triton.experimental.gluon)
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if "import triton" in p.read_text() and p.parent.name not in ("triton", "gluon")]
    assert offenders == []


def test_importing_the_registry_does_not_import_triton():
    code = "import sys, attnforge.backends, attnforge.cli; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_backends_command_lists_what_triton_supports(capsys):
    assert main(["backends", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["triton", "cuda", "gluon"]
    assert rows[0]["source_file"] == "kernel_triton.py" and rows[0]["dtypes"] == ["fp16", "bf16", "fp32"]
    assert main(["backends"]) == 0
    assert "triton" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["triton", "auto"])
def test_generate_with_a_backend_writes_its_source_and_names_it(tmp_path, capsys, backend):
    code = main(["generate", "--target", "h100", "--heads", "2", "--head-dim", "32", "--dtype", "fp16",
                 "--backend", backend, "--no-verify", "--out", str(tmp_path)])
    assert code == 3  # generated, not verified
    assert "with the triton backend" in capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["backend"] == "triton" and report["files"]["source"] == "kernel_triton.py"
    assert (tmp_path / "kernel_triton.py").is_file()
    assert backend_for_directory(tmp_path).name == "triton"


def test_generate_with_an_unknown_backend_is_bad_input(tmp_path, capsys):
    code = main(["generate", "--target", "h100", "--heads", "2", "--head-dim", "32", "--backend", "metal", "--out", str(tmp_path)])
    assert code == 2
    assert "unknown backend 'metal'" in capsys.readouterr().err


def test_attention_takes_a_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path))
    q = torch.randn(1, 2, 20, 32, dtype=torch.float16)
    with pytest.raises(AttnforgeError, match="unknown backend"):
        attnforge.attention(q, q, q, backend="metal")


def test_loaded_kernel_refuses_bad_calls_with_launch_errors(tmp_path):
    spec = AttentionSpec(heads=2, head_dim=32, dtype="fp16")
    assert generate(spec, get_target("a100"), tmp_path, run_verification=False).ok
    kernel = attnforge.load(tmp_path)
    q = torch.randn(1, 2, 20, 32, dtype=torch.float16)
    with pytest.raises(LaunchError, match="takes no softcap"):
        kernel(q, q, q, softcap=3.0)
    with pytest.raises(LaunchError, match="head dims"):
        kernel(q, q, torch.randn(1, 2, 20, 64, dtype=torch.float16))
    assert issubclass(LaunchError, AttnforgeError) and issubclass(LaunchError, ValueError)


def test_load_names_what_a_directory_lacks(tmp_path):
    with pytest.raises(AttnforgeError, match="no generated kernel"):
        attnforge.load(tmp_path)
