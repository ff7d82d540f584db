"""Prompt templates: versions, strict rendering, and the facts each prompt carries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnforge.backends import get_backend
from attnforge.llm import LLMError, prompts
from attnforge.llm.facts import module_contract, spec_facts, target_facts
from attnforge.llm.optimize import optimize_prompt
from attnforge.spec import AttentionSpec
from attnforge.targets import TARGETS, get_target
from attnforge.tl import catalog
from attnforge.tl.parser import parse

REPO = Path(__file__).resolve().parents[1]
GQA = AttentionSpec(heads=32, kv_heads=8, head_dim=128, dtype="bf16", causal=True, seqlen_q=1000, seqlen_k=1500)
WINDOWED = AttentionSpec(heads=8, head_dim=64, dtype="fp16", window_left=256, window_right=0, softcap=30.0, seqlen_q=1)


def test_every_template_has_its_version_line():
    names = prompts.prompt_names()
    assert names == ["direct", "feedback", "optimize", "stage1_params", "stage1_sketch", "stage2_translate", "stage2_translate_cuda"]
    for name in names:
        text = prompts.template_text(name)
        assert text.startswith(f"<!-- attnforge prompt {name}, version ")
        assert prompts.prompt_version(name) >= 1


def test_unknown_template():
    with pytest.raises(LLMError, match="no prompt template 'stage3'") as info:
        prompts.template_text("stage3")
    assert "stage1_sketch" in info.value.hint


def test_render_is_strict():
    needed = prompts.placeholders("feedback")
    assert needed == ["what", "round", "feedback", "fence"]
    with pytest.raises(LLMError, match="missing fence"):
        prompts.render("feedback", what="TL program", round=1, feedback="x")
    with pytest.raises(LLMError, match="unknown colour"):
        prompts.render("feedback", what="TL program", round=1, feedback="x", fence="tl", colour="red")
    # One pass: braces in the substituted text are left alone.
    text = prompts.render("feedback", what="TL program", round=2, feedback="d = {{fence}} {'a': 1}", fence="tl")
    assert "d = {{fence}} {'a': 1}" in text and "```tl" in text and "(round 2)" in text


@pytest.mark.parametrize("target", ["t4", "a100", "h100", "b200", "v100"])
@pytest.mark.parametrize("spec", [GQA, WINDOWED], ids=["gqa_causal", "window_softcap_decode"])
def test_every_template_renders_with_the_facts(spec, target):
    t = get_target(target)
    program = catalog.source("gqa_causal_fwd")
    rendered = {
        "stage1_sketch": prompts.sketch_prompt(spec, t),
        "stage1_params": prompts.params_prompt(spec, target, program),
        "stage2_translate": prompts.translate_prompt(spec, t, program),
        "stage2_translate_cuda": prompts.translate_cuda_prompt(spec, t, program, get_backend("cuda").translate(
            parse(program), head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source),
        "direct": prompts.direct_prompt(spec, t),
        "feedback": prompts.feedback_prompt("line 3: TL200 ...", language="tl", round=1),
        "optimize": optimize_prompt(spec, t, current=program, language="tl", best_ms=1.25, compile_report="- attn_fwd: 96 registers",
                                    ceilings="- measured: 1.25 ms", history="(nothing yet)"),
    }
    assert sorted(rendered) == prompts.prompt_names()
    for name, text in rendered.items():
        assert not re.search(r"\{\{\s*\w+\s*\}\}", text), name  # every placeholder filled
        assert text.startswith(f"<!-- attnforge prompt {name}, version ")
        if name == "feedback":
            continue
        assert spec.describe() in text, name
        assert t.product in text and t.sm in text, name
        assert f"at most {t.smem_per_block_optin / 1024:g} KiB per block" in text, name
        assert all(i.name.split(".m")[0] in text for i in t.mma)
    manual = (REPO / "docs" / "TL.md").read_text()
    assert manual in rendered["stage1_sketch"] and manual in rendered["stage2_translate"]
    assert program.strip() in rendered["stage2_translate"] and program.strip() in rendered["stage1_params"]
    assert manual in rendered["stage2_translate_cuda"] and program.strip() in rendered["stage2_translate_cuda"]
    assert "# The translation table" in rendered["stage2_translate_cuda"] and "af_mma(" in rendered["stage2_translate_cuda"]
    assert f"target {t.name}" in rendered["stage1_sketch"]
    assert f"HEAD_DIM = {spec.head_dim}" in rendered["direct"] and "def launch(q, k, v, o, lse, *, scale" in rendered["direct"]


def test_examples_follow_the_spec():
    assert prompts.examples_for(GQA) == ["gqa_fwd", "gqa_causal_fwd"]
    assert prompts.examples_for(WINDOWED) == ["gqa_fwd", "sliding_window_fwd", "softcap_causal_fwd", "decode_split_kv"]
    text = prompts.sketch_prompt(WINDOWED, "a100")
    for name in prompts.examples_for(WINDOWED):
        assert catalog.source(name).strip() in text


def test_target_facts_name_limits_and_tensor_cores():
    t4 = target_facts("t4")
    assert "Tesla T4" in t4 and "sm_75" in t4 and "64 KiB per block" in t4
    assert "mma.sync m16n8k8: fp16 -> fp16/fp32" in t4
    assert "No tensor cores for: bf16, fp32" in t4 and "cp.async no, TMA no" in t4
    h100 = target_facts(TARGETS["h100"])
    assert "wgmma.mma_async m64n256k16: bf16 -> fp32" in h100 and "TMA yes" in h100 and "compile for sm_90a" in h100
    assert "65536 32-bit registers per SM, at most 255 per thread" in h100
    assert "No tensor cores" not in h100
    assert "tcgen05.mma" in target_facts("b200")


def test_spec_facts_and_contract():
    facts = spec_facts(WINDOWED)
    assert WINDOWED.describe() in facts and '"window_left": 256' in facts and "softcap = 30.0" in facts
    contract = module_contract(WINDOWED)
    assert "def launch(q, k, v, o, lse, *, scale, softcap, window_left, window_right)" in contract
    assert "torch.float16" in contract and "q (B, Hq, Sq, D)" in contract
    alibi = module_contract(AttentionSpec(heads=4, head_dim=32, alibi_slopes="auto"))
    assert "alibi_slopes" in alibi and "alibi_slopes (Hq)" in alibi


def test_manual_is_package_data_and_matches_docs():
    assert prompts.tl_manual() == (REPO / "docs" / "TL.md").read_text()
