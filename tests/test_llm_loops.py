"""The LLM loops as functions: the static gate for kernel modules, what the sandboxed run refuses
(a module that computes on the host, one that launches nothing, one that never finishes), the
stage-1 loop's stopping rules, and --optimize's loop with an injected timer (no GPU needed)."""

from __future__ import annotations

import json

import pytest

from attnforge.llm import Budget, Tracked, Transcript
from attnforge.llm.errors import LLMError
from attnforge.llm.kernel_jobs import verify_module
from attnforge.llm.kernel_rules import problems
from attnforge.llm.pipeline import LLMOptions, run
from attnforge.llm.sandbox import Limits, run_untrusted
from attnforge.llm.stage1 import Built, write_tl
from attnforge.llm.stage2 import write_kernel
from llm_scripts import H100, HOST_ATTENTION, SPEC, Scripted, fenced, module, program
from llm_servers import clean_env  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def _env(clean_env):
    return clean_env


def tracked(answers: list[str], tmp_path=None) -> Tracked:
    return Tracked(Scripted(answers), budget=Budget(), transcript=Transcript(tmp_path) if tmp_path else None)


# ---------------------------------------------------------------- the static gate for kernel modules

@pytest.mark.parametrize("line, reason", [
    ("o.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))", "torch.nn"),
    ("s = torch.softmax(q.float(), -1)", "torch.softmax"),
    ("s = torch.matmul(q, k.transpose(-1, -2))", "torch.matmul"),
    ("s = torch.einsum('bhqd,bhkd->bhqk', q, k)", "torch.einsum"),
    ("s = torch.bmm(q[0], k[0].transpose(-1, -2))", "torch.bmm"),
    ("s = q @ k.transpose(-1, -2)", "the @ operator on the host"),
    ("s = q.float().matmul(k.float().transpose(-1, -2))", "the tensor method .matmul()"),
    ("p = q.float().softmax(-1)", "the tensor method .softmax()"),
    ("p = q.float().exp()", "the tensor method .exp()"),
    ("f = getattr(torch, 'einsum')", "getattr(..., 'einsum')"),
    ("T = torch\n    s = T.mm(q[0, 0], k[0, 0].T)", "torch.mm"),
    ("lse.copy_(torch.logsumexp(q.float().sum(-1), -1))", "torch.logsumexp"),
])
def test_host_side_attention_is_refused(line, reason):
    source = module().replace("def launch(q, k, v, o, lse, *, scale) -> None:\n",
                              f"def launch(q, k, v, o, lse, *, scale) -> None:\n    {line}\n", 1)
    found = problems(source)
    assert found and any(reason in text for _, _, text in found), found
    row = source.splitlines().index(f"    {line.splitlines()[0]}") + 1
    assert any(r == row or (r == row + 1 and "T.mm" in line) for r, _, _ in found), found


@pytest.mark.parametrize("line, reason", [
    ("from torch import matmul", "from torch import matmul"),
    ("from torch import nn", "from torch import nn"),
])
def test_imports_of_host_attention_are_refused(line, reason):
    found = problems(line + "\n" + module())
    assert any(reason in text for _, _, text in found), found


def test_the_contract_is_checked_before_anything_runs():
    found = [text for _, _, text in problems("import torch\nHEAD_DIM = 32\ndef helper(x):\n    return x\n")]
    assert any("does not define HEAD_DIM_V" in t for t in found) and any("does not define TENSOR_DTYPES" in t for t in found)
    assert any("no top-level def launch" in t for t in found) and any("no top-level @triton.jit function" in t for t in found)


def test_a_real_kernel_module_passes_and_jit_code_may_use_tl_dot_and_exp():
    assert problems(module()) == []


# ---------------------------------------------------------------- what the sandboxed run refuses

def test_a_module_that_computes_on_the_host_is_refused_when_run():
    assert problems(HOST_ATTENTION) == []  # torch.pow(math.e, ...) slips past any static list
    verdict = run_untrusted(HOST_ATTENTION, verify_module, SPEC.to_dict(), "h100", {}, True, False, limits=Limits(timeout_s=240))
    assert verdict.verification is not None and verdict.verification.passed  # its numbers are right...
    kinds = [kind for kind, _ in verdict.problems]
    assert kinds == ["host-compute"] and not verdict.ok  # ...but not from its kernel
    assert "with its Triton kernels switched off" in verdict.problems[0][1]
    assert verdict.launches["busy"].count > 0


def test_a_module_that_launches_nothing_is_refused():
    lazy = HOST_ATTENTION.split("def launch(", 1)[0] + "def launch(q, k, v, o, lse, *, scale) -> None:\n    o.zero_()\n"
    assert problems(lazy) == []
    verdict = run_untrusted(lazy, verify_module, SPEC.to_dict(), "h100", {}, True, False, limits=Limits(timeout_s=240))
    assert [kind for kind, _ in verdict.problems] == ["no-kernel"]
    assert "never launched a @triton.jit kernel" in verdict.problems[0][1]


def test_an_endless_module_is_killed_by_the_sandbox_and_the_model_is_told(tmp_path):
    endless = module() + "\nwhile True:\n    pass\n"
    llm = tracked([fenced(endless, "python"), fenced(endless, "python")], tmp_path)
    result = write_kernel(llm, SPEC, H100, max_rounds=2, limits=Limits(timeout_s=3, memory_bytes=1 << 30))
    assert not result.ok and [r.failure for r in result.rounds] == ["sandbox-timeout"] * 2
    assert result.error.startswith("no Triton module passed within 2 round(s); last: sandbox-timeout:")
    feedback = llm.client.requests[1][-1].content
    assert "It did not finish in time while attnforge loaded and verified it: timed out after 3 s" in feedback


# ---------------------------------------------------------------- stage 1's stopping rules

def test_stage1_stops_on_a_failed_request(tmp_path):
    class Failing(Scripted):
        def complete(self, messages, *, max_tokens):
            if self.requests:
                raise LLMError("HTTP 503: overloaded", where="openai:scripted")
            return super().complete(messages, max_tokens=max_tokens)
    llm = Tracked(Failing([fenced("kernel k\nnot TL\n")]), transcript=Transcript(tmp_path))
    result = write_tl(llm, SPEC, H100, max_rounds=4)
    assert not result.ok and len(result.rounds) == 2
    assert [r.failure for r in result.rounds] == ["syntax", "llm"]
    assert result.error.startswith("round 2: the request failed: openai:scripted: HTTP 503")
    records = [json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    assert "completion" in records[0] and "HTTP 503" in records[1]["error"]["message"]


def test_stage1_feeds_build_failures_back_and_stops_on_unfixable_ones():
    calls = []

    def build(source: str) -> Built:
        calls.append(source)
        if len(calls) == 1:
            return Built(False, kind="compile", feedback="- attn_fwd does not fit h100: 300 KiB shared")
        return Built(True, value="kernel")
    llm = tracked([fenced(program(BN=64)), fenced(program())])
    result = write_tl(llm, SPEC, H100, build=build)
    assert result.ok and result.built == "kernel" and calls == [program(BN=64), program()]
    assert "does not fit h100: 300 KiB shared" in llm.client.requests[1][-1].content
    assert [r.failure for r in result.rounds] == ["compile", None]

    never = tracked([fenced(program())])
    result = write_tl(never, SPEC, H100, build=lambda _s: Built(False, kind="verify", feedback="- broken", retry=False))
    assert not result.ok and len(result.rounds) == 1 and result.error == "round 1: verify: broken"


# ---------------------------------------------------------------- --optimize, timed by an injected timer

def test_optimize_keeps_the_fastest_verified_kernel(tmp_path):
    slower, faster = program(BN=16), program(BN=64)
    broken = faster.replace("Compute GEMM P, Vr", "Compute GEMM P Vr", 1)
    client = Scripted([fenced(program()), fenced(slower), fenced(broken), fenced(faster)])
    measured = []

    def timer(candidate) -> float:  # a fake GPU: wider K/V tiles are faster
        ms = {16: 3.0, 32: 2.0, 64: 1.0}[candidate.params["BN"]]
        measured.append((candidate.params["BN"], candidate.directory))
        return ms
    out = tmp_path / "out"
    runs = run(LLMOptions("openai:scripted", optimize=3), SPEC, H100, out, client=client, timer=timer)
    r = runs[0]
    assert r.verified and [bn for bn, _ in measured] == [32, 16, 64]
    assert (out / "kernel.tl").read_text() == faster  # the fastest verified variant became the kernel
    optimize = json.loads((out / "report.json").read_text())["llm"]["optimize"]
    assert (optimize["start_ms"], optimize["best_ms"], optimize["improved"]) == (2.0, 1.0, True)
    assert [t["result"].split(",")[0].split(" (")[0] for t in optimize["tried"]] == ["verified", "refused", "verified"]
    assert json.loads((out / "report.json").read_text())["llm"]["timings_ms"] == [2.0, 3.0, 1.0]
    assert json.loads((out / "report.json").read_text())["verified"]
    prompt = client.requests[1][0].content
    assert prompt.startswith("<!-- attnforge prompt optimize, version 1 -->") and "2 ms" in prompt
    assert "compute ceiling: 989.4 TFLOPS dense fp16 on h100" in prompt and "registers/thread" in prompt
    assert "- round 2: BM=64, BN=16, warps=4, stages=2: verified, 3 ms" in client.requests[2][0].content  # what was tried
    assert "- round 3: param BM = 64, BN = 64, warps = 4, stages = 2: refused (syntax)" in client.requests[3][0].content
    assert sorted(p.name for p in (out / "llm" / "optimize").iterdir()) == ["round-1", "round-3"]
