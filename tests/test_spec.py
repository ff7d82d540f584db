"""AttentionSpec: validation, defaults, derived values, dict/file round trips and the CLI."""

from __future__ import annotations

import argparse
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnforge.errors import SpecError
from attnforge.spec import (
    AttentionSpec,
    add_spec_arguments,
    alibi_slopes_for,
    spec_from_args,
)

# ---------------------------------------------------------------- valid specs


def test_mha_defaults_are_filled() -> None:
    s = AttentionSpec(heads=16, head_dim=128)
    assert (s.batch, s.kv_heads, s.seqlen_q, s.seqlen_k, s.head_dim_v) == (1, 16, 1024, 1024, 128)
    assert s.dtype == "bf16" and s.causal is False and s.causal_align == "bottom_right"
    assert s.scale == pytest.approx(1 / math.sqrt(128))
    assert s.variant == "mha" and s.group_size == 1 and not s.is_decode


def test_gqa_and_mqa() -> None:
    gqa = AttentionSpec(heads=32, kv_heads=8, head_dim=128, causal=True)
    assert gqa.variant == "gqa" and gqa.group_size == 4
    assert gqa.describe() == "gqa bf16 B=1 Hq=32/Hkv=8 Sq=1024 Sk=1024 D=128 causal(bottom_right)"
    mqa = AttentionSpec(heads=12, kv_heads=1, head_dim=64)
    assert mqa.variant == "mqa" and mqa.group_size == 12


def test_decode_and_192_128_head_dims() -> None:
    s = AttentionSpec(batch=4, heads=32, kv_heads=8, seqlen_q=1, seqlen_k=4096, head_dim=192, head_dim_v=128, dtype="torch.float16")
    assert s.is_decode and s.seqlen_k == 4096 and s.dtype == "fp16"
    assert (s.head_dim, s.head_dim_v) == (192, 128)
    assert s.flops_fwd == 2 * 4 * 32 * 1 * 4096 * (192 + 128)
    assert "Dv=128" in s.describe()


def test_flops_halved_only_for_square_causal() -> None:
    base = dict(heads=8, head_dim=64, seqlen_q=512)
    full = AttentionSpec(**base).flops_fwd
    assert full == 2 * 8 * 512 * 512 * 128
    assert AttentionSpec(**base, causal=True).flops_fwd == full // 2
    assert AttentionSpec(**base, seqlen_k=1024, causal=True).flops_fwd == 2 * full


@pytest.mark.parametrize("alias,canon", [("float16", "fp16"), ("half", "fp16"), ("BFloat16", "bf16"), ("torch.bfloat16", "bf16"),
                                         ("float", "fp32"), ("torch.float32", "fp32"), ("fp8e4m3", "fp8e4m3"), ("fp8e5m2", "fp8e5m2")])
def test_dtype_aliases(alias: str, canon: str) -> None:
    assert AttentionSpec(heads=1, head_dim=64, dtype=alias).dtype == canon


def test_torch_dtype_object_accepted() -> None:
    torch = pytest.importorskip("torch")
    assert AttentionSpec(heads=1, head_dim=64, dtype=torch.bfloat16).dtype == "bf16"


def test_mods_window_softcap_tf32_accepted() -> None:
    s = AttentionSpec(heads=8, head_dim=64, dtype="fp32", allow_tf32=True, causal=True, window_left=256, window_right=0,
                      softcap=30, score_mod=" score + 0.1 * (kv_idx - q_idx) ", mask_mod="q_idx - kv_idx < 128 or kv_idx < 4")
    assert s.softcap == 30.0 and isinstance(s.softcap, float)
    assert s.score_mod == "score + 0.1 * (kv_idx - q_idx)"
    assert "window(256,0)" in s.describe() and "tf32" in s.describe()
    AttentionSpec(heads=8, head_dim=64, score_mod="where(q_idx >= kv_idx, score, score * 0.5) + h / Hq")
    AttentionSpec(heads=8, head_dim=64, mask_mod="not (kv_idx > q_idx) and b < 2")


def test_numeric_int_types_normalized() -> None:
    np = pytest.importorskip("numpy")
    s = AttentionSpec(heads=np.int64(8), head_dim=np.int32(64), scale=np.float32(0.5))
    assert type(s.heads) is int and type(s.head_dim) is int and type(s.scale) is float


# ---------------------------------------------------------------- invalid fields

BASE = dict(heads=8, head_dim=64)

INVALID = [
    ("heads", dict(heads=0, head_dim=64), "0"),
    ("heads", dict(heads=True, head_dim=64), "True"),
    ("kv_heads", dict(heads=32, kv_heads=5, head_dim=64), "5"),
    ("kv_heads", dict(heads=8, kv_heads=16, head_dim=64), "16"),
    ("batch", dict(BASE, batch=True), "True"),
    ("batch", dict(BASE, batch=2.0), "2.0"),
    ("seqlen_q", dict(BASE, seqlen_q=0), "0"),
    ("seqlen_k", dict(BASE, seqlen_k="1024"), "'1024'"),
    ("head_dim", dict(heads=8, head_dim=8), "8"),
    ("head_dim", dict(heads=8, head_dim=1000), "1000"),
    ("head_dim_v", dict(BASE, head_dim_v=600), "600"),
    ("dtype", dict(BASE, dtype="int4"), "'int4'"),
    ("scale", dict(BASE, scale=0), "0"),
    ("scale", dict(BASE, scale=float("inf")), "inf"),
    ("scale", dict(BASE, scale="0.1"), "'0.1'"),
    ("causal", dict(BASE, causal=1), "1"),
    ("causal_align", dict(BASE, causal_align="center"), "'center'"),
    ("window_left", dict(BASE, window_left=-1), "-1"),
    ("window_right", dict(BASE, causal=True, window_right=3), "3"),
    ("alibi_slopes", dict(BASE, alibi_slopes=(0.5, 0.25)), "0.25"),
    ("alibi_slopes", dict(BASE, alibi_slopes=[float("nan")] * 8), "nan"),
    ("alibi_slopes", dict(BASE, alibi_slopes="geometric"), "'geometric'"),
    ("softcap", dict(BASE, softcap=-1), "-1"),
    ("softcap", dict(BASE, softcap=float("inf")), "inf"),
    ("score_mod", dict(BASE, score_mod="score * (q_idx"), "'score * (q_idx'"),
    ("score_mod", dict(BASE, score_mod="score + bias"), "'score + bias'"),
    ("score_mod", dict(BASE, score_mod="q_idx >= kv_idx"), "'q_idx >= kv_idx'"),
    ("score_mod", dict(BASE, score_mod="alibi_slopes[h] * score"), "alibi_slopes[h]"),
    ("mask_mod", dict(BASE, mask_mod="q_idx - kv_idx"), "'q_idx - kv_idx'"),
    ("mask_mod", dict(BASE, mask_mod="score > 0"), "'score > 0'"),
    ("mask_mod", dict(BASE, mask_mod="q_idx and kv_idx"), "'q_idx and kv_idx'"),
    ("allow_tf32", dict(BASE, dtype="fp8e4m3", allow_tf32=True), "True"),
    ("allow_tf32", dict(BASE, dtype="bf16", allow_tf32=True), "True"),
]


@pytest.mark.parametrize("field,kwargs,shown", INVALID, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(INVALID)])
def test_each_invalid_field_names_itself(field: str, kwargs: dict, shown: str) -> None:
    with pytest.raises(SpecError) as info:
        AttentionSpec(**kwargs)
    assert info.value.field == field
    assert field in str(info.value) and shown in str(info.value)


def test_kv_heads_hint_and_syntax_hint() -> None:
    with pytest.raises(SpecError, match="kv_heads must divide heads, e.g. 8 for 32"):
        AttentionSpec(heads=32, kv_heads=5, head_dim=64)
    with pytest.raises(SpecError, match="syntax error") as info:
        AttentionSpec(**BASE, score_mod="score +")
    assert info.value.hint and "expected" in info.value.hint
    with pytest.raises(SpecError, match="did you mean score"):
        AttentionSpec(**BASE, score_mod="scores * 2")


def test_unknown_key_suggests_the_close_one() -> None:
    with pytest.raises(SpecError) as info:
        AttentionSpec.from_dict({"heads": 8, "head_dim": 64, "kv_head": 2})
    assert info.value.field == "kv_head" and "did you mean 'kv_heads'" in str(info.value)


def test_missing_required_key() -> None:
    with pytest.raises(SpecError) as info:
        AttentionSpec.from_dict({"heads": 8})
    assert info.value.field == "head_dim" and "required" in str(info.value)


# ---------------------------------------------------------------- ALiBi


def _press_reference(n: int) -> list[float]:
    """The recipe from the ALiBi authors' code (ofirpress/attention_with_linear_biases)."""

    def pow2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + _press_reference(2 * closest)[0::2][: n - closest]


def test_auto_alibi_power_of_two() -> None:
    s = AttentionSpec.from_dict({"heads": 8, "head_dim": 64, "alibi_slopes": "auto"})
    assert s.alibi_slopes == tuple(2.0**-k for k in range(1, 9))


def test_auto_alibi_non_power_of_two() -> None:
    slopes = alibi_slopes_for(12)
    expected = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    assert slopes == pytest.approx(expected, rel=1e-12)
    for heads in (1, 3, 5, 6, 12, 20, 40, 64):
        assert alibi_slopes_for(heads) == pytest.approx(_press_reference(heads), rel=1e-12)


# ---------------------------------------------------------------- round trips

valid_specs = st.builds(
    lambda kv, group, sq, sk, d, dv, dtype, scale, causal, align, wl, wr, alibi, softcap, mods, tf32: AttentionSpec(
        batch=2, heads=kv * group, kv_heads=kv, seqlen_q=sq, seqlen_k=sk, head_dim=d, head_dim_v=dv, dtype=dtype,
        scale=scale, causal=causal,
        # A window with a top-left causal mask is only valid when Sq == Sk (windows use the bottom-right diagonal).
        causal_align=align if (wl is None and wr is None) or sk in (None, sq) else "bottom_right",
        window_left=wl, window_right=(0 if causal and wr else wr),
        alibi_slopes=alibi, softcap=softcap, score_mod=mods[0], mask_mod=mods[1], allow_tf32=tf32 and dtype == "fp32"),
    st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 3, 4]), st.integers(1, 8192), st.none() | st.integers(1, 8192),
    st.integers(16, 512), st.none() | st.integers(16, 512), st.sampled_from(["fp16", "bf16", "fp32", "fp8e4m3", "fp8e5m2"]),
    st.none() | st.floats(0.01, 4.0), st.booleans(), st.sampled_from(["bottom_right", "top_left"]),
    st.none() | st.integers(0, 4096), st.none() | st.integers(0, 4096), st.sampled_from([None, "auto"]),
    st.none() | st.floats(1.0, 100.0), st.sampled_from([(None, None), ("score * 0.5", "kv_idx <= q_idx"), ("tanh(score)", None)]),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(valid_specs)
def test_dict_round_trip(spec: AttentionSpec) -> None:
    d = spec.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert AttentionSpec.from_dict(d) == spec
    assert AttentionSpec.from_dict(json.loads(json.dumps(d))) == spec


def test_toml_and_json_files(tmp_path) -> None:
    top = tmp_path / "top.toml"
    top.write_text('heads = 32\nkv_heads = 8\nhead_dim = 128\ncausal = true\ndtype = "float16"\nalibi_slopes = "auto"\n')
    table = tmp_path / "table.toml"
    table.write_text('title = "llama"\n[spec]\nheads = 32\nkv_heads = 8\nhead_dim = 128\ncausal = true\ndtype = "fp16"\nalibi_slopes = "auto"\n')
    a, b = AttentionSpec.from_file(top), AttentionSpec.from_file(str(table))
    assert a == b and a.variant == "gqa" and len(a.alibi_slopes) == 32
    js = tmp_path / "s.json"
    js.write_text(json.dumps(a.to_dict()))
    assert AttentionSpec.from_file(js) == a


@pytest.mark.parametrize("name,text", [("s.yaml", "heads: 8"), ("bad.toml", "heads = "), ("bad.json", "{"), ("list.json", "[1]")])
def test_bad_files_are_spec_errors_on_file(tmp_path, name: str, text: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(SpecError) as info:
        AttentionSpec.from_file(p)
    assert info.value.field == "file"


def test_missing_file(tmp_path) -> None:
    with pytest.raises(SpecError) as info:
        AttentionSpec.from_file(tmp_path / "nope.toml")
    assert info.value.field == "file"


# ---------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnforge")
    add_spec_arguments(p)
    return p


def test_cli_flags_override_file(tmp_path) -> None:
    f = tmp_path / "s.toml"
    f.write_text('[spec]\nheads = 32\nkv_heads = 8\nhead_dim = 128\ncausal = true\nseqlen_q = 2048\n')
    ns = _parser().parse_args(["--spec", str(f), "--kv-heads", "4", "--dtype", "half", "--window", "512,0",
                               "--mask-mod", "kv_idx >= 0", "--alibi-slopes", "auto"])
    s = spec_from_args(ns)
    assert (s.heads, s.kv_heads, s.seqlen_q, s.dtype, s.causal) == (32, 4, 2048, "fp16", True)
    assert (s.window_left, s.window_right) == (512, 0) and len(s.alibi_slopes) == 32
    assert spec_from_args(_parser().parse_args(["--spec", str(f), "--no-causal"])).causal is False


def test_cli_without_file() -> None:
    ns = _parser().parse_args(["--heads", "8", "--head-dim", "64", "--window=-,16", "--alibi-slopes", "1,2,3,4,5,6,7,8",
                               "--causal-align", "top_left", "--dtype", "fp32", "--allow-tf32", "--score-mod", "score * 2"])
    s = spec_from_args(ns)
    assert (s.window_left, s.window_right) == (None, 16) and s.alibi_slopes == tuple(float(i) for i in range(1, 9))
    assert s.causal_align == "top_left" and s.allow_tf32 and s.score_mod == "score * 2"
    assert spec_from_args(_parser().parse_args(["--heads", "8", "--head-dim", "64", "--window", "inf,-1"])).window_left is None


@pytest.mark.parametrize("flag,value,field", [("--window", "256", "window"), ("--window", "a,b", "window"),
                                              ("--window=-5,0", None, "window"), ("--alibi-slopes", "x,y", "alibi_slopes")])
def test_cli_parse_errors(flag: str, value: str | None, field: str) -> None:
    argv = ["--heads", "8", "--head-dim", "64", flag] + ([value] if value is not None else [])
    with pytest.raises(SpecError) as info:
        spec_from_args(_parser().parse_args(argv))
    assert info.value.field == field


def test_cli_help_mentions_defaults() -> None:
    text = _parser().format_help()
    for needle in ("--kv-heads", "default 1024", "bottom_right", "top_left", "1/sqrt(head_dim)", "auto"):
        assert needle in text


# ---------------------------------------------------------------- fuzz

_expr_alphabet = st.sampled_from(list("scorebhqkvidx_01234.5+-*/%<>=!() ,\t#e") + ["and", "or", "not", "score", "q_idx", "kv_idx",
                                                                                    "where(", "tanh(", "max(", "[", "]", "\n"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=40), st.lists(_expr_alphabet, max_size=25).map("".join)), st.booleans())
def test_random_mod_text_only_spec_error(text: str, as_mask: bool) -> None:
    key = "mask_mod" if as_mask else "score_mod"
    try:
        AttentionSpec(**BASE, **{key: text})
    except SpecError as err:
        assert err.field == key


def test_deeply_nested_mod_is_spec_error() -> None:
    for text in ("(" * 3000 + "score" + ")" * 3000, "-" * 5000 + "score", " + ".join(["score"] * 3000)):
        try:
            AttentionSpec(**BASE, score_mod=text)
        except SpecError as err:
            assert err.field == "score_mod"


def test_top_left_causal_with_a_window_needs_equal_lengths() -> None:
    with pytest.raises(SpecError) as err:
        AttentionSpec(heads=2, head_dim=16, seqlen_q=8, seqlen_k=32, causal=True, causal_align="top_left", window_left=8)
    assert err.value.field == "causal_align"
    AttentionSpec(heads=2, head_dim=16, seqlen_q=32, seqlen_k=32, causal=True, causal_align="top_left", window_left=8)


def test_modifiers_cannot_index() -> None:
    with pytest.raises(SpecError) as err:
        AttentionSpec(heads=2, head_dim=16, score_mod="score + h[0]")
    assert err.value.field == "score_mod" and "indexes" in str(err.value)
