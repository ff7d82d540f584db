"""attnforge bench on the CPU: the plan (--dry-run, --quick, filters), the refusal without a GPU,
the runner with providers that fail, the check against the float64 reference, the summary
(ratios, geomean, worst row) and the rendering (JSON, Markdown, PNG)."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time

import pytest
import torch

from attnforge.backends import names as backend_names
from attnforge.bench import check, matrix, render, summary, timing
from attnforge.bench.command import canonical_command
from attnforge.bench.providers import Prepared, Provider, Sdpa, Unsupported
from attnforge.bench.runner import run_rows
from attnforge.cli import build_parser, main

PROVIDERS = ["sdpa-cudnn", "sdpa-flash", "flex", *(f"attnforge-{b}" for b in backend_names()), "attnforge-auto"]


def plan(capsys, *flags: str) -> tuple[int, dict, str]:
    code = main(["bench", "--dry-run", "--json", *flags])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


# ------------------------------------------------------------------ the plan


def test_dry_run_lists_the_matrix_and_every_provider(capsys):
    code, data, _ = plan(capsys)
    assert code == 0
    rows = data["rows"]
    assert list(data["providers"]) == PROVIDERS
    prefill = [r for r in rows if r["group"] == "prefill"]
    assert len(prefill) == 38 and len(rows) == 38 + 2 + len(matrix.VERIFY_LENGTHS)
    for r in prefill:  # MHA at 2048 hidden, 16k tokens per batch, Sq = Sk
        assert r["case"] == "gqa" or r["heads"] * r["head_dim"] == 2048
        assert r["batch"] * r["seqlen_q"] == 16384 and r["seqlen_q"] == r["seqlen_k"]
    mha = {(r["dtype"], r["head_dim"], r["seqlen_q"], r["causal"]) for r in prefill if r["case"] == "mha"}
    assert mha == {(d, h, s, c) for d in ("fp16", "bf16") for h in (64, 128, 256) for s in (1024, 4096, 16384) for c in (False, True)}
    assert {(r["heads"], r["kv_heads"], r["seqlen_q"], r["causal"]) for r in prefill if r["case"] == "gqa"} == {(32, 8, 4096, False), (32, 8, 4096, True)}
    decode = [(r["batch"], r["heads"], r["kv_heads"], r["seqlen_q"], r["seqlen_k"], r["metric"]) for r in rows if r["group"] == "decode"]
    assert decode == [(64, 32, 8, 1, 4096, "gbps"), (8, 32, 8, 1, 32768, "gbps")]
    verify = [r for r in rows if r["group"] == "decode-verify"]
    assert [r["seqlen_q"] for r in verify] == [2, 4, 8, 16] and all(r["causal"] and r["metric"] == "gbps" for r in verify)
    assert len({r["name"] for r in rows}) == len(rows)


def test_dry_run_text_names_rows_and_providers(capsys):
    assert main(["bench", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "mha-bf16-d128-s4k-causal" in out and "decode-verify-bf16-d128-b64-sq16-sk4k-causal" in out
    assert all(p in out for p in PROVIDERS)
    assert f"44 rows x {len(PROVIDERS)} providers" in out


def test_dry_run_imports_no_torch_or_triton():
    code = ("import sys; from attnforge.cli import main; assert main(['bench', '--dry-run', '--quick']) == 0; "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, sorted(m for m in sys.modules if m.startswith(('torch', 'triton')))[:5]")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_quick_is_a_smaller_subset_with_every_group(capsys):
    _, full, _ = plan(capsys)
    _, quick, _ = plan(capsys, "--quick")
    names = {r["name"] for r in full["rows"]}
    quick_names = [r["name"] for r in quick["rows"]]
    assert 0 < len(quick_names) < len(names) / 4 and set(quick_names) <= names
    assert {r["group"] for r in quick["rows"]} == {"prefill", "decode", "decode-verify"}


def test_filters(capsys):
    _, data, _ = plan(capsys, "--dtype", "fp16")
    assert len(data["rows"]) == 18 and {r["dtype"] for r in data["rows"]} == {"fp16"}
    _, data, _ = plan(capsys, "--head-dim", "64,256")
    assert {r["head_dim"] for r in data["rows"]} == {64, 256} and len(data["rows"]) == 24
    _, data, _ = plan(capsys, "--rows", "decode")
    assert {r["group"] for r in data["rows"]} == {"decode", "decode-verify"} and len(data["rows"]) == 6
    _, data, _ = plan(capsys, "--rows", "s1k", "--rows", "gqa", "--dtype", "bf16", "--head-dim", "128")
    assert [r["name"] for r in data["rows"]] == ["mha-bf16-d128-s1k-full", "mha-bf16-d128-s1k-causal", "gqa-bf16-d128-s4k-full", "gqa-bf16-d128-s4k-causal"]
    _, data, _ = plan(capsys, "--quick", "--rows", "causal")
    assert data["rows"] and all(r["causal"] for r in data["rows"])
    _, data, _ = plan(capsys, "--providers", "attnforge-triton,sdpa-cudnn")
    assert list(data["providers"]) == ["attnforge-triton", "sdpa-cudnn"]


@pytest.mark.parametrize("flags, words", [
    (["--dtype", "fp8"], "unknown dtype fp8"),
    (["--rows", "no-such-row"], "no row of the matrix passes"),
    (["--providers", "cutlass"], "unknown provider cutlass"),
])
def test_bad_filters_exit_2_with_one_line(capsys, flags, words):
    code, _, err = plan(capsys, *flags)
    assert code == 2 and words in err and err.strip().count("\n") == 0


def test_bench_without_a_gpu_says_so_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--quick"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and "needs a CUDA GPU" in err and err.strip().count("\n") == 0


def test_canonical_command_names_the_flags():
    ns = build_parser().parse_args(["bench", "--quick", "--dtype", "bf16", "--rows", "decode,gqa", "--rounds", "5", "--out", "x y", "--rep-ms", "50"])
    assert canonical_command(ns) == "attnforge bench --quick --dtype bf16 --rows decode,gqa --rounds 5 --out 'x y' --rep-ms 50.0"


# ------------------------------------------------------------------ counts


def test_flops_and_bytes_conventions():
    full = matrix.Row("prefill", "mha", "bf16", 128, False, 4, 16, 16, 4096, 4096)
    causal = matrix.Row("prefill", "mha", "bf16", 128, True, 4, 16, 16, 4096, 4096)
    assert full.flops() == 4 * 4 * 16 * 4096 * 4096 * 128 and causal.flops() == full.flops() / 2
    verify = matrix.Row("decode-verify", "decode-verify", "bf16", 128, True, 64, 32, 8, 4, 4096)
    assert verify.visible_pairs() == 4093 + 4094 + 4095 + 4096  # bottom-right: the exact count
    decode = matrix.Row("decode", "decode", "bf16", 128, False, 64, 32, 8, 1, 4096)
    assert decode.bytes() == 2 * 128 * (64 * 32 + 2 * 64 * 8 * 4096)  # Q, K, V read once


# ------------------------------------------------------------------ timing


def test_repeats_follow_do_bench_within_bounds():
    assert timing.repeats(1.0, 25, 100) == (25, 100)
    assert timing.repeats(50.0, 25, 100) == (1, timing.MIN_REPEATS)
    assert timing.repeats(1e-6, 25, 100)[1] == timing.MAX_REPEATS


def test_interleave_takes_round_medians_and_drops_a_failing_entry():
    order = []
    times = {"a": iter([[1.0, 2.0, 9.0], [3.0, 3.0, 3.0], [2.0]]), "b": iter([[4.0]])}

    def fn(name):
        def call():
            order.append(name)
            if name == "b" and order.count("b") > 1:
                raise RuntimeError("CUDA error: an illegal memory access\nmore")
        return call

    def timer(f):
        f()
        return next(times[order[-1]])

    timed, failed = timing.interleave({"a": (fn("a"), contextlib.nullcontext), "b": (fn("b"), contextlib.nullcontext)}, timer, rounds=3)
    assert order[:3] == ["a", "b", "a"]  # in turns
    assert timed["a"].rounds_ms == [2.0, 3.0, 2.0] and timed["a"].ms == 2.0 and timed["a"].spread == pytest.approx(0.5)
    assert "b" not in timed and failed["b"].startswith("failed while timing: RuntimeError: CUDA error: an illegal memory access")


# ------------------------------------------------------------------ check


def _inputs(row, seed=0):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[row.dtype])
    q = torch.randn(row.batch, row.heads, row.seqlen_q, row.head_dim, generator=g).to(dt)
    k = torch.randn(row.batch, row.kv_heads, row.seqlen_k, row.head_dim, generator=g).to(dt)
    v = torch.randn(row.batch, row.kv_heads, row.seqlen_k, row.head_dim, generator=g).to(dt)
    return q, k, v


def _exact(row, q, k, v):
    """The row's attention in float64 (bottom-right causal), rounded to the row's dtype."""
    from attnforge.reference import attention_reference

    o, _ = attention_reference(q.double().numpy(), k.double().numpy(), v.double().numpy(), causal=row.causal)
    return torch.from_numpy(o).to(q.dtype)


def test_slices_cut_causal_keys_at_the_chunk_end():
    row = matrix.Row("prefill", "gqa", "bf16", 16, True, 3, 8, 2, 200, 300)
    s = check.slices(row)
    assert {x.b for x in s} == {0, 2} and all(x.heads == (0, 7) and x.kv_heads == (0, 1) for x in s)
    assert [(x.start, x.stop, x.keys) for x in s if x.b == 0] == [(0, 32, 132), (85, 117, 217), (168, 200, 300)]
    small = matrix.Row("decode-verify", "decode-verify", "fp16", 16, False, 1, 2, 1, 4, 50)
    assert [(x.start, x.stop, x.keys) for x in check.slices(small)] == [(0, 4, 50)]


def test_check_passes_the_exact_output_and_fails_a_wrong_one():
    row = matrix.Row("decode-verify", "decode-verify", "bf16", 32, True, 2, 4, 2, 130, 170)
    q, k, v = _inputs(row)
    ref = check.RowReference(row, q, k, v)
    good = _exact(row, q, k, v)
    verdict = ref.judge(good, row_bounds=True)
    assert verdict["passed"] and verdict["o_ratio"] < 1 and verdict["err_o"] < 1e-2
    top_left = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(2, 1), v.float().repeat_interleave(2, 1),
                                                                is_causal=True).to(q.dtype)  # another mask: another function
    assert not ref.judge(top_left, row_bounds=False)["passed"]
    bad = good.clone()
    bad[1, 3, 129, 5] += 0.05  # one element of a checked row (b = B-1, h = Hq-1, the last row)
    verdict = ref.judge(bad, row_bounds=True)
    assert not verdict["passed"] and "b=1 h=3 row=129" in verdict["problem"]
    assert ref.judge(bad, row_bounds=False)["passed"]  # within the norm: a baseline is judged by the norm only
    nan = good.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert not ref.judge(nan, row_bounds=False)["passed"]
    assert "output shape" in ref.judge(good[:, :2], row_bounds=True)["problem"]


def test_flex_and_sdpa_compute_the_rows_function(monkeypatch):
    """The baselines get the bottom-right mask when Sq < Sk and GQA from the shapes (flex run
    eagerly here: compiling it is the GPU's job)."""
    from torch.nn.attention.flex_attention import flex_attention

    from attnforge.bench.providers import Flex

    monkeypatch.setitem(Flex._compiled, "fn", flex_attention)
    for row in (matrix.Row("decode-verify", "decode-verify", "bf16", 16, True, 2, 4, 2, 5, 70),
                matrix.Row("prefill", "gqa", "fp16", 16, True, 1, 4, 1, 40, 40)):
        q, k, v = _inputs(row)
        ref = check.RowReference(row, q, k, v)
        for provider in (Flex(), Sdpa("sdpa-math", "MATH", "SDPA math")):
            verdict = ref.judge(provider.prepare(row, q, k, v).fn(), row_bounds=True)
            assert verdict["passed"], (row.name, provider.name, verdict)


# ------------------------------------------------------------------ the runner


class _Fake(Provider):
    def __init__(self, name, *, prepare=None, static=None, verified=False):
        self.name, self.description, self._prepare, self._static, self.verified = name, name, prepare, static, verified

    def unsupported(self, row):
        return self._static

    def prepare(self, row, q, k, v):
        return self._prepare(row, q, k, v)


def _raise(exc):
    def prepare(row, q, k, v):
        raise exc
    return prepare


def test_runner_records_failures_as_na_and_wrong_outputs_as_failed():
    rows = [matrix.Row("prefill", "mha", "fp16", 16, True, 1, 2, 2, 40, 40),
            matrix.Row("decode-verify", "decode-verify", "bf16", 16, True, 2, 4, 1, 3, 33)]
    calls = []

    def exact(row, q, k, v):
        return Prepared(lambda: _exact(row, q, k, v))

    def wrong(row, q, k, v):
        return Prepared(lambda: _exact(row, q, k, v) * 1.1)

    def wrong_when_replayed(row, q, k, v):  # right at its first call, wrong from the second (a replay's bug)
        made = []
        return Prepared(lambda: made.append(1) or _exact(row, q, k, v) * (1.0 if len(made) == 1 else 1.1))

    def breaks_when_timed(row, q, k, v):
        def fn():
            calls.append(1)
            if len(calls) > 1:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")
            return _exact(row, q, k, v)
        return Prepared(fn)

    providers = [
        Sdpa("sdpa-math", "MATH", "SDPA math"),  # a real provider: bottom-right causal via causal_lower_right when Sq < Sk
        _Fake("refuses", prepare=_raise(Unsupported("head dim 16 is not supported"))),
        _Fake("crashes", prepare=_raise(ZeroDivisionError("a bug in the provider"))),
        _Fake("static", static="takes fp32 only"),
        _Fake("attnforge-good", prepare=exact, verified=True),
        _Fake("attnforge-wrong", prepare=wrong, verified=True),
        _Fake("attnforge-wrong-replayed", prepare=wrong_when_replayed, verified=True),
        _Fake("timing-oom", prepare=breaks_when_timed),
    ]
    seen = []
    records = run_rows(rows, providers, device=torch.device("cpu"), timer=lambda fn: (fn(), [2.0, 2.0, 4.0])[1], rounds=2,
                       on_row=lambda i, row, rec: seen.append((i, row.name)))
    assert seen == [(0, rows[0].name), (1, rows[1].name)]
    for rec in records:
        res = rec["results"]
        assert list(res) == [p.name for p in providers]
        assert res["sdpa-math"]["status"] == "ok" and res["sdpa-math"]["check"]["passed"], res["sdpa-math"]
        assert res["refuses"] == {"status": "n/a", "reason": "head dim 16 is not supported"}
        assert res["crashes"]["status"] == "n/a" and res["crashes"]["reason"] == "ZeroDivisionError: a bug in the provider"
        assert res["static"] == {"status": "n/a", "reason": "takes fp32 only"}
        assert res["attnforge-good"]["status"] == "ok" and res["attnforge-good"]["ms"] == 2.0
        assert res["attnforge-good"]["tflops"] == pytest.approx(matrix.Row(**{k: rec[k] for k in ("group", "case", "dtype", "head_dim", "causal", "batch", "heads", "kv_heads", "seqlen_q", "seqlen_k")}).flops() / 2.0 / 1e9)
        assert res["attnforge-wrong"]["status"] == "failed" and "||O - ref||" in res["attnforge-wrong"]["reason"]
        assert res["attnforge-wrong-replayed"]["status"] == "failed"
        assert res["timing-oom"]["status"] == "n/a" and "out of memory" in res["timing-oom"]["reason"]
        calls.clear()


def test_runner_skips_rows_after_the_time_limit():
    rows = [matrix.Row("prefill", "mha", "fp16", 16, False, 1, 2, 2, 8, 8)] * 2
    # (a row of 0.3 s against a limit of 0.1 s: the first row starts well inside it on a loaded machine too)
    slow = _Fake("p", prepare=lambda row, q, k, v: Prepared(lambda: time.sleep(0.3) or _exact(row, q, k, v)))
    records = run_rows(rows, [slow], device="cpu", timer=lambda fn: (fn(), [1.0])[1], rounds=1, time_limit_s=0.1)
    assert records[0]["results"]["p"]["status"] == "ok" and records[1]["results"]["p"]["status"] == "skipped"


@pytest.mark.parametrize("wrong", [False, True])
def test_the_command_end_to_end_with_the_gpu_faked(tmp_path, monkeypatch, capsys, wrong):
    """`attnforge bench --quick` with tiny rows on the CPU, CUDA and its timer stubbed: the files
    are written, progress is one line per row, and a wrong attnforge output exits 1."""
    from attnforge.bench import command, environment

    class FakeTimer:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, fn):
            fn()
            return [1.0, 1.5, 2.0]

    def af(row, q, k, v):
        return Prepared(lambda: _exact(row, q, k, v) * (1.5 if wrong else 1.0), first_call_s=0.1)

    rows = [matrix.Row("prefill", "mha", "bf16", 16, True, 1, 2, 2, 24, 24), matrix.Row("decode", "decode", "fp16", 16, False, 2, 4, 2, 1, 40)]
    monkeypatch.setattr(command, "_cuda_or_fail", lambda: None)
    monkeypatch.setattr(command, "_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(command, "quick_matrix", lambda: rows)
    monkeypatch.setattr(command, "default_providers", lambda: [Sdpa("sdpa-cudnn", "MATH", "math standing in"), _Fake("attnforge-x", prepare=af, verified=True),
                                                               _Fake("flex", static="not here")])
    monkeypatch.setattr(timing, "CudaTimer", FakeTimer)
    monkeypatch.setattr(environment, "environment", lambda: {"gpu": "Fake GPU", "date": "2026-11-30T00:00:00+00:00", "torch": torch.__version__})
    code = main(["bench", "--quick", "--out", str(tmp_path / "b"), "--no-png"])
    out = capsys.readouterr().out
    assert code == (1 if wrong else 0)
    data = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert [r["name"] for r in data["rows"]] == [r.name for r in rows] and data["command"].startswith("attnforge bench --quick")
    assert data["timing"]["rounds"] == 2 and data["environment"]["gpu"] == "Fake GPU"
    res = data["rows"][1]["results"]
    assert res["sdpa-cudnn"]["ms"] == 1.5 and res["flex"]["status"] == "n/a" and res["flex"]["reason"] == "not here"
    assert res["attnforge-x"]["status"] == ("failed" if wrong else "ok") and res["attnforge-x"]["ratios"]["sdpa-cudnn"] == 1.0
    assert "[1/2] mha-bf16-d16-s24-causal" in out and "decode-fp16-d16-b2-sk40: sdpa-cudnn" in out
    assert ("CHECK FAILED" in out and "FAILED checks" in out) if wrong else "verified" in out
    assert (tmp_path / "b" / "bench.md").is_file() and not (tmp_path / "b" / "bench.png").exists()


# ------------------------------------------------------------------ summary and rendering


def _synthetic() -> dict:
    def ok(ms, **extra):
        return {"status": "ok", "ms": ms, "tflops": 1.0 / ms, "gbps": 2.0 / ms, **extra}

    rows = []
    spec = [  # name, group, cudnn ms, flash ms, attnforge result
        ("mha-a", "prefill", 1.0, 2.0, ok(2.0, check={"passed": True, "err_o": 1e-3, "o_ratio": 0.3, "worst_row": "b=0 h=0 row=1"})),
        ("mha-b", "prefill", 1.0, 1.5, ok(0.5, check={"passed": True, "err_o": 1e-3, "o_ratio": 0.2, "worst_row": "b=0 h=0 row=1"})),
        ("mha-c", "prefill", 1.0, 1.0, {"status": "failed", "ms": 0.1, "tflops": 10.0, "gbps": 20.0, "reason": "||O - ref|| too big",
                                         "check": {"passed": False, "err_o": math.inf, "o_ratio": math.inf, "problem": "NaN"}}),
        ("dec-a", "decode", 1.0, None, ok(4.0, check={"passed": True, "err_o": 1e-3, "o_ratio": 0.1, "worst_row": "b=0 h=0 row=0"})),
        ("dec-b", "decode", None, 1.0, ok(1.0)),
    ]
    for name, group, cudnn, flash, af in spec:
        row = {"name": name, "group": group, "dtype": "bf16", "head_dim": 128, "causal": False, "batch": 1, "heads": 2, "kv_heads": 2,
               "seqlen_q": 8, "seqlen_k": 8, "shape": "1 x 2/2 x 8 x 8", "metric": "tflops" if group == "prefill" else "gbps",
               "results": {"sdpa-cudnn": ok(cudnn) if cudnn else {"status": "n/a", "reason": "cuDNN refused: no kernel"},
                           "sdpa-flash": ok(flash) if flash else {"status": "n/a", "reason": "flash refused"},
                           "attnforge-triton": af}}
        rows.append(row)
    summary.add_ratios(rows, ["sdpa-cudnn", "sdpa-flash"])
    providers = ["sdpa-cudnn", "sdpa-flash", "attnforge-triton"]
    return {"environment": {"gpu": "NVIDIA H200", "date": "2026-11-30T12:00:00+00:00", "torch": "2.11.0", "triton": "3.6.0"},
            "command": "attnforge bench --quick", "timing": {"method": "events"}, "conventions": matrix.CONVENTIONS,
            "baseline": "sdpa-cudnn", "providers": {p: p for p in providers}, "rows": rows,
            "summary": {b: summary.summarize(rows, providers, b) for b in ("sdpa-cudnn", "sdpa-flash")}}


def test_geomean_and_worst_row():
    assert summary.geomean([1.0, 4.0]) == pytest.approx(2.0) and summary.geomean([]) is None
    result = _synthetic()
    af = result["summary"]["sdpa-cudnn"]["attnforge-triton"]
    assert af["prefill"]["geomean"] == pytest.approx(math.sqrt(0.5 * 2.0)) and af["prefill"]["rows"] == 2  # the failed row left out
    assert af["prefill"]["worst"] == {"row": "mha-a", "ratio": 0.5} and af["prefill"]["best"] == {"row": "mha-b", "ratio": 2.0}
    assert af["decode"] == {"geomean": 0.25, "rows": 1, "worst": {"row": "dec-a", "ratio": 0.25}, "best": {"row": "dec-a", "ratio": 0.25}}
    assert af["all"]["geomean"] == pytest.approx((0.5 * 2.0 * 0.25) ** (1 / 3)) and af["all"]["worst"]["row"] == "dec-a"
    assert af["failed"] == ["mha-c"]
    assert result["rows"][2]["results"]["attnforge-triton"]["ratios"]["sdpa-cudnn"] == pytest.approx(10.0)  # still shown
    assert result["rows"][4]["results"]["attnforge-triton"]["ratios"]["sdpa-cudnn"] is None  # no baseline on that row
    flash = result["summary"]["sdpa-flash"]["attnforge-triton"]
    assert flash["prefill"]["geomean"] == pytest.approx(math.sqrt(1.0 * 3.0)) and flash["decode"]["rows"] == 1
    assert result["summary"]["sdpa-cudnn"]["sdpa-cudnn"]["all"]["geomean"] == 1.0
    assert result["summary"]["sdpa-cudnn"]["sdpa-cudnn"]["n/a"] == 1


def test_render_json_markdown_png(tmp_path):
    result = _synthetic()
    written, notes = render.write_all(result, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "bench.json").read_text())  # strict JSON: no NaN or Infinity
    assert data["rows"][2]["results"]["attnforge-triton"]["check"]["o_ratio"] == "inf"
    assert data["command"] == "attnforge bench --quick"
    md = (tmp_path / "out" / "bench.md").read_text()
    assert "| mha-a | bf16 | 128 | no | 1 x 2/2 x 8 x 8 | 1 (1.00x) | 0 (0.50x) | 0 (0.50x) |" in md
    assert "FAILED 10 (10.00x)" in md and "| dec-a |" in md and "n/a" in md
    assert "**sdpa-cudnn** on 1 row(s) (dec-b): cuDNN refused: no kernel" in md
    assert "| attnforge-triton | 1.00x | 0.25x | - | 0.63x | dec-a 0.25x | 3 | 0 | 1 |" in md
    assert "### Ratio to sdpa-flash" in md
    try:
        import matplotlib  # noqa: F401 (in the test extras)
    except ImportError:
        assert notes and "matplotlib" in notes[0]
        return
    png = tmp_path / "out" / "bench.png"
    assert png in written and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
