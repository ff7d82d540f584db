"""attnforge tune on the CPU (interpreter, a tiny budget): a verified choice lands in the database,
and generate / the cache then offer it first."""

from __future__ import annotations

import json

import pytest
import torch

from attnforge.cache import entry_key
from attnforge.cli import main
from attnforge.errors import AttnforgeError
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


def test_decode_neighbours_keep_the_planner_rows_and_leave_the_split_count_to_the_launch():
    from attnforge.plan.builtin import candidates

    decode = AttentionSpec(batch=8, heads=32, kv_heads=8, seqlen_q=1, seqlen_k=8192, head_dim=128, dtype="bf16")
    first = candidates(decode, get_target("h200"))[1][0].params
    order = neighbours(first, get_target("h200"), "decode")
    assert order[0] == first and first["BM"] == 16
    assert {p["BM"] for p in order} == {16} and not any("NSPLIT" in p for p in order)  # the launcher picks it per call


def test_a_packed_gqa_spec_is_tuned_as_the_packed_kernel_it_builds(_db, tmp_path):
    # Sq 2..16 with a group packs GQA (a split-KV "decode" program); timing it at a prefill Sq tuned
    # a prefill kernel and recorded it under the packed key, and generate then crashed (KeyError 'NSPLIT')
    from attnforge.plan.builtin import packs_gqa
    from attnforge.tune.search import timing_shape

    spec = AttentionSpec(heads=2, kv_heads=1, seqlen_q=4, seqlen_k=64, head_dim=16, dtype="fp16")
    assert packs_gqa(spec)
    for native in (False, True):
        B, Hq, Hkv, Sq, Sk = timing_shape(spec, "<=1024", native)
        assert Sq == 4 and packs_gqa(AttentionSpec(batch=B, heads=Hq, kv_heads=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=16))
    target = get_target("a100")
    outcome = tune(spec, target, max_candidates=1, budget_s=120)
    assert outcome.entry is not None and outcome.entry.kind == "decode"
    result = generate(spec, target, tmp_path / "out", run_verification=False)
    assert result.ok and result.plan.params == outcome.entry.params


def test_tuned_parameters_of_another_kind_of_program_are_not_offered():
    from attnforge.generate import Candidate
    from attnforge.plan.builtin import candidates, plans

    target = get_target("a100")
    decode = AttentionSpec(heads=2, kv_heads=1, seqlen_q=4, seqlen_k=64, head_dim=16, dtype="fp16")
    prefill_params = candidates(SPEC, target)[1][0].params
    first = next(plans(decode, target, prefer=Candidate(dict(prefill_params), "tuned: a stale entry", "prefill")))
    assert first.kind == "decode" and first.params == candidates(decode, target)[1][0].params
    # an entry from before the split count moved to the launch still fixes NSPLIT: not offered either
    old = Candidate({**candidates(decode, target)[1][0].params, "NSPLIT": 8}, "tuned: a stale decode entry", "decode")
    assert next(plans(decode, target, prefer=old)).params == candidates(decode, target)[1][0].params


def test_tune_without_a_gpu_records_only_into_a_named_database(_db, tmp_path, capsys):
    args = ["tune", "--heads", "2", "--kv-heads", "1", "--head-dim", "16", "--dtype", "fp16", "--target", "a100", "--max-candidates", "1"]
    assert main(args) == 0
    assert "not recorded" in capsys.readouterr().out and not _db.exists()
    named = tmp_path / "mine.json"
    assert main(args + ["--db", str(named)]) == 0
    assert len(json.loads(named.read_text())["entries"]) == 1


def test_an_entry_says_which_kind_of_program_it_was_measured_on():
    fields = dict(target="h200", backend="triton", spec="{}", seq="<=1024", ms=1.0, planner_ms=None, device="cpu", shape="", measured="")
    assert database.kind_of(database.Entry(params={"BM": 16, "BN": 64}, kind="decode", **fields)) == "decode"
    # entries written before the kind was recorded: decode parameters carried NSPLIT then
    assert database.kind_of(database.Entry(params={"BM": 16, "BN": 64, "NSPLIT": 8}, **fields)) == "decode"
    assert database.kind_of(database.Entry(params={"BM": 128, "BN": 64}, **fields)) == "prefill"


def test_a_head_to_head_records_times_taken_in_turns_and_auto_follows_them(_db, monkeypatch):
    """Each backend's search, then the winners timed in alternating order on the same inputs; the
    entries carry those times, and --backend auto builds with the faster (the searches' own times,
    which said the opposite here, are not what is compared)."""
    from attnforge.backends import choose_backend_and_reason
    from attnforge.tune import search

    target = get_target("h100")
    searched = {"triton": 1.0, "cuda": 2.0}  # what each search measured: triton looks faster
    side_by_side = {"triton": [3.0, 3.1, 2.9], "cuda": [2.0, 2.2, 2.1]}  # in turns: cuda is
    order = []

    def fake_tune(spec, target, *, backend, record, **_search):
        assert not record  # only the head-to-head times are recorded
        entry = database.Entry(target=target.name, backend=backend, spec=database.spec_key(spec), seq=database.seq_bucket(spec),
                               params={"BM": 64}, ms=searched[backend], planner_ms=searched[backend], device="NVIDIA H100",
                               shape="B=1 Hq=1/Hkv=1 Sq=32 Sk=48", measured="today", tried=1, kind="prefill")
        return search.Outcome(entry, [], kernel=backend)

    def fake_time(kernel, inputs, spec, native):
        order.append(kernel)
        return side_by_side[kernel][sum(k == kernel for k in order) - 1]

    monkeypatch.setattr(search, "tune", fake_tune)
    monkeypatch.setattr(search, "_time", fake_time)
    outcomes = search.tune_head_to_head(SPEC, target, ["triton", "cuda"], rounds=3, db=_db)
    assert order == ["triton", "cuda", "cuda", "triton", "triton", "cuda"]
    assert {n: o.entry.ms for n, o in outcomes.items()} == {"triton": 3.0, "cuda": 2.1}
    assert "head to head with cuda 2.100 ms (3 rounds in turns)" in outcomes["triton"].entry.measured
    assert len(database.read(_db)) == 2
    backend, why = choose_backend_and_reason("auto", SPEC, target)
    assert backend.name == "cuda" and "cuda 2.100 ms, triton 3.000 ms" in why and "timed head to head" in why
    for names in (["triton", "triton"], ["auto", "triton"]):
        with pytest.raises(AttnforgeError, match="two or more different backends by name"):
            search.tune_head_to_head(SPEC, target, names)


def test_a_backend_that_cannot_be_tuned_here_leaves_the_others_searched(_db, monkeypatch):
    from attnforge.tune import search

    def fake_tune(spec, target, *, backend, record, **_search):
        if backend == "cuda":
            raise AttnforgeError("tuning the cuda backend needs its GPU", where="--backend")
        entry = database.Entry(target=target.name, backend=backend, spec=database.spec_key(spec), seq=database.seq_bucket(spec),
                               params={"BM": 64}, ms=1.0, planner_ms=1.0, device="NVIDIA H100", shape="s", measured="today")
        return search.Outcome(entry, [], kernel=backend)

    monkeypatch.setattr(search, "tune", fake_tune)
    said = []
    outcomes = search.tune_head_to_head(SPEC, get_target("h100"), ["triton", "cuda"], db=_db, progress=said.append)
    assert outcomes["cuda"].entry is None and outcomes["triton"].entry.ms == 1.0  # its search time: nothing to time it beside
    assert any("cuda: not searched: tuning the cuda backend needs its GPU" in line for line in said)
    assert [e.backend for e in database.read(_db)] == ["triton"]


def test_native_times_are_taken_on_the_call_path_users_run(monkeypatch):
    """The tuner times a kernel as attnforge.attention runs it: the first launch with every check (recording
    its launches into the key's slots, for a kernel that records them), the later ones on the kernel's fast
    path bound to those slots (checks skipped). Timed through the checking launch, a short Gluon kernel
    measured its host time (0.29 against 0.19 ms on the H200, bench/RESULTS.md run 8) and auto chose the
    slower backend."""
    from attnforge.backends.triton import timing
    from attnforge.tune import search

    calls: list[tuple] = []

    class Recording:  # a Triton or Gluon kernel: its first launch records into the key's slots
        def launch(self, q, k, v, o, lse, **scalars):
            calls.append(("unkeyed",))

        def launch_keyed(self, q, k, v, o, lse, *, slots, **scalars):
            slots.append("compiled kernel")
            calls.append(("checked", "alibi_slopes" in scalars))

        def checked_launch(self, slots, **scalars):
            assert slots == ["compiled kernel"] and "alibi_slopes" in scalars  # the first launch's slots, the slopes bound
            return lambda q, k, v, o, lse: calls.append(("fast",))

    class Planning(Recording):  # the CUDA backend's: no recorded launches, its own key launch
        launch_keyed = None

        def launch(self, q, k, v, o, lse, **scalars):
            calls.append(("checked", "alibi_slopes" in scalars))

        def checked_launch(self, slots, **scalars):
            assert "alibi_slopes" in scalars
            return lambda q, k, v, o, lse: calls.append(("fast",))

    def median_ms(fn, **_):
        for _ in range(4):
            fn()
        return 1.0

    monkeypatch.setattr(timing, "median_ms", median_ms)
    spec = AttentionSpec(heads=2, kv_heads=2, head_dim=16, seqlen_q=8, seqlen_k=8, alibi_slopes="auto")
    q = torch.zeros(1, 2, 8, 16)
    for kernel in (Recording(), Planning()):
        calls.clear()
        assert search._time(kernel, (q, q, q), spec, native=True) == 1.0
        assert calls == [("checked", True), ("fast",), ("fast",), ("fast",)]


def test_a_lookup_parses_a_database_file_once_and_again_once_it_is_rewritten(_db, monkeypatch):
    """A lookup indexes each file by its signature (mtime, size, inode): calls in a hot path (auto's choice and the cache
    key of every torch.compile'd call) do not parse ~1 MB of JSON each time; record's rewrite is seen at once."""
    parsed = []
    real_read = database.read
    monkeypatch.setattr(database, "read", lambda path: parsed.append(path) or real_read(path))
    entry = database.Entry(target="a100", backend="triton", spec=database.spec_key(SPEC), seq=database.seq_bucket(SPEC),
                           params=dict(BM=32, BN=32, warps=4, stages=2), ms=1.0, planner_ms=None, device="test", shape="-", measured="-",
                           kind="prefill")
    database.record(entry)
    parsed.clear()  # (record reads the file it rewrites)
    for _ in range(3):
        found = database.lookup(SPEC, "a100", "triton", paths=(_db,))
    assert found.params == entry.params and parsed.count(_db) == 1
    found.params["BM"] = 64  # a copy: the index is not changed through it
    assert database.lookup(SPEC, "a100", "triton", paths=(_db,)).params["BM"] == 32
    database.record(database.Entry(**{**entry.__dict__, "params": dict(BM=16, BN=32, warps=4, stages=2)}))
    parsed.clear()
    assert database.lookup(SPEC, "a100", "triton", paths=(_db,)).params["BM"] == 16 and parsed.count(_db) == 1


def test_kernel_for_chooses_and_keys_a_spec_once_per_process(monkeypatch):
    """torch.compile's graphs call kernel_for at every call: auto's choice and the entry key (which read the tuning
    database and plan the first choice) are worked out at the first call only."""
    from attnforge import api

    calls = []

    class Chosen:
        name = "fake"

        def load(self, path, interpret):
            return ("kernel", path)

    monkeypatch.setattr(api, "_resolved", {})
    monkeypatch.setattr(api, "_loaded", {})
    monkeypatch.setattr(api, "choose_backend", lambda name, spec, target: calls.append("choose") or Chosen())
    monkeypatch.setattr(api, "entry_key", lambda spec, target, **kw: calls.append("key") or "k")
    monkeypatch.setattr(api, "build_or_load", lambda spec, target, **kw: "path")
    first = api.kernel_for(SPEC, torch.device("cpu"))
    assert api.kernel_for(SPEC, torch.device("cpu")) is first and calls == ["choose", "key"]
    api.kernel_for(AttentionSpec(heads=2, kv_heads=1, head_dim=16, dtype="fp16"), torch.device("cpu"))
    assert calls == ["choose", "key"] * 2
