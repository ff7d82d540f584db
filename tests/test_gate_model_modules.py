"""`attnforge verify DIR` on a directory whose kernel module a model wrote (issue 10): the module
is never imported in attnforge's process; it goes through the LLM path's static gate and is
verified in the sandbox's child process, with the kernels-off check, as when it was generated."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from attnforge.cli import main
from attnforge.gate import model_writer, verify_directory
from attnforge.spec import AttentionSpec

sys.path.insert(0, str(Path(__file__).parent))
from llm_scripts import HOST_ATTENTION  # noqa: E402  (a module that passes the static gate but computes on the host)

SPEC = AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="fp16", seqlen_q=64)
DIRECT = {"client": "openai:scripted", "options": {"mode": "direct", "translate": "builtin"}, "rounds": [{"stage": "direct"}]}


def _directory(tmp_path: Path, module: str, llm: dict | None) -> Path:
    out = tmp_path / "k"
    out.mkdir()
    (out / "kernel_triton.py").write_text(module)
    report = {"spec": SPEC.to_dict(), "target": {"name": "h100"}}
    if llm is not None:
        report["llm"] = llm
    (out / "report.json").write_text(json.dumps(report))
    return out


@pytest.mark.parametrize("llm, writer", [
    (None, None),
    (DIRECT, "openai:scripted"),
    ({"client": "anthropic:m", "options": {"mode": "both", "translate": "llm"}, "rounds": [{"stage": "tl"}, {"stage": "translate"}]}, "anthropic:m"),
    ({"client": "anthropic:m", "options": {"mode": "both", "translate": "builtin"}, "rounds": [{"stage": "direct"}]}, "anthropic:m"),
    ({"client": "openai:m", "options": {"mode": "tl", "translate": "builtin"}, "rounds": [{"stage": "tl"}, {"stage": "optimize"}]}, None),
], ids=["no-llm", "direct", "translate-llm", "both-direct-dir", "tl-builtin"])
def test_who_wrote_the_module_comes_from_the_report(llm, writer):
    assert model_writer({} if llm is None else {"llm": llm}) == writer


def test_a_model_module_that_computes_on_the_host_is_refused_in_the_sandbox(tmp_path, monkeypatch):
    """In-process verification compares outputs only, so a module that computes attention with
    torch (past the static gate) and launches an empty Triton kernel passes it; the sandboxed
    gate switches the kernels off and sees the answer is still there."""
    import attnforge.llm.sandbox as sandbox

    ran = []
    original = sandbox.run_untrusted
    monkeypatch.setattr(sandbox, "run_untrusted", lambda *a, **k: ran.append(a[1].__name__) or original(*a, **k))
    out = _directory(tmp_path, HOST_ATTENTION, DIRECT)
    verdict = verify_directory(out, interpret=True)
    assert ran == ["verify_module"] and verdict.model == "openai:scripted"
    assert not verdict.ok and verdict.step == "verify" and verdict.error.startswith("host-compute:"), verdict.error


def test_a_model_module_is_statically_gated_before_anything_runs(tmp_path, capsys):
    marker = tmp_path / "ran"
    module = HOST_ATTENTION.replace("import math\n", f"import math\nopen({str(marker)!r}, 'w').write('x')\n", 1)
    out = _directory(tmp_path, module, DIRECT)
    assert main(["verify", str(out)]) == 1
    said = capsys.readouterr().out
    assert "written by openai:scripted: statically gated, then verified in the sandbox" in said
    assert "FAILED at verify: " in said and "refused" in said and "open" in said, said
    assert not marker.exists()


def test_without_an_llm_section_the_module_is_attnforges_and_needs_its_tl(tmp_path):
    out = _directory(tmp_path, HOST_ATTENTION, None)
    with pytest.raises(Exception, match="has no kernel.tl"):
        verify_directory(out, interpret=True)
