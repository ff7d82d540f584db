"""Run ``@triton.jit`` kernels on CPU through Triton's interpreter, with its bf16 bugs fixed.

How Triton 3.6 decides to interpret: ``triton.jit``'s decorator (``triton/runtime/jit.py``) checks
``triton.knobs.runtime.interpret`` *when it decorates a function* and, if true, returns an
``InterpretedFunction`` instead of a ``JITFunction``. So a kernel is interpreted iff it was defined
(its module imported or exec'd) while the knob was on; flipping the knob later changes nothing for
kernels that already exist. ``tl.constexpr_function`` reads the knob again at call time, so launch
interpreted kernels inside :func:`interpreting` too.

The interpreter (``triton/runtime/interpreter.py``) keeps bfloat16 data as ``np.uint16`` bit
patterns and gets three things wrong, which :func:`install_interpreter_fixes` patches on the
``InterpreterBuilder`` class (the module-level ``interpreter_builder`` is an instance of it):

* ``create_dot`` hands the uint16 bit patterns straight to ``np.matmul``, multiplying integers.
* ``cast_impl`` (behind ``create_fp_trunc``/``create_fp_ext``, i.e. ``x.to(tl.bfloat16)`` and a
  store of fp32 into a bf16 pointer) converts fp32 -> bf16 with ``_convert_float(..., None)``,
  which truncates, turns NaNs with low payload bits into inf, and mangles subnormals; its
  bf16 -> fp32 direction mangles subnormals too.
* ``create_fp_to_fp`` (the ``fp_downcast_rounding="rtz"`` path) has the same NaN/subnormal faults.

One more patch makes interpretation work in a process that imported Triton with the interpreter
off: ``triton.language``'s own ``@jit`` helpers (``tl.cdiv``, ``tl.max``, ``tl.sum``, ...) were then
decorated as ``JITFunction``, whose ``__call__`` only raises (the compiler never calls it; it reads
the function's source). An interpreted kernel that calls one now runs it as an
``InterpretedFunction`` instead, exactly as if Triton had been imported with ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...errors import AttnforgeError

_PATCH_MARK = "_attnforge_fix"


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even); return the bf16 bit patterns as uint16.

    Overflow rounds to +-inf, as RNE does; a NaN stays a NaN (sign kept, made quiet so that dropping
    the low payload bits cannot turn it into inf).
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to even; a carry out of the
    # mantissa bumps the exponent, which is exactly right (up to and including inf).
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    return np.where(nan, ((bits >> 16) | np.uint32(0x0040)).astype(np.uint16), rounded).reshape(np.shape(x))


def bf16_truncate(x: np.ndarray) -> np.ndarray:
    """Round float32 toward zero to bfloat16 bit patterns (uint16), keeping NaNs NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    # A NaN whose payload lives only in the low 16 bits would otherwise become inf: set the quiet bit.
    quiet = np.where(np.isnan(x), np.uint32(0x0040), np.uint32(0))
    return ((bits >> 16) | quiet).astype(np.uint16).reshape(np.shape(x))


def bf16_widen(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> the float32 values they encode (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _missing(what: str) -> AttnforgeError:
    import triton

    return AttnforgeError(
        f"Triton {triton.__version__} has no {what}; attnforge's interpreter fixes were written against Triton 3.6",
        where="attnforge.runtime.triton_interpreter",
        hint="pin triton==3.6.x or update attnforge/runtime/triton_interpreter.py for this version",
    )


def _require(obj: Any, name: str, owner: str) -> Any:
    if not hasattr(obj, name):
        raise _missing(f"{owner}.{name}")
    return getattr(obj, name)


def _interpret_knob() -> Any:
    """The descriptor behind ``triton.knobs.runtime.interpret`` (it carries the env var name in ``.key``)."""
    import triton

    knob = vars(type(triton.knobs.runtime)).get("interpret")
    if knob is None or not hasattr(knob, "key"):
        raise _missing("knob triton.knobs.runtime.interpret")
    return knob


def _mark(fn: Callable[..., Any]) -> Callable[..., Any]:
    setattr(fn, _PATCH_MARK, True)
    return fn


def install_interpreter_fixes() -> None:
    """Patch Triton's CPU interpreter so bf16 ``tl.dot`` and fp32 <-> bf16 casts are numerically right.

    Idempotent. Raises :class:`AttnforgeError` if Triton's internals are not the expected ones.
    """
    import triton.language as tl

    try:
        from triton.runtime import interpreter as interp
    except ImportError as exc:  # pragma: no cover - depends on the installed Triton
        raise _missing(f"module triton.runtime.interpreter ({exc})") from exc

    builder_cls = _require(interp, "InterpreterBuilder", "triton.runtime.interpreter")
    handle_cls = _require(interp, "TensorHandle", "triton.runtime.interpreter")
    ir = _require(interp, "_ir", "triton.runtime.interpreter")
    rtz = _require(_require(ir, "ROUNDING_MODE", "triton._C.libtriton.ir"), "RTZ", "ir.ROUNDING_MODE")
    orig_dot = _require(builder_cls, "create_dot", "InterpreterBuilder")
    orig_cast = _require(builder_cls, "cast_impl", "InterpreterBuilder")
    orig_fp_to_fp = _require(builder_cls, "create_fp_to_fp", "InterpreterBuilder")
    _interpret_knob()
    if all(getattr(f, _PATCH_MARK, False) for f in (orig_dot, orig_cast, orig_fp_to_fp)):
        return

    def widen(h: Any) -> Any:
        return handle_cls(bf16_widen(h.data), tl.float32) if h.dtype.scalar == tl.bfloat16 else h

    # Why: the original matmuls bf16's uint16 bit patterns as integers. Widening both operands to
    # their float32 values (exact) and reusing the original (fp32 accumulate into d) fixes it;
    # fp16/fp32/fp8 operands pass through untouched.
    @_mark
    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        return orig_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    # Why: fp32 -> bf16 here truncated (and broke NaN/subnormals); bf16 -> fp32 broke subnormals.
    # fp_trunc/fp_ext (``.to()``, implicit casts on store) all land here; other casts are untouched.
    @_mark
    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        s, d = src.dtype.scalar, dst_type.scalar
        if s == tl.float32 and d == tl.bfloat16:
            return handle_cls(bf16_round(src.data), d)
        if s == tl.bfloat16 and d == tl.float32:
            return handle_cls(bf16_widen(src.data), d)
        return orig_cast(self, src, dst_type)

    # Why: the explicit-rounding path (``fp_downcast_rounding="rtz"``) has the same NaN/subnormal
    # faults for fp32 -> bf16; fp8 conversions go through here too and are left alone.
    @_mark
    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            fn = bf16_truncate if rounding_mode == rtz else bf16_round
            return handle_cls(fn(src.data), dst_type.scalar)
        return orig_fp_to_fp(self, src, dst_type, rounding_mode)

    builder_cls.create_dot = create_dot
    builder_cls.cast_impl = cast_impl
    builder_cls.create_fp_to_fp = create_fp_to_fp
    _interpret_jit_device_calls(interp)


def _interpret_jit_device_calls(interp: Any) -> None:
    """Let interpreted kernels call ``JITFunction``s (see the module docstring)."""
    from triton.runtime.jit import JITFunction

    if getattr(JITFunction.__call__, _PATCH_MARK, False):
        return
    interpreted: dict[Any, Any] = {}

    @_mark
    def device_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.fn not in interpreted:
            interpreted[self.fn] = interp.InterpretedFunction(self.fn)
        # InterpretedFunction.__call__ patches triton.language for the callee and never undoes it;
        # a later real compile in this process would then see interpreter builtins. Undo it here.
        scope = interp._patch_lang(self.fn)
        try:
            return interpreted[self.fn].rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    JITFunction.__call__ = device_call


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    """Turn ``triton.knobs.runtime.interpret`` on (after installing the fixes); restore it on exit.

    ``@triton.jit`` functions defined (imported, exec'd) inside the block become interpreted ones.
    Setting the knob also writes ``TRITON_INTERPRET`` to ``os.environ``; both are put back. The
    knob is process-wide: the block holds ``KNOB_LOCK``, and code in this process that defines
    native kernels while another thread may be interpreting takes the same lock (attnforge's
    module loader does), so neither sees the other's setting.
    """
    import triton

    install_interpreter_fixes()
    with KNOB_LOCK:
        yield from _interpret_on(triton.knobs.runtime)


KNOB_LOCK = threading.RLock()


def _interpret_on(runtime: Any) -> Iterator[None]:
    key = _interpret_knob().key
    overridden = "interpret" in vars(runtime)  # an explicit Python-side value, vs. read from the env
    previous = vars(runtime).get("interpret")
    env_before = os.environ.get(key)
    runtime.interpret = True
    try:
        yield
    finally:
        if overridden:
            runtime.interpret = previous
        else:
            del runtime.interpret
        if env_before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = env_before
