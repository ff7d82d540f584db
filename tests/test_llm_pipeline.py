"""``attnforge generate --llm``: the whole loop against a scripted OpenAI-compatible server on
127.0.0.1 (pytest-httpserver), the file: provider answered by a thread, and replay. Every run
ends in a verified kernel (or one generated, where --no-verify keeps the test fast) or in a
clear one-line failure within the round cap."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from attnforge.cli import main
from llm_scripts import CAUSAL, SPEC_ARGS, fenced, module, program, with_launch_prefix
from llm_servers import SECRET, clean_env, openai_body, silent_server  # noqa: F401 (fixtures)

pytest.importorskip("openai")
pytest.importorskip("pytest_httpserver")

CHAT = "/v1/chat/completions"


@pytest.fixture(autouse=True)
def _env(clean_env):
    return clean_env


class Server:
    """The scripted server: answers in order; what it was asked is in ``prompts()``."""

    def __init__(self, httpserver):
        self.http = httpserver
        self.url = httpserver.url_for("/v1")

    def answer(self, *texts: str) -> None:
        for text in texts:
            self.http.expect_ordered_request(CHAT, method="POST").respond_with_json(
                openai_body(text, model="served-model", prompt_tokens=1000, completion_tokens=200))

    def requests(self) -> list[list[dict]]:
        return [json.loads(request.get_data())["messages"] for request, _ in self.http.log]

    def feedback(self, n: int) -> str:
        """The last user message of request ``n`` (1-based): the feedback on answer n - 1."""
        return self.requests()[n - 1][-1]["content"]


@pytest.fixture
def server(httpserver):
    return Server(httpserver)


def generate(capsys, out: Path, url: str, *extra: str) -> tuple[int, str]:
    code = main(["generate", *SPEC_ARGS, "--out", str(out), "--llm", "openai:test-model", "--llm-base-url", url,
                 "--llm-retries", "1", *extra])
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def llm_report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())["llm"]


def no_secret_in(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


# ---------------------------------------------------------------- a verified kernel, its transcript, its replay

def test_generate_verified_with_transcript_report_and_replay(server, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server.answer(fenced(program()))
    out = tmp_path / "out"
    code, printed = generate(capsys, out, server.url, "--llm-prices", "1.5,6")
    assert code == 0, printed
    assert "verified in the interpreter" in printed
    assert (out / "kernel.tl").read_text() == program()
    report = json.loads((out / "report.json").read_text())
    assert report["verified"] and report["steps"][0]["name"] == "llm-tl"
    llm = report["llm"]
    assert (llm["provider"], llm["model"], llm["models_reported"]) == ("openai", "test-model", ["served-model"])
    assert llm["ok"] and llm["failures_by_kind"] == {} and llm["totals"]["rounds"] == 1
    assert (llm["totals"]["input_tokens"], llm["totals"]["output_tokens"]) == (1000, 200)
    assert llm["cost_usd"] == pytest.approx((1000 * 1.5 + 200 * 6) / 1e6)
    assert llm["base_url"] == server.url and llm["prompt_versions"] == {"stage1_sketch": 2}
    lines = (out / "llm" / "transcript.jsonl").read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["messages"][0]["content"].startswith("<!-- attnforge prompt stage1_sketch, version 2 -->")
    assert record["completion"]["input_tokens"] == 1000 and record["completion"]["seconds"] >= 0
    assert "## LLM" in (out / "report.md").read_text()
    no_secret_in(out)
    # Offline: the server is not asked again, and the replay ends in the same kernel.
    asked = len(server.http.log)
    code = main(["replay", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "the same kernel (kernel.tl) and the same verdicts" in printed
    assert (out / "replay" / "kernel.tl").read_text() == program() and len(server.http.log) == asked
    assert json.loads((out / "replay" / "report.json").read_text())["verified"]


# ---------------------------------------------------------------- stage 1's loop and its feedback

def test_sketch_then_parameters(server, capsys, tmp_path):
    sketch = program().replace("param BM = 64, BN = 32, warps = 4, stages = 2", "param BM = ?, BN = ?, warps = ?, stages = ?")
    server.answer(fenced(sketch), fenced(program()))
    code, printed = generate(capsys, tmp_path / "out", server.url, "--no-verify")
    assert code == 3, printed
    second = server.requests()[1]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[2]["content"].startswith("<!-- attnforge prompt stage1_params, version 1 -->")
    assert "param BM = ?, BN = ?" in second[2]["content"]  # the sketch, to fill in
    rounds = llm_report(tmp_path / "out")["rounds"]
    assert [(r["prompt"], r["ok"]) for r in rounds] == [("stage1_sketch", True), ("stage1_params", True)]
    assert "open: BM, BN, stages, warps" in rounds[0]["note"]


def test_syntax_error_then_fix(server, capsys, tmp_path):
    broken = program().replace("Compute GEMM Qr, Kr^T and get S", "Compute GEMM Qr Kr^T and get S", 1)
    line = broken.splitlines().index("    Compute GEMM Qr Kr^T and get S") + 1
    server.answer(fenced(broken), fenced(program()))
    code, printed = generate(capsys, tmp_path / "out", server.url, "--no-verify")
    assert code == 3, printed
    feedback = server.feedback(2)
    assert feedback.startswith("<!-- attnforge prompt feedback, version 1 -->")
    assert f"does not parse: unexpected 'Kr' at line {line}, column 21" in feedback
    assert f"{line:4d} |     Compute GEMM Qr Kr^T and get S" in feedback and "hint: expected ','" in feedback
    assert llm_report(tmp_path / "out")["failures_by_kind"] == {"syntax": 1}
    assert (tmp_path / "out" / "kernel.tl").read_text() == program()


def test_wrong_loop_bound_is_named_by_shape_and_rows(server, capsys, tmp_path):
    wrong = program().replace("for j = Sk // BN : cdiv(Sk, BN)", "for j = Sk // BN : Sk // BN")
    assert wrong != program()
    server.answer(fenced(wrong), fenced(program()))
    code, printed = generate(capsys, tmp_path / "out", server.url, "--no-verify")
    assert code == 3, printed
    feedback = server.feedback(2)
    assert "differ from the float64 reference" in feedback
    assert "- B=1 Hq=4 Hkv=2 Sq=77 Sk=71 D=32 Dv=32 (exact float64" in feedback  # the failing shape
    assert "O is off by" in feedback and "against a tolerance of 1e-10" in feedback  # how far off
    assert "O worst at b=0 h=" in feedback and "row=" in feedback  # which rows
    assert llm_report(tmp_path / "out")["failures_by_kind"] == {"numbers": 1}


def test_dropped_mask_is_refused_against_the_spec(server, capsys, tmp_path):
    good = program(CAUSAL)
    unclaimed = good.replace("computes causal = bottom_right\n", "").replace(
        "Compute Mask S keep kv_idx < Sk and kv_idx <= q_idx + Sk - Sq", "Compute Mask S keep kv_idx < Sk")
    unmasked = "\n".join(line for line in good.split("\n") if "Compute Mask" not in line)
    server.answer(fenced(unclaimed), fenced(unmasked), fenced(good))
    code = main(["generate", *SPEC_ARGS, "--causal", "--out", str(tmp_path / "out"), "--llm", "openai:m",
                 "--llm-base-url", server.url, "--no-verify"])
    printed = capsys.readouterr().out
    assert code == 3, printed
    assert "TL601" in server.feedback(2) and "the spec asks for causal = bottom_right" in server.feedback(2)
    assert "TL606" in server.feedback(3) and "no Compute Mask statement" in server.feedback(3)
    assert llm_report(tmp_path / "out")["failures_by_kind"] == {"claims": 2}


def test_round_cap_ends_in_one_line_failure(server, capsys, tmp_path):
    server.answer("I would rather not write code today.", fenced("kernel k\nthis is not TL\n"))
    code, printed = generate(capsys, tmp_path / "out", server.url, "--max-rounds", "2")
    assert code == 1
    errors = [line for line in printed.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no TL program passed within 2 round(s); last: syntax:" in errors[0]
    assert "no ```tl code block" in server.feedback(2)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert not report["ok"] and report["failed_step"] == "llm-tl"
    assert report["llm"]["failures_by_kind"] == {"extract": 1, "syntax": 1} and len(server.http.log) == 2


# ---------------------------------------------------------------- servers that misbehave

def test_server_that_never_answers(silent_server, capsys, tmp_path):
    start = time.monotonic()
    code, printed = generate(capsys, tmp_path / "out", silent_server + "/v1", "--llm-timeout", "1")
    assert code == 1 and time.monotonic() - start < 15
    assert "error: tl: round 1: the request failed:" in printed and "no answer within 1 s" in printed
    assert llm_report(tmp_path / "out")["failures_by_kind"] == {"llm": 1}


@pytest.mark.parametrize("status, headers", [(500, {}), (429, {"Retry-After": "1"})])
def test_server_error_is_retried(server, capsys, tmp_path, status, headers):
    server.http.expect_ordered_request(CHAT, method="POST").respond_with_json({"error": {"message": "busy"}}, status=status,
                                                                               headers=headers)
    server.answer(fenced(program()))
    start = time.monotonic()
    code, printed = generate(capsys, tmp_path / "out", server.url, "--no-verify")
    assert code == 3, printed
    assert f"HTTP {status}" in printed and "retry 1/1" in printed and len(server.http.log) == 2
    if status == 429:
        assert time.monotonic() - start >= 1.0  # the server's wait


def test_server_that_keeps_failing(server, capsys, tmp_path):
    for _ in range(2):
        server.http.expect_ordered_request(CHAT, method="POST").respond_with_json({"error": {"message": "down"}}, status=500)
    code, printed = generate(capsys, tmp_path / "out", server.url)
    assert code == 1
    assert "gave up after 2 attempts; last: HTTP 500: down" in printed


def test_malformed_json(server, capsys, tmp_path):
    server.http.expect_ordered_request(CHAT, method="POST").respond_with_data("{not json", content_type="application/json")
    code, printed = generate(capsys, tmp_path / "out", server.url)
    assert code == 1
    assert "not valid JSON" in [line for line in printed.splitlines() if line.startswith("error:")][0]


# ---------------------------------------------------------------- a person answers through files

def test_file_provider_answered_by_a_person(capsys, tmp_path):
    prompts = tmp_path / "prompts"

    def person():
        deadline = time.monotonic() + 30
        while not (prompts / "001-prompt.md").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = (prompts / "001-prompt.md").read_text()
        assert "## user" in text and "stage1_sketch" in text
        (prompts / "001-answer.md").write_text(fenced(program()))
    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    code = main(["generate", *SPEC_ARGS, "--out", str(tmp_path / "out"), "--llm", f"file:{prompts}", "--llm-timeout", "60",
                 "--no-verify"])
    thread.join()
    printed = capsys.readouterr()
    assert code == 3, printed
    assert "write the model's answer to" in printed.out and "001-answer.md" in printed.out  # the person is told where
    llm = llm_report(tmp_path / "out")
    assert llm["provider"] == "file" and llm["tokens_estimated"] and llm["ok"]
    assert (tmp_path / "out" / "kernel.tl").read_text() == program()


# ---------------------------------------------------------------- flags

def test_optimize_needs_a_gpu(server, capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: --optimize runs")
    code, printed = generate(capsys, tmp_path / "out", server.url, "--optimize", "2")
    assert code == 2
    assert "--optimize needs a GPU to time kernels, and none is present" in printed
    assert server.http.log == [] and not (tmp_path / "out").exists()  # refused before anything was asked or written


@pytest.mark.parametrize("argv, message", [
    (["--mode", "direct"], "--mode needs --llm PROVIDER:MODEL"),
    (["--llm", "openai:m", "--tl", "lib:gqa_fwd"], "--tl and --llm"),
    (["--llm", "openai:m", "--mode", "direct", "--no-verify"], "--no-verify works with --mode tl --translate builtin only"),
    (["--llm", "nosuch:m"], "unknown LLM provider 'nosuch'"),
    (["--llm", "openai:m"], "no API key for openai"),
])
def test_bad_flags_exit_2(capsys, tmp_path, argv, message):
    code = main(["generate", *SPEC_ARGS, "--out", str(tmp_path / "out"), *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_prompts_list_and_show(capsys):
    assert main(["prompts", "list"]) == 0
    listed = capsys.readouterr().out
    for name in ("stage1_sketch", "stage1_params", "stage2_translate", "direct", "feedback", "optimize"):
        assert name in listed
    assert main(["prompts", "show", "stage1_params"]) == 0
    assert capsys.readouterr().out.startswith("<!-- attnforge prompt stage1_params, version 1 -->\nStep 2 of 2")
    assert main(["prompts", "show", "nosuch"]) == 2
    assert "no prompt template 'nosuch'" in capsys.readouterr().err


# ---------------------------------------------------------------- model-written modules (sandboxed)

def test_direct_mode_refuses_hostile_modules_then_verifies(server, capsys, tmp_path):
    good = module()
    escape = tmp_path / "escaped.txt"
    server.answer(fenced(with_launch_prefix(good, "import os\nos.system('true')"), "python"),
                  fenced("import socket\n" + with_launch_prefix(good, "socket.socket().connect(('127.0.0.1', 9))"), "python"),
                  fenced(with_launch_prefix(good, f"open({str(escape)!r}, 'w').write('x')"), "python"),
                  fenced(good, "python"))
    code, printed = generate(capsys, tmp_path / "out", server.url, "--mode", "direct", "--sandbox-timeout", "300")
    assert code == 0, printed
    assert "import of 'os'" in server.feedback(2) and "import of 'socket'" in server.feedback(3)
    assert "the builtin 'open'" in server.feedback(4) and not escape.exists()
    out = tmp_path / "out"
    assert (out / "kernel_triton.py").read_text() == good and not (out / "kernel.tl").exists()
    report = json.loads((out / "report.json").read_text())
    assert report["verified"] and report["verification"]["passed"] and report["compile"][0]["target"] == "h100"
    assert report["llm"]["failures_by_kind"] == {"unsafe": 3}
    assert [r["stage"] for r in report["llm"]["rounds"]] == ["direct"] * 4


def test_llm_translation_refuses_torch_attention_then_verifies(server, capsys, tmp_path):
    good = module()
    cheat = with_launch_prefix(good, "o.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))")
    server.answer(fenced(program()), fenced(cheat, "python"), fenced(good, "python"))
    code, printed = generate(capsys, tmp_path / "out", server.url, "--translate", "llm", "--sandbox-timeout", "300")
    assert code == 0, printed
    translate = server.requests()[1][0]["content"]
    assert translate.startswith("<!-- attnforge prompt stage2_translate, version 2 -->") and program().strip() in translate
    assert "torch.nn" in server.feedback(3) and "instead of the Triton kernel" in server.feedback(3)
    out = tmp_path / "out"
    assert (out / "kernel.tl").read_text() == program() and (out / "kernel_triton.py").read_text() == good
    report = json.loads((out / "report.json").read_text())
    assert report["verified"] and report["plan"]["parameters"]["BN"] == 32
    assert [s["name"] for s in report["steps"]][:2] == ["llm-tl", "llm-translate"]
    assert report["llm"]["failures_by_kind"] == {"unsafe": 1}
    assert [r["stage"] for r in report["llm"]["rounds"]] == ["tl", "translate", "translate"]


def test_mode_both_compares_and_replays(server, capsys, tmp_path):
    server.answer(fenced(program()), fenced(with_launch_prefix(module(), "import os"), "python"))
    out = tmp_path / "out"
    code, printed = generate(capsys, out, server.url, "--mode", "both", "--max-rounds", "1")
    assert code == 0, printed  # the TL kernel is the product; the direct baseline is compared
    comparison = json.loads((out / "comparison.json").read_text())["modes"]
    assert [(m["mode"], m["verified"], m["rounds"]) for m in comparison] == [("tl", True, 1), ("direct", False, 1)]
    assert comparison[1]["failures_by_kind"] == {"unsafe": 1} and comparison[0]["speed_note"] == "not timed (no GPU)"
    assert "| direct | FAILED: no Triton module passed within 1 round(s)" in (out / "comparison.md").read_text()
    direct = json.loads((out / "direct" / "report.json").read_text())
    assert not direct["ok"] and direct["failed_step"] == "llm-direct" and (out / "direct" / "llm" / "transcript.jsonl").is_file()
    assert (out / "kernel.tl").read_text() == program()
    code = main(["replay", str(out), "--out", str(tmp_path / "again")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "the same kernel (kernel.tl) and the same verdicts" in printed
    assert (tmp_path / "again" / "kernel.tl").read_text() == program() and len(server.http.log) == 2
