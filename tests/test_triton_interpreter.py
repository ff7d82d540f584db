"""Triton's CPU interpreter with attnforge's bf16 fixes: bf16 dots multiply values, fp32 -> bf16
rounds to nearest even, other dtypes are untouched, and the ``interpreting()`` switch is clean."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnforge.errors import AttnforgeError
from attnforge.backends.triton.interpreter import (
    bf16_round,
    bf16_widen,
    install_interpreter_fixes,
    interpreting,
)
from triton.runtime.interpreter import InterpretedFunction, InterpreterBuilder

N = 64  # elements per cast launch (one program)


def _define_kernels() -> SimpleNamespace:
    # Defined inside a function so that @triton.jit runs while the caller holds interpreting().
    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
        rm = tl.arange(0, M)
        rn = tl.arange(0, N)
        rk = tl.arange(0, K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))

    @triton.jit
    def to_bf16_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(tl.bfloat16))

    @triton.jit
    def to_bf16_rtz_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(tl.bfloat16, fp_downcast_rounding="rtz"))

    @triton.jit
    def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        # Stores x's values into y's element type: the implicit cast path.
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))

    return SimpleNamespace(dot=dot_kernel, to_bf16=to_bf16_kernel, to_bf16_rtz=to_bf16_rtz_kernel, copy=copy_kernel)


@pytest.fixture(scope="module")
def kernels() -> SimpleNamespace:
    with interpreting():
        return _define_kernels()


def launch(kernel, *args) -> None:
    with interpreting():  # launch under the knob too (tl.constexpr_function reads it at call time)
        kernel[(1,)](*args)


def bits16(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


def assert_bf16_bits_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit-for-bit, except that any NaN matches any NaN (torch's CPU path canonicalises NaN to 0xFFFF)."""
    g, w = bits16(got), bits16(want)
    nan_g, nan_w = torch.isnan(got).numpy(), torch.isnan(want).numpy()
    np.testing.assert_array_equal(nan_g, nan_w)
    np.testing.assert_array_equal(g[~nan_w], w[~nan_w])


def check_dot(kernels: SimpleNamespace, dtype: torch.dtype, m: int, k: int, n: int) -> None:
    gen = torch.Generator().manual_seed(m * 1000 + k * 10 + n)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    c = torch.empty(m, n, dtype=torch.float32)
    launch(kernels.dot, a, b, c, m, n, k)
    ref = a.double() @ b.double()
    # fp32 accumulation error is bounded relative to |a| @ |b|, not to the (possibly cancelling) sum.
    scale = a.double().abs() @ b.double().abs()
    err = (c.double() - ref).abs()
    assert bool((err <= 1e-5 * scale + 1e-30).all()), f"max rel err {(err / scale).max().item():.3g}"


@pytest.mark.parametrize(("m", "k", "n"), [(16, 16, 16), (32, 64, 16)])
def test_bf16_dot_multiplies_values(kernels: SimpleNamespace, m: int, k: int, n: int) -> None:
    check_dot(kernels, torch.bfloat16, m, k, n)


@pytest.mark.parametrize(("m", "k", "n"), [(16, 16, 16), (32, 64, 16)])
def test_fp16_dot_unaffected(kernels: SimpleNamespace, m: int, k: int, n: int) -> None:
    check_dot(kernels, torch.float16, m, k, n)


def special_fp32() -> torch.Tensor:
    """Ties (exactly halfway between two bf16s, odd and even), near-ties, NaNs, infs, overflow, -0, subnormals."""
    rng = np.random.default_rng(0)
    hi = rng.integers(0, 0x7F7F, size=8, dtype=np.uint32) << 16
    bits = np.concatenate([
        hi | 0x8000, (hi | 0x10000) | 0x8000,  # ties with even and with odd kept bit
        hi | 0x7FFF, hi | 0x8001,  # just below / above a tie
        np.array([
            0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,  # 1 + 2^-8 ties, both signs
            0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F80FFFF,  # NaNs, incl. payload only in the low bits
            0x7F800000, 0xFF800000,  # +-inf
            0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF,  # overflow to inf / tie to inf / stays finite
            0x80000000, 0x00000000, 0x00000001, 0x00008000, 0x00018000, 0x807FFFFF,  # zeros, subnormals
        ], dtype=np.uint32),
    ]).astype(np.uint32)
    return torch.from_numpy(bits.view(np.float32).copy())


def run_cast(kernels: SimpleNamespace, kernel, x: torch.Tensor) -> torch.Tensor:
    padded = torch.zeros(N, dtype=torch.float32)
    padded[: x.numel()] = x
    y = torch.empty(N, dtype=torch.bfloat16)
    launch(kernel, padded, y, N)
    return y[: x.numel()]


@pytest.mark.parametrize("path", ["to_bf16", "copy"])
def test_fp32_to_bf16_special_values(kernels: SimpleNamespace, path: str) -> None:
    x = special_fp32()
    assert x.numel() <= N
    assert_bf16_bits_equal(run_cast(kernels, getattr(kernels, path), x), x.to(torch.bfloat16))


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, N, elements=st.floats(width=32, allow_nan=True, allow_infinity=True)))
def test_fp32_to_bf16_matches_torch(kernels: SimpleNamespace, values: np.ndarray) -> None:
    x = torch.from_numpy(values.copy())
    assert_bf16_bits_equal(run_cast(kernels, kernels.to_bf16, x), x.to(torch.bfloat16))


def test_fp32_to_bf16_rtz_truncates_but_keeps_nan(kernels: SimpleNamespace) -> None:
    x = special_fp32()
    got = run_cast(kernels, kernels.to_bf16_rtz, x)
    want_bits = (x.numpy().view(np.uint32) >> 16).astype(np.uint16)
    nan = np.isnan(x.numpy())
    assert torch.isnan(got).numpy().tolist() == nan.tolist()
    np.testing.assert_array_equal(bits16(got)[~nan], want_bits[~nan])


def test_bf16_to_fp32_is_exact(kernels: SimpleNamespace) -> None:
    bits = np.array([0x0001, 0x007F, 0x8001, 0x3F80, 0xC049, 0x7F80, 0xFF80, 0x7F7F, 0x0000, 0x8000],
                    dtype=np.uint16)
    x = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
    padded = torch.zeros(N, dtype=torch.bfloat16)
    padded[: x.numel()] = x
    y = torch.empty(N, dtype=torch.float32)
    launch(kernels.copy, padded, y, N)
    np.testing.assert_array_equal(y[: x.numel()].numpy().view(np.uint32), bits.astype(np.uint32) << 16)


def test_bf16_round_matches_torch_on_random_bits() -> None:
    bits = np.random.default_rng(1).integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    want = bits16(torch.from_numpy(x.copy()).to(torch.bfloat16))
    nan = np.isnan(x)
    got = bf16_round(x)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(bf16_widen(bf16_round(x[nan]))).all()


def test_interpreting_restores_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = triton.knobs.runtime
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    saved = dict(vars(runtime))
    try:
        vars(runtime).pop("interpret", None)  # no Python-side override: value comes from the (unset) env
        assert runtime.interpret is False
        with interpreting():
            assert runtime.interpret is True

            @triton.jit
            def noop(x_ptr):
                pass

        assert isinstance(noop, InterpretedFunction)
        assert runtime.interpret is False
        assert "interpret" not in vars(runtime)
        assert "TRITON_INTERPRET" not in os.environ

        runtime.interpret = False  # explicit override, also survives an exception and nesting
        with pytest.raises(RuntimeError), interpreting():
            with interpreting():
                pass
            assert runtime.interpret is True
            raise RuntimeError("boom")
        assert vars(runtime)["interpret"] is False
        assert os.environ.get("TRITON_INTERPRET") == "0"
    finally:
        vars(runtime).clear()
        vars(runtime).update(saved)


def test_install_twice_is_harmless(kernels: SimpleNamespace) -> None:
    install_interpreter_fixes()
    patched = (InterpreterBuilder.create_dot, InterpreterBuilder.cast_impl, InterpreterBuilder.create_fp_to_fp)
    install_interpreter_fixes()
    assert (InterpreterBuilder.create_dot, InterpreterBuilder.cast_impl, InterpreterBuilder.create_fp_to_fp) == patched
    check_dot(kernels, torch.bfloat16, 16, 16, 16)


def test_missing_internals_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(InterpreterBuilder, "create_dot")
    with pytest.raises(AttnforgeError, match=rf"Triton {triton.__version__}.*create_dot"):
        install_interpreter_fixes()
