"""The openai: and anthropic: clients against real HTTP servers on 127.0.0.1 speaking each protocol."""

from __future__ import annotations

import json
import time
import traceback

import pytest
from werkzeug import Response

from attnforge.errors import AttnforgeError
from attnforge.llm import Budget, BudgetExceeded, LLMError, Message, Prices, Tracked, Transcript, open_client
from llm_servers import PROTOCOLS, SECRET, anthropic_body, clean_env, openai_body, silent_server  # noqa: F401 (fixtures)

pytest.importorskip("openai")
pytest.importorskip("anthropic")

PROVIDERS = ["openai", "anthropic"]
ASK = [Message("system", "You write TL."), Message("user", "Write a kernel.")]


@pytest.fixture(autouse=True)
def _env(clean_env):
    return clean_env


def client_for(provider, httpserver, **kw):
    path, suffix, _ = PROTOCOLS[provider]
    kw.setdefault("api_key", SECRET)
    kw.setdefault("timeout_s", 5)
    return open_client(f"{provider}:test-model", base_url=httpserver.url_for(suffix) if suffix else httpserver.url_for("/").rstrip("/"), **kw)


def expect(provider, httpserver):
    return httpserver.expect_ordered_request(PROTOCOLS[provider][0], method="POST")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_normal_answer(provider, httpserver):
    body = PROTOCOLS[provider][2]("```tl\nkernel k\n```", model="served-model-v2")
    expect(provider, httpserver).respond_with_json(body)
    c = client_for(provider, httpserver).complete(ASK, max_tokens=321)
    assert c.text == "```tl\nkernel k\n```"
    assert (c.input_tokens, c.output_tokens, c.total_tokens) == (12, 5, 17)
    assert c.model == "served-model-v2" and not c.estimated and c.seconds >= 0
    request, _ = httpserver.log[-1]
    sent = json.loads(request.get_data())
    assert sent["model"] == "test-model" and sent["max_tokens"] == 321
    if provider == "openai":
        assert sent["messages"] == [m.to_dict() for m in ASK]
        assert request.headers["Authorization"] == f"Bearer {SECRET}"
    else:  # the system message travels as the request's system text
        assert sent["system"] == "You write TL." and sent["messages"] == [ASK[1].to_dict()]
        assert SECRET in (request.headers.get("x-api-key", "") + request.headers.get("Authorization", ""))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_server_error_then_success(provider, httpserver):
    expect(provider, httpserver).respond_with_json({"error": {"message": "upstream exploded"}}, status=500)
    expect(provider, httpserver).respond_with_json(PROTOCOLS[provider][2]("ok"))
    events = []
    c = client_for(provider, httpserver, on_event=events.append).complete(ASK, max_tokens=10)
    assert c.text == "ok" and len(httpserver.log) == 2
    assert len(events) == 1 and "HTTP 500" in events[0] and "retry 1/" in events[0]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_rate_limit_honours_retry_after(provider, httpserver):
    expect(provider, httpserver).respond_with_json({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "1"})
    expect(provider, httpserver).respond_with_json(PROTOCOLS[provider][2]("ok"))
    start = time.monotonic()
    c = client_for(provider, httpserver).complete(ASK, max_tokens=10)
    assert c.text == "ok"
    assert time.monotonic() - start >= 1.0  # the server's wait, not a shorter backoff
    assert c.seconds >= 1.0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retry_after_beyond_limit_is_an_error(provider, httpserver):
    expect(provider, httpserver).respond_with_json({"error": {"message": "quota"}}, status=429, headers={"Retry-After": "86400"})
    start = time.monotonic()
    with pytest.raises(LLMError, match="retry after 86400 s"):
        client_for(provider, httpserver).complete(ASK, max_tokens=10)
    assert time.monotonic() - start < 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_gives_up_after_the_retries(provider, httpserver):
    for _ in range(2):
        expect(provider, httpserver).respond_with_json({"error": {"message": "down"}}, status=503, headers={"Retry-After": "0"})
    with pytest.raises(LLMError, match="gave up after 2 attempts; last: HTTP 503: down"):
        client_for(provider, httpserver, retries=1).complete(ASK, max_tokens=10)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_server_that_never_answers_times_out(provider, silent_server):
    path, suffix, _ = PROTOCOLS[provider]
    client = open_client(f"{provider}:m", api_key=SECRET, base_url=silent_server + suffix, timeout_s=1)
    start = time.monotonic()
    with pytest.raises(LLMError, match="no answer within 1 s"):
        client.complete(ASK, max_tokens=10)
    assert time.monotonic() - start < 4


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("body", ["{not json", '{"choices": [', "<html>502 Bad Gateway</html>"])
def test_malformed_answer(provider, body, httpserver):
    expect(provider, httpserver).respond_with_data(body, content_type="application/json")
    with pytest.raises(LLMError, match="not valid JSON"):
        client_for(provider, httpserver).complete(ASK, max_tokens=10)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_answer_that_is_not_a_completion(provider, httpserver):
    expect(provider, httpserver).respond_with_data("hello", content_type="text/plain")
    with pytest.raises(LLMError, match="not a (chat completion|message)"):
        client_for(provider, httpserver).complete(ASK, max_tokens=10)


def test_openai_empty_choices(httpserver):
    body = openai_body("x")
    body["choices"] = []
    expect("openai", httpserver).respond_with_json(body)
    with pytest.raises(LLMError, match="no choices"):
        client_for("openai", httpserver).complete(ASK, max_tokens=10)


def test_openai_refusal(httpserver):
    expect("openai", httpserver).respond_with_json(openai_body(None, refusal="I can't help with that."))
    with pytest.raises(LLMError, match="the model refused: I can't help"):
        client_for("openai", httpserver).complete(ASK, max_tokens=10)


def test_anthropic_refusal(httpserver):
    expect("anthropic", httpserver).respond_with_json(anthropic_body("", stop="refusal"))
    with pytest.raises(LLMError, match="refused"):
        client_for("anthropic", httpserver).complete(ASK, max_tokens=10)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_cut_off_before_any_text(provider, httpserver):
    finish = {"openai": {"finish": "length"}, "anthropic": {"stop": "max_tokens"}}[provider]
    expect(provider, httpserver).respond_with_json(PROTOCOLS[provider][2]("", **finish))
    with pytest.raises(LLMError, match="cut off at max_tokens=10"):
        client_for(provider, httpserver).complete(ASK, max_tokens=10)


def test_openai_without_usage_estimates_tokens(httpserver):
    expect("openai", httpserver).respond_with_json(openai_body("a" * 40, usage=False))
    c = client_for("openai", httpserver).complete([Message("user", "b" * 80)], max_tokens=10)
    assert c.estimated and (c.input_tokens, c.output_tokens) == (20, 10)


def test_openai_switches_to_max_completion_tokens(httpserver):
    refusal = {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                    "Use 'max_completion_tokens' instead.", "type": "invalid_request_error"}}
    expect("openai", httpserver).respond_with_json(refusal, status=400)
    expect("openai", httpserver).respond_with_json(openai_body("ok"))
    expect("openai", httpserver).respond_with_json(openai_body("again"))
    client = client_for("openai", httpserver)
    assert client.complete(ASK, max_tokens=77).text == "ok"
    assert client.complete(ASK, max_tokens=78).text == "again"
    sent = [json.loads(r.get_data()) for r, _ in httpserver.log]
    assert "max_tokens" in sent[0] and sent[1]["max_completion_tokens"] == 77 and sent[2]["max_completion_tokens"] == 78


@pytest.mark.parametrize("provider", PROVIDERS)
def test_key_never_leaks(provider, httpserver, tmp_path):
    # The server echoes the key it was sent, in the body and in a header.
    def echo(request):
        sent = request.headers.get("Authorization", "") + request.headers.get("x-api-key", "")
        return Response(json.dumps({"error": {"message": f"Incorrect API key provided: {sent}", "key": SECRET}}),
                        status=401, content_type="application/json", headers={"X-Echo": sent})
    expect(provider, httpserver).respond_with_handler(echo)
    transcript = Transcript(tmp_path / "run")
    client = Tracked(client_for(provider, httpserver), transcript=transcript)
    with pytest.raises(LLMError) as info:
        client.complete(ASK, max_tokens=10)
    err = info.value
    assert isinstance(err, AttnforgeError) and err.where and err.hint
    assert "refused the key" in err.message and "argument" in err.hint  # where the key came from, not the key
    shown = [str(err), repr(err), err.message, err.hint, "".join(traceback.format_exception(err))]
    assert all(SECRET not in text and SECRET[8:] not in text for text in shown)
    assert err.__cause__ is None and err.__suppress_context__  # the SDK's exception (which quotes the body) is dropped
    written = (tmp_path / "run" / "transcript.jsonl").read_text()
    assert "refused the key" in written and SECRET not in written and SECRET[8:] not in written
    assert "[redacted]" in written


def test_settings_never_show_the_key(clean_env):
    from attnforge.llm.config import resolve
    settings = resolve("openai:gpt-x", api_key=SECRET)
    assert SECRET not in repr(settings) and SECRET not in str(settings)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_token_accounting_and_budget_cap(provider, httpserver, tmp_path):
    build = PROTOCOLS[provider][2]
    for n in range(3):
        tokens = {"openai": {"prompt_tokens": 100, "completion_tokens": 50},
                  "anthropic": {"input_tokens": 100, "output_tokens": 50}}[provider]
        expect(provider, httpserver).respond_with_json(build(f"answer {n}", **tokens))
    budget = Budget(max_total_tokens=400, max_rounds=10, prices=Prices(3.0, 15.0))
    client = Tracked(client_for(provider, httpserver), budget=budget, transcript=Transcript(tmp_path))
    client.complete(ASK, max_tokens=1000)
    assert budget.total_tokens == 150 and budget.rounds == 1
    assert budget.cost == pytest.approx((100 * 3.0 + 50 * 15.0) / 1e6)
    # The answer's token limit is clamped to what is left of the cap.
    client.complete(ASK, max_tokens=1000)
    assert json.loads(httpserver.log[1][0].get_data())["max_tokens"] == 250
    with pytest.raises(BudgetExceeded, match="450 tokens used, over the cap of 400") as info:
        client.complete(ASK, max_tokens=1000)
    assert info.value.completion.text == "answer 2"  # the answer that crossed the cap is kept
    with pytest.raises(BudgetExceeded, match="450 tokens used of a cap of 400"):
        client.complete(ASK, max_tokens=1000)
    assert len(httpserver.log) == 3  # the refused request never reached the server
    records = [json.loads(line) for line in (tmp_path / "transcript.jsonl").read_text().splitlines()]
    assert [r["completion"]["text"] for r in records] == ["answer 0", "answer 1", "answer 2"]
    assert records[0]["cost_usd"] == pytest.approx(0.00105)
    summary = budget.summary()
    assert summary["rounds"] == 3 and summary["input_tokens"] == 300 and summary["output_tokens"] == 150


def test_round_cap(httpserver):
    expect("openai", httpserver).respond_with_json(openai_body("one"))
    client = Tracked(client_for("openai", httpserver), budget=Budget(max_rounds=1))
    client.complete(ASK, max_tokens=10)
    with pytest.raises(BudgetExceeded, match="all 1 rounds are used"):
        client.complete(ASK, max_tokens=10)


def test_connection_refused_is_clear(clean_env):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    # Credentials in a base URL (user:password@, ?key=) are not shown either.
    client = open_client("openai:m", base_url=f"http://user:hunter2pass@127.0.0.1:{port}/v1?key=qwerty123", timeout_s=2)
    with pytest.raises(LLMError, match="cannot reach the server") as info:
        client.complete(ASK, max_tokens=5)
    assert "base URL" in info.value.hint
    assert f"127.0.0.1:{port}/v1" in str(info.value)
    assert "hunter2pass" not in str(info.value) and "qwerty123" not in str(info.value)
