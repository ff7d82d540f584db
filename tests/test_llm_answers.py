"""What comes back from a model: code extraction, and the feedback sent for another round."""

from __future__ import annotations

import pytest

from attnforge.errors import TLSyntaxError
from attnforge.llm import LLMError
from attnforge.llm.extract import blocks, extract_code
from attnforge.llm.feedback import format_findings, format_runs, format_syntax_error, tl_feedback
from attnforge.llm.prompts import feedback_prompt
from attnforge.tl import catalog, check, parse
from attnforge.tl.harness import Shape, run_and_compare

TL = "kernel k\ngrid b : B\n"
PY = "import triton\n\ndef launch(q, k, v, o, lse, *, scale):\n    pass\n"


# ---------------------------------------------------------------- extraction

def test_labelled_block_inside_prose():
    answer = f"Here is my plan.\n\n```tl\n{TL}```\n\nThe tiles are 128 wide."
    assert extract_code(answer, "tl") == TL


def test_labelled_block_wins_over_others_and_the_last_labelled_wins():
    answer = (f"First a sketch:\n```\nnot this\n```\nthen python:\n```python\n{PY}```\n"
              f"old:\n```tl\nkernel old\n```\nfixed:\n```tl\n{TL}```\nDone.")
    assert extract_code(answer, "tl") == TL
    assert extract_code(answer, "python") == PY


def test_last_unlabelled_block_when_none_is_labelled():
    answer = f"```\nkernel draft\n```\nBetter:\n```\n{TL}```"
    assert extract_code(answer, "tl") == TL


def test_py_label_tildes_longer_fences_and_crlf():
    assert extract_code(f"~~~py\n{PY}~~~\n", "python") == PY
    nested = "````python\ns = '''\n```\n'''\n````\n"
    assert extract_code(nested, "python") == "s = '''\n```\n'''\n"
    assert extract_code(f"```tl\r\n{TL.replace(chr(10), chr(13) + chr(10))}```\r\n", "tl") == TL


def test_thinking_is_skipped():
    answer = f"<think>\nmaybe\n```tl\nkernel wrong\n```\n</think>\nAnswer:\n```tl\n{TL}```"
    assert extract_code(answer, "tl") == TL


def test_bare_code_without_fences():
    assert extract_code(TL, "tl") == TL
    assert extract_code("# doc\n" + TL, "tl") == "# doc\n" + TL
    assert extract_code(PY, "python") == PY


@pytest.mark.parametrize("answer, language, message", [
    ("I cannot write that kernel.", "tl", "no ```tl code block in the answer"),
    ("Sure! The kernel loads Q and streams K.", "python", "no ```python code block"),
    ("```python\nprint(1)\n```", "tl", "blocks labelled python only"),
    ("Here:\n```tl\nkernel k\ngrid b : B\n", "tl", "never closed"),
    ("```tl\n\n```", "tl", "is empty"),
])
def test_no_usable_code_is_a_clear_error(answer, language, message):
    with pytest.raises(LLMError, match=message.replace("*", r"\*")) as info:
        extract_code(answer, language)
    assert info.value.hint


def test_blocks_keep_positions():
    found = blocks("a\n```tl\nx\n```\nb\n```python\ny\n```")
    assert [(b.label, b.code, b.line, b.closed) for b in found] == [("tl", "x", 2, True), ("python", "y", 6, True)]


# ---------------------------------------------------------------- feedback

def _broken(name: str, drop: str) -> str:
    """A library program with one line deleted."""
    lines = catalog.source(name).split("\n")
    kept = [line for line in lines if not line.strip().startswith(drop)]
    assert len(kept) == len(lines) - 1
    return "\n".join(kept)


def test_feedback_from_a_real_checker_run():
    source = _broken("gqa_causal_fwd", "Compute Cast P to qkv")
    result = check(parse(source), "h100")
    assert not result.ok
    text = format_findings(result, source)
    first = result.errors[0]
    assert f"line {first.line}, column {first.col}: {first.code} (error): {first.message}" in text
    assert f"hint: {first.hint}" in text
    assert source.split("\n")[first.line - 1] in text  # the offending line, quoted
    assert "TL305" in text  # GEMM operands of different types, now that P stays fp32


def test_feedback_for_missing_allocations_lists_them_in_order_without_a_cascade():
    source = _broken("gqa_fwd", "Allocate Ks")
    result = check(parse(source), "h100")
    # the tiles the refused Copy would have made (Ks, then Kr, S, P) are not reported again
    assert [f.code for f in result.errors] == ["TL401"], [str(f) for f in result.errors]
    source = "\n".join(line for line in source.split("\n") if not line.strip().startswith("Allocate Vs"))
    result = check(parse(source), "h100")
    text = format_findings(result, source)
    assert text.startswith(f"The TL checker reports {len(result.errors)} error(s)") and len(result.errors) == 2
    assert "Ks is not allocated in shared memory" in text and "Vs is not allocated in shared memory" in text and "fix them in order" in text
    lines = [int(l.split(",")[0][len("- line "):]) for l in text.splitlines() if l.startswith("- line ")]
    assert lines == sorted(lines)


def test_feedback_for_a_syntax_error():
    source = catalog.source("gqa_fwd").replace("and get S", "get S")
    with pytest.raises(TLSyntaxError) as info:
        parse(source)
    text = format_syntax_error(info.value, source)
    assert "does not parse: unexpected 'get'" in text and "Compute GEMM Qr, Kr^T get S" in text and "hint: expected" in text
    assert tl_feedback(source, syntax_error=info.value) == text


def test_feedback_for_numerical_failures_names_the_shape_and_distance():
    source = catalog.source("gqa_fwd").replace("Compute Multiply S, scale", "Compute Multiply S, 0.5")
    program = parse(source)
    reports = [run_and_compare(program, Shape.parse(s)) for s in ("1,2,1,37,53,16", "1,1,1,16,64,16")]
    text = format_runs(reports)
    assert "differ from the float64 reference on 2 of 2 shape(s)" in text
    assert "B=1 Hq=2 Hkv=1 Sq=37 Sk=53 D=16 Dv=16" in text
    assert f"O is off by {reports[0].err_o:.2e} against a tolerance of {reports[0].tolerance:.0e}" in text
    good = run_and_compare(parse(catalog.source("gqa_fwd")), Shape.parse("1,1,1,16,64,16"))
    assert "These shapes pass: B=1 Hq=1" in format_runs([reports[0], good])
    assert format_runs([good]) == "All 1 shape(s) match the float64 reference."
    prompt = feedback_prompt(tl_feedback(source, check=check(program, "h100"), runs=reports), language="tl", round=3)
    assert "(round 3)" in prompt and "O is off by" in prompt and "```tl" in prompt
