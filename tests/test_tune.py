"""attnforge tune on the CPU (interpreter, a tiny budget): a verified choice lands in the database,
and generate / the cache then offer it first."""

from __future__ import annotations

import json

import pytest

from attnforge.cache import entry_key
from attnforge.cli import main
from attnforge.generate import generate
from attnforge.spec import AttentionSpec
from attnforge.targets import get_target
from attnforge.tune import database
from attnforge.tune.search import neighbours, tune

SPEC = AttentionSpec(heads=2, kv_heads=1, head_dim=16, dtype="fp16", causal=True)


@pytest.fixture(autouse=True)
def _db(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNFORGE_TUNING", str(tmp_path / "tuning.json"))
    return tmp_path / "tuning.json"


def test_tune_records_a_verified_choice_that_generate_then_uses(_db, tmp_path):
    target = get_target("a100")
    key_before = entry_key(SPEC, target)
    outcome = tune(SPEC, target, max_candidates=2, budget_s=120)
    assert outcome.entry is not None and outcome.entry.device == "cpu (interpreter)"
    assert len(outcome.trials) == 2 and all(t.ms is not None or t.rejected for t in outcome.trials)
    stored = json.loads(_db.read_text())["entries"]
    assert len(stored) == 1 and stored[0]["params"] == outcome.entry.params
    assert database.lookup(SPEC, "a100", "triton") is not None
    assert database.lookup(SPEC, "h100", "triton") is None  # another GPU's entry
    assert database.lookup(AttentionSpec(**{**SPEC.to_dict(), "seqlen_q": 8192, "seqlen_k": 8192}), "a100", "triton") is None  # another length bucket
    assert entry_key(SPEC, target) != key_before  # a tuned kernel is another cache entry
    result = generate(SPEC, target, tmp_path / "out", run_verification=False)
    assert result.plan.params == outcome.entry.params
    assert result.plan.reasons[0].startswith("tuned:")


def test_a_damaged_database_is_ignored(_db, tmp_path):
    _db.write_text("{not json")
    assert database.lookup(SPEC, "a100", "triton") is None
    result = generate(SPEC, get_target("a100"), tmp_path / "out", run_verification=False)
    assert result.ok and not result.plan.reasons[0].startswith("tuned:")


def test_neighbours_start_with_the_planner_choice_nearest_first():
    first = {"BM": 128, "BN": 64, "warps": 8, "stages": 3, "tma": 1}
    order = neighbours(first, get_target("h200"), "prefill")
    assert order[0] == first
    changes = [sum(p.get(k) != first.get(k) for k in set(p) | set(first)) for p in order]
    assert changes == sorted(changes) and changes[1] == 1
    assert all(p.get("tma", 1) == 1 and p.get("persistent", 1) == 1 for p in order)  # off: left out, as TL wants
    assert any("tma" not in p for p in order) and any("persistent" in p for p in order)


def test_tune_command_refuses_bad_budgets(capsys):
    assert main(["tune", "--heads", "2", "--head-dim", "16", "--budget", "0"]) == 2
    assert "--budget" in capsys.readouterr().err
