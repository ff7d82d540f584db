"""The providers that need no network: file: (a person answers through files) and replay:
(answers from a saved transcript), and transcripts themselves."""

from __future__ import annotations

import json
import threading
import time

import pytest

from attnforge.llm import Budget, BudgetExceeded, LLMError, Message, Replay, Tracked, Transcript, open_client, read_transcript
from attnforge.llm.file_client import FileClient
from llm_servers import clean_env  # noqa: F401 (fixture)

ASK = [Message("system", "You write TL."), Message("user", "Write a kernel for t4.")]


@pytest.fixture(autouse=True)
def _env(clean_env):
    return clean_env


def answer_later(directory, number, text, delay=0.2, chunks=1):
    """A person (a thread) who writes the answer file once the prompt file appears."""
    def run():
        prompt = directory / f"{number:03d}-prompt.md"
        deadline = time.monotonic() + 10
        while not prompt.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        answer = directory / f"{number:03d}-answer.md"
        step = max(1, len(text) // chunks)
        for i in range(0, len(text), step):  # written in pieces, as an editor saving twice would
            with answer.open("a") as f:
                f.write(text[i:i + step])
            time.sleep(0.05)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_file_provider_round_trip(tmp_path):
    events = []
    client = open_client(f"file:{tmp_path}", timeout_s=10, on_event=events.append)
    assert isinstance(client, FileClient)
    client.settle_s = 0.3
    thread = answer_later(tmp_path, 1, "```tl\nkernel k\n```\n", chunks=3)
    c = client.complete(ASK, max_tokens=4000)
    thread.join()
    assert c.text == "```tl\nkernel k\n```\n" and c.estimated and c.model == f"file:{tmp_path}"
    prompt = (tmp_path / "001-prompt.md").read_text()
    assert "## system\n\nYou write TL." in prompt and "## user\n\nWrite a kernel for t4." in prompt
    assert "001-answer.md" in prompt
    assert len(events) == 1 and str(tmp_path / "001-prompt.md") in events[0] and str(tmp_path / "001-answer.md") in events[0]
    # The next prompt takes the next number, even in a new client (a resumed session).
    again = FileClient(tmp_path, timeout_s=10, settle_s=0.1, on_event=events.append)
    thread = answer_later(tmp_path, 2, "second")
    assert again.complete([Message("user", "more")], max_tokens=10).text == "second"
    thread.join()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["001-answer.md", "001-prompt.md", "002-answer.md", "002-prompt.md"]


def test_file_provider_times_out_naming_the_file(tmp_path):
    client = FileClient(tmp_path / "q", timeout_s=0.5, settle_s=0.1, on_event=lambda _: None)
    start = time.monotonic()
    with pytest.raises(LLMError, match="no answer in .*001-answer.md after 0.5 s") as info:
        client.complete(ASK, max_tokens=10)
    assert time.monotonic() - start < 3
    assert str(tmp_path / "q" / "001-answer.md") in str(info.value.where) and "001-answer.md" in info.value.hint


def test_file_provider_prints_to_stderr_by_default(tmp_path, capsys):
    client = FileClient(tmp_path, timeout_s=0.3, settle_s=0.1)
    with pytest.raises(LLMError):
        client.complete(ASK, max_tokens=10)
    err = capsys.readouterr().err
    assert "write the model's answer to" in err and "001-answer.md" in err


def test_transcript_and_replay_round_trip(tmp_path):
    client = FileClient(tmp_path / "files", timeout_s=10, settle_s=0.1, on_event=lambda _: None)
    budget = Budget(max_rounds=5)
    tracked = Tracked(client, budget=budget, transcript=Transcript(tmp_path / "run"))
    answers = ["```tl\nkernel one\n```", "```tl\nkernel two\n```"]
    asked = [ASK, ASK + [Message("assistant", answers[0]), Message("user", "TL200 at line 3; fix it")]]
    originals = []
    for n, (messages, text) in enumerate(zip(asked, answers), 1):
        thread = answer_later(tmp_path / "files", n, text, delay=0.05)
        originals.append(tracked.complete(messages, max_tokens=500))
        thread.join()
    records = read_transcript(tmp_path / "run")
    assert [r["n"] for r in records] == [1, 2]
    assert records[1]["messages"][2] == {"role": "assistant", "content": answers[0]}
    assert records[0]["client"] == f"file:{tmp_path / 'files'}" and records[0]["max_tokens"] == 500
    assert records[0]["completion"]["seconds"] > 0 and records[0]["completion"]["input_tokens"] > 0

    replay = open_client(f"replay:{tmp_path / 'run' / 'transcript.jsonl'}")
    assert isinstance(replay, Replay) and replay.remaining == 2
    replayed = [replay.complete(m, max_tokens=500) for m in asked]
    assert replayed == originals  # text, tokens, seconds, model: as recorded
    with pytest.raises(LLMError, match="request 3 has none"):
        replay.complete(ASK, max_tokens=10)


def test_replay_checks_prompts_when_asked(tmp_path):
    transcript = Transcript(tmp_path)
    from attnforge.llm.messages import Completion
    transcript.record("openai:m", ASK, 100, Completion("ok", 1, 1, 0.1, "m"))
    strict = Replay(tmp_path, check_prompts=True)
    changed = [ASK[0], Message("user", "Write a kernel for h100.")]
    with pytest.raises(LLMError, match="message 2 differs from the recording at its line 1"):
        strict.complete(changed, max_tokens=10)
    assert Replay(tmp_path).complete(changed, max_tokens=10).text == "ok"


def test_recorded_failures_replay_as_failures(tmp_path):
    transcript = Transcript(tmp_path)
    transcript.record_error("openai:m", ASK, 100, LLMError("no answer within 5 s", where="openai:m"))
    with pytest.raises(LLMError, match="recorded failure: openai:m: no answer within 5 s"):
        Replay(tmp_path).complete(ASK, max_tokens=10)


def test_damaged_transcript_is_refused(tmp_path):
    (tmp_path / "transcript.jsonl").write_text('{"v": 1, "n": 1, "messages": [], "completion": {}}\nnot json\n')
    with pytest.raises(LLMError, match="not a JSON line") as info:
        Replay(tmp_path)
    assert info.value.where.endswith("transcript.jsonl:2")
    with pytest.raises(LLMError, match="no transcript here"):
        Replay(tmp_path / "missing")


def test_replay_under_a_budget(tmp_path):
    from attnforge.llm.messages import Completion
    transcript = Transcript(tmp_path)
    for n in range(3):
        transcript.record("openai:m", ASK, 100, Completion(f"a{n}", 60, 40, 0.1, "m"))
    tracked = Tracked(Replay(tmp_path), budget=Budget(max_total_tokens=250))
    tracked.complete(ASK, max_tokens=100)
    tracked.complete(ASK, max_tokens=100)
    with pytest.raises(BudgetExceeded):
        tracked.complete(ASK, max_tokens=100)


def test_transcript_lines_are_json_with_no_key(tmp_path):
    from attnforge.llm import redact
    from attnforge.llm.messages import Completion
    redact.remember("sk-proj-abcdefghijklmnop")
    transcript = Transcript(tmp_path)
    transcript.record("openai:m", [Message("user", "my key is sk-proj-abcdefghijklmnop")], 10,
                      Completion("echo sk-proj-abcdefghijklmnop", 1, 1, 0.1, "m"))
    text = (tmp_path / "transcript.jsonl").read_text()
    assert "abcdefghijklmnop" not in text
    assert json.loads(text)["completion"]["text"] == "echo [redacted]"
