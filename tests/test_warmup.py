"""attnforge warmup: builds the cache entries attention() then loads, and refuses bad lists whole."""

from __future__ import annotations

import json

import torch

import attnforge
from attnforge import api
from attnforge.cli import main

SPEC = {"heads": 2, "kv_heads": 1, "head_dim": 16, "dtype": "fp16", "causal": True, "seqlen_q": 20, "seqlen_k": 23}


def test_warmup_builds_what_attention_then_finds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path / "cache"))
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps({"specs": [SPEC, {**SPEC, "seqlen_q": 30, "seqlen_k": 31}]}))
    assert main(["warmup", str(specs), "--target", "h200"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 built" in out
    entries = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1  # one prefill kernel serves both lengths (Sq > 16: not the packed small-Sq kernels)

    def no_build(*args, **kwargs):
        raise AssertionError("attention() rebuilt a kernel that warmup built")

    # attention() on the CPU runs the default target's kernel: warm that one, then call without building
    assert main(["warmup", str(specs), "--target", "h100"]) == 0
    monkeypatch.setattr("attnforge.cache.generate", no_build)
    api._dispatch.clear()
    api._loaded.clear()
    q, k, v = torch.randn(1, 2, 20, 16).half(), torch.randn(1, 1, 23, 16).half(), torch.randn(1, 1, 23, 16).half()
    assert attnforge.attention(q, k, v, causal=True).shape == (1, 2, 20, 16)


def test_a_bad_spec_in_the_list_is_refused_before_any_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path / "cache"))
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps([SPEC, {**SPEC, "head_dim": 7}]))
    assert main(["warmup", str(specs), "--target", "h200"]) == 2
    err = capsys.readouterr().err
    assert "specs[1].head_dim" in err and "Traceback" not in err
    assert not (tmp_path / "cache").exists()


def test_warmup_builds_every_length_bucket_the_tuning_database_tells_apart(tmp_path, monkeypatch):
    # The shipped database tunes this H200 spec for lengths <= 1024 only, and the cache key holds the
    # tuned parameters: warming it at length 1024 alone left a 2048-token call to build in production.
    from attnforge.cache import entry_key
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target
    from attnforge.warmup import warm

    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNFORGE_TUNING", str(tmp_path / "no-user-tuning.json"))
    built: list[str] = []

    def record(spec, target, *, backend, verify, tma):
        built.append(entry_key(spec, target, backend=backend, tma=tma))
        return tmp_path / "kernel_triton.py"

    monkeypatch.setattr("attnforge.cache.build_or_load", record)
    target = get_target("h200")
    spec = AttentionSpec(heads=32, kv_heads=32, seqlen_q=1024, seqlen_k=1024, head_dim=128, dtype="bf16", causal=True)
    results = warm([spec], target)
    assert len(results) == 1 and results[0].error is None
    for length in (512, 1024, 2048, 8192, 20000):
        at = AttentionSpec(**{**spec.to_dict(), "seqlen_q": length, "seqlen_k": length})
        assert entry_key(at, target) in built, length
    assert len(built) == len(set(built))  # each entry once
