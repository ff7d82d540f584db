"""The CUDA backend's split-KV decode programs without a GPU: the planner's two-kernel programs
(packed GQA or not, decode-verify with a causal mask, window/ALiBi/softcap) translate with every
TL statement as a ``// TL:`` comment, compile for sm_75/80/90 without spills, and the launcher's
host side (split count, scratch shapes, grid extents) is the one the Triton launcher and the TL
interpreter apply. Native verification needs a GPU: ``python -m attnforge.backends.cuda.gpucheck``."""

from __future__ import annotations

import math
import re

import pytest
from test_backend_cuda import _fitting, cuda  # the CUDA tests' helpers: plan, translate, compile, fit

from attnforge import AttentionSpec, get_target
from attnforge.backends.cuda.kernel import grid_blocks, launch_values, scratch_shapes
from attnforge.backends.cuda.module import read_meta
from attnforge.plan.builtin import plans_for
from attnforge.splits import split_count

pytestmark = pytest.mark.skipif(cuda.versions()["nvcc"] == "missing", reason="nvcc not installed")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _decode(**fields) -> AttentionSpec:
    return AttentionSpec(**{"batch": 2, "heads": 32, "kv_heads": 8, "seqlen_q": 1, "seqlen_k": 1000, "head_dim": 128, "dtype": "bf16", **fields})


PACKED = _decode()  # Sq = 1, G = 4: one row block holds the 4 query heads of a K/V head
VERIFY = _decode(seqlen_q=4, causal=True, dtype="fp16")  # decode-verify: G * Sq = 16 packed rows, causal
UNPACKED = _decode(kv_heads=32)  # G = 1: a row block per query head
FEATURES = _decode(window_left=256, window_right=0, alibi_slopes="auto", softcap=30.0)  # h_idx reads ALiBi slopes per packed row

CASES = [
    (PACKED, ("a100", "h100")),
    (_decode(head_dim=64, dtype="fp16"), ("t4", "a100", "h100")),
    (VERIFY, ("t4", "a100", "h100")),
    (UNPACKED, ("a100", "h100")),
    (_decode(kv_heads=32, head_dim=64, dtype="fp16"), ("t4", "a100")),
    (FEATURES, ("a100", "h100")),
]


@pytest.mark.parametrize("spec, target", [(s, t) for s, targets in CASES for t in targets])
def test_decode_programs_compile_without_spills(spec, target, tmp_path):
    p, src, reports = _fitting(spec, target, tmp_path)
    assert p.kind == "decode" and [r.kernel for r in reports] == ["attn_decode_partial", "attn_decode_combine"]
    for r in reports:
        assert r.spill_bytes == 0 and r.sm == get_target(target).sm
    sass = reports[0].notes[1]
    assert ("HMMA.1688 x" if target == "t4" else "HMMA.16816 x") in sass
    assert (tmp_path / f"attn_decode_combine.{target}.cubin").is_file()


@pytest.mark.parametrize("spec", [PACKED, VERIFY, UNPACKED, FEATURES])
def test_both_kernels_with_every_tl_statement_as_a_comment(spec):
    t = get_target("a100")
    p = next(plans_for(cuda, spec, t))
    src = cuda.translate(p.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl").source
    header = ("#", "kernel", "target", "computes", "dtype", "param", "launch", "scalar", "grid", "scratch")
    stmts = [line.strip() for line in p.source.splitlines() if line.strip() and not line.startswith(header)]
    comments = [line.split("// TL: ", 1)[1] for line in src.splitlines() if "// TL: " in line]
    assert stmts == comments
    for kernel in ("attn_decode_partial", "attn_decode_combine"):
        assert f'__global__ void __launch_bounds__(32) {kernel}(' in src
    # the split count is an int argument after the scalars; scratch are fp32 pointers with strides
    assert re.search(r"float scale,\n(\s+(int|float) \w+,\n)*\s+int NSPLIT\) \{", src) and "float* __restrict__ o_part_ptr" in src and "long long stride_lse_part3" in src
    meta = read_meta(src)
    assert [k["launch"] for k in meta["kernels"]] == [["NSPLIT"], ["NSPLIT"]]
    assert {sc["name"]: sc["format"] for sc in meta["scratch"]} == {"o_part": "fp32", "lse_part": "fp32"}


def test_packed_rows_are_head_and_position_pairs_masked_by_the_views_rows():
    t = get_target("a100")
    p = next(plans_for(cuda, FEATURES, t))
    src = cuda.translate(p.program, head_dim=128, head_dim_v=128).source
    partial, combine = src.split("// ---- kernel attn_decode_combine")
    # Q rows: head hk * G + r % G (stride of the head dim), position r // G (stride of the sequence)
    assert "Q + (long long)((af_vr) % (Hq / Hkv)) * stride_q1 + (long long)((af_vr) / (Hq / Hkv)) * stride_q2 + af_col" in partial
    assert "af_rows = ((Hq / Hkv) * Sq) - af_row0" in partial  # rows past G * Sq are zero-filled
    # masks and ALiBi see each packed row's position (q_idx) and head (h_idx)
    assert "const int af_qi = ((af_vr) / (Hq / Hkv));" in partial and "const int af_hi = ((hk * (Hq / Hkv)) + ((af_vr) % (Hq / Hkv)));" in partial
    assert "alibi_slopes_ptr[(long long)(af_hi) * stride_alibi_slopes0]" in partial
    # partial results to scratch (b, s, head, position), stores masked by the view's rows
    assert "if (af_row < ((Hq / Hkv) * Sq) && af_col < 128)" in partial
    assert "af_store2(O + (long long)((af_row) % (Hq / Hkv)) * stride_o_part2 + (long long)((af_row) / (Hq / Hkv)) * stride_o_part3 + af_col" in partial
    assert "LSE[(long long)((af_row) % (Hq / Hkv)) * stride_lse_part2 + (long long)((af_row) / (Hq / Hkv)) * stride_lse_part3]" in partial
    # the combine: every split, read into the fragment layout, merged in natural units, -inf weighs 0
    assert "for (int s = af_lo1, af_it1 = 0; s < af_hi1; ++s, ++af_it1)" in combine
    assert "af_load2(af_at + af_col)" in combine and "lse_s[af_mt][af_r] = af_in ?" in combine
    assert "const float af_safe = af_mx == -INFINITY ? 0.0f : af_mx;" in combine and "const float af_p = af_exp(af_x - af_safe);" in combine
    assert "o_w[af_mt][af_nt][af_e] = (o_s[af_mt][af_nt][af_e] * w[af_mt][af_e >> 1]);" in combine
    assert "af_quad_sum" not in combine  # every lane of a quad holds the whole row sum: no reduction
    assert "af_store2(O + (long long)((af_row) % (Hq / Hkv)) * stride_o1 + (long long)((af_row) / (Hq / Hkv)) * stride_o2 + af_col" in combine


def test_unpacked_decode_keeps_plain_rows():
    t = get_target("a100")
    p = next(plans_for(cuda, UNPACKED, t))
    src = cuda.translate(p.program, head_dim=128, head_dim_v=128).source
    assert not re.search(r"\baf_(vr|hi)\b", src)
    assert "af_store2(O + (long long)af_row * stride_o_part3 + af_col" in src  # o_part (B, Hq, NSPLIT, Sq, Dv): rows are positions


@pytest.mark.parametrize("spec", [PACKED, VERIFY, UNPACKED, _decode(batch=64, seqlen_k=4096)])
@pytest.mark.parametrize("sm_count", [4, 108, 132])
@pytest.mark.parametrize("call_sk", [None, 0, 1, 100_000])  # one kernel serves every KV length: the host recomputes per call
def test_host_side_split_count_scratch_and_grids(spec, sm_count, call_sk):
    t = get_target("a100")
    p = next(plans_for(cuda, spec, t))
    meta = read_meta(cuda.translate(p.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source)
    B, Hq, Hkv, Sq, Dv = spec.batch, spec.heads, spec.kv_heads, spec.seqlen_q, spec.head_dim_v
    Sk = spec.seqlen_k if call_sk is None else call_sk
    sizes = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Sk": Sk}
    G, BM, BN = Hq // Hkv, p.params["BM"], p.params["BN"]
    packed = G > 1
    rows, groups = (G * Sq, Hkv) if packed else (Sq, Hq)
    # the split-KV rule, as the Triton launcher applies it (attnforge.splits)
    nsplit = split_count(B * groups * math.ceil(rows / BM), math.ceil(Sk / BN), sm_count)
    values = launch_values(meta, sizes, sm_count)
    assert values == {"NSPLIT": nsplit} and nsplit >= 1
    env = {**sizes, **values}
    want = {"o_part": ((B, nsplit, Hq, Sq, Dv) if packed else (B, Hq, nsplit, Sq, Dv)),
            "lse_part": ((B, nsplit, Hq, Sq) if packed else (B, Hq, nsplit, Sq))}
    shapes = scratch_shapes(meta, env)
    assert {k: s for k, (s, _) in shapes.items()} == want and {str(d) for _, d in shapes.values()} == {"torch.float32"}
    partial, combine = meta["kernels"]
    assert grid_blocks(partial, env) == B * groups * nsplit * math.ceil(rows / BM)
    assert grid_blocks(combine, env) == B * groups * math.ceil(rows / BM)


def test_decode_and_packed_specs_are_accepted():
    for spec in (PACKED, VERIFY, UNPACKED, FEATURES, _decode(seqlen_q=16, causal=True, dtype="fp16")):
        assert cuda.unsupported(spec, get_target("a100")) is None
    assert cuda.unsupported(_decode(head_dim=64, dtype="fp16"), get_target("t4")) is None
    why = cuda.unsupported(_decode(head_dim=256), get_target("a100"))  # the packed combine would spill
    assert why is not None and "--backend triton" in why


def test_auto_builds_decode_with_cuda_on_turing(monkeypatch):
    # the split-KV decode kernels verified natively on the H200 on both code paths (2026-12-01)
    import torch

    from attnforge.backends import choose_backend, choose_backend_and_reason

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # on sm_75 with a GPU here, auto tries cuda first
    t4 = get_target("t4")
    decode = AttentionSpec(heads=8, kv_heads=2, head_dim=64, dtype="fp16", seqlen_q=1, seqlen_k=512)
    backend, why = choose_backend_and_reason("auto", decode, t4)
    assert backend.name == "cuda" and "chosen by auto" in why, why
    prefill = AttentionSpec(heads=8, kv_heads=2, head_dim=64, dtype="fp16", seqlen_q=512, seqlen_k=512)
    assert choose_backend("auto", prefill, t4).name == "cuda"
