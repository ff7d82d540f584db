"""The CUDA translation manual (backends/cuda/manual.py), made from the backend's own translation
table, prelude and ABI; and the LLM path's refusal to have a model write CUDA (no static gate
for it yet). No nvcc needed."""

from __future__ import annotations

import re
import typing

import pytest

from attnforge import AttentionSpec, get_target
from attnforge.abi import SIZE_ARGS
from attnforge.backends.cuda.emit import KernelEmitter
from attnforge.backends.cuda.manual import helpers, translation_manual
from attnforge.backends.cuda.prelude import PRELUDE
from attnforge.backends.cuda.table import TRANSLATION_TABLE
from attnforge.cli import main
from attnforge.errors import AttnforgeError
from attnforge.llm.pipeline import LLMOptions
from attnforge.tl import nodes as n


def test_the_table_has_a_row_for_every_tl_statement_the_emitter_translates():
    # The Hopper form's statements are refused before emission (translated by the gluon backend only).
    hopper = {c.__name__ for c in n.HOPPER_STATEMENTS}
    kinds = {c.__name__ for c in typing.get_args(n.Stmt)} - hopper
    assert {kind for kind, _, _ in TRANSLATION_TABLE} == kinds
    assert all(hasattr(KernelEmitter, f"s_{kind}") for kind in kinds)
    assert not any(hasattr(KernelEmitter, f"s_{kind}") for kind in hopper) and len(hopper) == 4


def test_the_manual_is_made_from_the_table_the_prelude_and_the_abi():
    text = translation_manual()
    for _, tl, cuda in TRANSLATION_TABLE:
        assert f"| `{tl}` | {cuda} |" in text
    # every device helper of the prelude, with its whole signature
    assert len(helpers()) == len(re.findall(r"__device__ __forceinline__", PRELUDE))
    for _, sig, _ in helpers():
        assert f"- `{sig}`" in text
    assert "- `void af_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)`: D += A(16x16, row)" in text
    assert "- `template <int N> void af_cp_wait()`: at most N groups still in flight" in text
    assert ", ".join(f"`int {s}`" for s in SIZE_ARGS) in text and "// attnforge-cuda-meta: {json}" in text
    assert "sm_75 (Turing)" in text and "sm_80 and newer" in text  # without a target: both paths


def test_the_manual_for_one_target_names_its_path_and_instructions():
    t4 = translation_manual(get_target("t4"))
    assert "-arch=sm_75" in t4 and "the Turing path" in t4 and "- mma.sync.m16n8k8: fp16 -> fp16/fp32" in t4
    assert "m16n8k16:" not in t4 and "bf16 ->" not in t4
    h100 = translation_manual(get_target("h100"))
    assert "-arch=sm_90" in h100 and "no wgmma" in h100 and "- mma.sync.m16n8k16: bf16 -> fp32" in h100


def test_the_manual_abi_matches_a_real_translation():
    from attnforge.backends import get_backend
    from attnforge.plan.builtin import plans_for

    cuda, t = get_backend("cuda"), get_target("a100")
    spec = AttentionSpec(heads=4, kv_heads=2, head_dim=64, dtype="fp16", causal=True)
    p = next(plans_for(cuda, spec, t))
    src = cuda.translate(p.program, head_dim=64, head_dim_v=64).source
    params = src.split('attn_fwd(\n', 1)[1].split(") {", 1)[0]
    assert params.index("q_ptr") < params.index("long long stride_q0") < params.index("int B,") < params.index("float scale")
    assert PRELUDE.strip() in src  # the helpers the manual lists are the ones every file starts with


def test_cli_prints_the_manual(capsys):
    assert main(["backends", "--manual", "cuda", "--target", "a10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# How TL maps onto CUDA C++") and "-arch=sm_86" in out
    assert main(["backends", "--manual", "triton"]) == 2
    assert "no translation manual for 'triton'" in capsys.readouterr().err


@pytest.mark.parametrize("mode, translate, refused", [
    ("tl", "llm", "needs a local CUDA GPU"), ("both", "llm", "needs a local CUDA GPU"), ("direct", "builtin", "writes Triton modules only"),
    ("tl", "builtin", None), ("both", "builtin", None)])
def test_what_the_llm_path_takes_with_the_cuda_backend(mode, translate, refused, monkeypatch):
    """The model may translate its TL to CUDA (gated, then verified on a GPU); the direct baseline stays Triton."""
    import attnforge.llm.pipeline as pipeline

    monkeypatch.setattr(pipeline, "gpu_present", lambda: False)
    options = LLMOptions("openai:m", mode=mode, translate=translate, backend="cuda")
    if refused:
        with pytest.raises(AttnforgeError, match=refused) as err:
            options.check()
        assert "--backend triton" in err.value.hint
    else:
        options.check()
    monkeypatch.setattr(pipeline, "gpu_present", lambda: True)  # with a GPU to verify on, the model may write CUDA
    if translate == "llm":
        options.check()
    LLMOptions("openai:m", mode=mode, translate=translate, backend="triton").check()


def test_cli_refuses_translate_llm_with_the_cuda_backend_without_a_gpu(capsys, tmp_path, monkeypatch):
    import attnforge.llm.pipeline as pipeline

    monkeypatch.setattr(pipeline, "gpu_present", lambda: False)
    code = main(["generate", "--target", "h100", "--heads", "4", "--head-dim", "32", "--dtype", "fp16", "--backend", "cuda",
                 "--llm", "openai:m", "--translate", "llm", "--out", str(tmp_path / "out")])
    assert code == 2 and "--translate llm with the cuda backend" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
