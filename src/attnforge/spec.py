"""``AttentionSpec``: the one description of the attention operator a kernel is generated for.

A spec is built from keyword arguments, a dict (``from_dict``), a ``.toml``/``.json`` file
(``from_file``) or command-line flags (``add_spec_arguments`` + ``spec_from_args``). Every
field is checked when the spec is built; an impossible value raises ``SpecError`` naming the
field, the value and what is allowed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import numbers
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from .dtypes import FORMATS, KERNEL_DTYPES, STORAGE_DTYPES
from .abi import scalar_values
from .errors import AttnforgeError, SpecError, shorten
from .reference import alibi_slopes_for
from .sizes import BM_MIN, GROUP_MAX, HEAD_DIM_MAX, HEAD_DIM_MIN, HEADS_MAX, INDEX_MAX
from .tl import nodes as n
from .tl.evaluate import MASK_MOD_NAMES, SCORE_MOD_NAMES, KindError, expr_kind
from .tl.parser import FUNCTIONS, parse_expr

# ---------------------------------------------------------------- constants

DTYPES: tuple[str, ...] = STORAGE_DTYPES
DTYPE_ALIASES: dict[str, str] = {
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16", "torch.half": "fp16", "f16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32", "torch.float": "fp32", "f32": "fp32",
    "fp8e4m3": "fp8e4m3", "fp8_e4m3": "fp8e4m3", "e4m3": "fp8e4m3", "float8_e4m3fn": "fp8e4m3", "torch.float8_e4m3fn": "fp8e4m3",
    "fp8e5m2": "fp8e5m2", "fp8_e5m2": "fp8e5m2", "e5m2": "fp8e5m2", "float8_e5m2": "fp8e5m2", "torch.float8_e5m2": "fp8e5m2",
}
CAUSAL_ALIGNS: tuple[str, ...] = ("bottom_right", "top_left")

# Modifier expressions read TL's own names, so a modifier drops into TL-Code as it is
# (Sq, Sk: query and key lengths; Hq, Hkv: query and key/value heads): SCORE_MOD_NAMES, MASK_MOD_NAMES.


# ---------------------------------------------------------------- helpers


def _check_int(field: str, value: object, low: int, high: int | None = None, *, hint: str | None = None, allowed: str | None = None) -> int:
    allowed = allowed or (f"an integer >= {low}" if high is None else f"an integer in {low}..{high}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        why = "a bool is not an integer" if isinstance(value, bool) else f"got {type(value).__name__}, need an integer"
        if isinstance(value, float) and value.is_integer():
            why += f" (write {int(value)}, not {value})"
        raise SpecError(field, value, allowed, hint=hint or why)
    value = int(value)
    if value < low or (high is not None and value > high):
        raise SpecError(field, value, allowed, hint=hint)
    return value


def _check_float(field: str, value: object, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SpecError(field, value, allowed, hint=f"got {type(value).__name__}, need a number")
    return float(value)


def _check_bool(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, value, "true or false", hint=f"got {type(value).__name__}; write true/false, not 1/0 or a string")
    return value


def _canonical_dtype(value: object) -> str:
    allowed = ", ".join(DTYPES) + " (aliases: float16/half, bfloat16, float32/float, torch.* names)"
    if isinstance(value, str):
        key = value.strip().lower()
    elif type(value).__module__.startswith("torch"):  # a torch.dtype object, without importing torch
        key = str(value).lower()
    else:
        raise SpecError("dtype", value, allowed, hint=f"got {type(value).__name__}; write the dtype name as text")
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    close = difflib.get_close_matches(key, list(DTYPE_ALIASES), n=1)
    raise SpecError("dtype", value, allowed, hint=f"did you mean {DTYPE_ALIASES[close[0]]!r}?" if close else None)


def _check_mod(field: str, value: object, names: tuple[str, ...], want_bool: bool) -> str | None:
    if value is None:
        return None
    funcs = ", ".join(sorted(FUNCTIONS))
    allowed = f"a one-line expression over {', '.join(names)} with functions {funcs}"
    if not isinstance(value, str):
        raise SpecError(field, value, allowed, hint=f"got {type(value).__name__}; write the expression as text")
    text = value.strip()
    try:
        expr = parse_expr(text, field)
    except AttnforgeError as err:
        raise SpecError(field, value, allowed, hint=f"syntax error: {err}") from None
    try:
        indexed = n.indexes(expr)
        if indexed:
            raise SpecError(field, value, allowed, hint=f"{indexed[0].name}[...] indexes; a modifier reads only the scalars {', '.join(names)}")
        unknown = sorted(n.expr_names(expr) - set(names) - {"inf"})
        if unknown:
            guesses = [g for u in unknown for g in difflib.get_close_matches(u, names, n=1)]
            hint = f"unknown name(s) {shorten(', '.join(unknown), 120)}; allowed names: {', '.join(names)}"
            raise SpecError(field, value, allowed, hint=hint + (f" (did you mean {shorten(', '.join(guesses), 80)}?)" if guesses else ""))
        kind = expr_kind(expr)
    except KindError as err:
        raise SpecError(field, value, allowed, hint=str(err)) from None
    except RecursionError:
        raise SpecError(field, value, allowed, hint="expression nested too deeply") from None
    if want_bool and kind != "bool":
        raise SpecError(field, value, "a boolean expression (a comparison, and/or/not) over " + ", ".join(names),
                        hint="true keeps the key, e.g. 'q_idx - kv_idx < 256'")
    if not want_bool and kind == "bool":
        raise SpecError(field, value, "a numeric expression over " + ", ".join(names),
                        hint="a score_mod returns the new score, e.g. 'score + 0.1 * (kv_idx - q_idx)'; use mask_mod to drop keys")
    _check_literals(field, value, expr, allowed)
    return text


def _literals(expr: n.Expr) -> list[int | float]:
    if isinstance(expr, n.Num):
        return [expr.value]
    if isinstance(expr, n.Unary):
        return _literals(expr.operand)
    if isinstance(expr, n.Binary):
        return _literals(expr.left) + _literals(expr.right)
    if isinstance(expr, (n.Call, n.Index)):
        return [x for a in expr.args for x in _literals(a)]
    return []


def _check_literals(field: str, value: str, expr: n.Expr, allowed: str) -> None:
    """Every number in a modifier must fit the kernel's arithmetic: int32 integers, fp32 reals."""
    fp32_max = FORMATS["fp32"].max_finite
    for x in _literals(expr):
        if isinstance(x, int) and abs(x) > INDEX_MAX:
            raise SpecError(field, value, allowed + f"; integers within +-{INDEX_MAX} (int32)",
                            hint=f"{shorten(str(x), 60)} does not fit the kernel's int32 index arithmetic" + (f"; for a real number write {float(x):.6g}" if abs(x) <= fp32_max else ""))
        if isinstance(x, float) and not abs(x) <= fp32_max:
            raise SpecError(field, value, allowed + f"; numbers within +-{fp32_max:.8g} (fp32)",
                            hint=f"{shorten(repr(x), 60)} is beyond fp32, the kernel's score arithmetic")


def _check_index_limits(spec: "AttentionSpec") -> None:
    """Sizes a kernel can index with int32 (each size, the elements of one head, the program
    instances of its grid) and the host can hold (heads, and query heads per K/V head, which
    verification interprets in float64)."""
    hint = "kernels index with int32; split the work into several calls"
    for name in ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k"):
        if getattr(spec, name) > INDEX_MAX:
            raise SpecError(name, getattr(spec, name), f"an integer in 1..{INDEX_MAX} (2**31 - 1)", hint=hint)
    if spec.heads > HEADS_MAX:
        raise SpecError("heads", spec.heads, f"an integer in 1..{HEADS_MAX} (2**16)",
                        hint="one ALiBi slope per head is built and held on the host; models use at most a few hundred heads; split the heads into several calls")
    group = spec.heads // spec.kv_heads
    if group > GROUP_MAX:
        raise SpecError("kv_heads", spec.kv_heads, f"at least heads / {GROUP_MAX} = {-(-spec.heads // GROUP_MAX)} (heads / kv_heads <= {GROUP_MAX})",
                        hint=f"verification interprets 2 x heads / kv_heads = {2 * group} query heads in float64 at once, more than the interpreter holds")
    width = max(spec.head_dim, spec.head_dim_v)
    for name in ("seqlen_q", "seqlen_k"):
        if getattr(spec, name) * width > INDEX_MAX + 1:
            raise SpecError(name, getattr(spec, name), f"at most {(INDEX_MAX + 1) // width} with head dims {width} (one head's seq x head_dim elements <= 2**31)",
                            hint=hint)
    # The kernel's grid: one program instance per BM_MIN query rows of each (batch, head), int32-numbered.
    rows = spec.heads * -(-spec.seqlen_q // BM_MIN)
    if rows > INDEX_MAX:
        raise SpecError("seqlen_q", spec.seqlen_q, f"at most {BM_MIN * (INDEX_MAX // spec.heads)} with heads={spec.heads} "
                        f"(heads x cdiv(seqlen_q, {BM_MIN}) program instances <= 2**31 - 1, int32)", hint=hint)
    if spec.batch * rows > INDEX_MAX:
        raise SpecError("batch", spec.batch, f"at most {INDEX_MAX // rows} with heads={spec.heads}, seqlen_q={spec.seqlen_q} "
                        f"(batch x heads x cdiv(seqlen_q, {BM_MIN}) program instances <= 2**31 - 1, int32)", hint=hint)


# ---------------------------------------------------------------- the spec


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """What to build: ``O = softmax(mods(scale * Q @ K^T)) @ V`` for one attention operator.

    Shapes: Q is (batch, heads, seqlen_q, head_dim), K is (batch, kv_heads, seqlen_k, head_dim),
    V is (batch, kv_heads, seqlen_k, head_dim_v), O is (batch, heads, seqlen_q, head_dim_v).
    Query head ``h`` reads KV head ``h // (heads // kv_heads)``: MHA when kv_heads == heads,
    MQA when kv_heads == 1, GQA otherwise. Decode is ``seqlen_q == 1``.

    A score is built in this order (FlashAttention's): ``s = scale * q.k``; then
    ``softcap * tanh(s / softcap)`` when ``softcap`` is set; then the ALiBi bias
    ``-slope[h] * |diag - kv_idx|``; then ``score_mod``; then keys are dropped by ``causal``,
    the window and ``mask_mod`` (a dropped key gets probability 0; a query that keeps no key
    outputs zeros).

    Causal alignment (``causal_align``), with ``diag = i + seqlen_k - seqlen_q``:

    * ``"bottom_right"`` (default): query ``i`` sees keys ``j <= diag``, as FlashAttention >= 2.1;
      the last query sees every key, which is what a KV-cache decode (seqlen_q = 1) needs.
    * ``"top_left"``: query ``i`` sees keys ``j <= i``, as ``torch...scaled_dot_product_attention(is_causal=True)``.

    Both are the same when ``seqlen_q == seqlen_k``.

    Sliding window: query ``i`` sees keys ``j`` in ``[diag - window_left, diag + window_right]``
    (always measured from the bottom-right diagonal ``diag``); ``None`` leaves that side unbounded.
    With ``causal=True`` the window may only look back: ``window_right`` must be None or 0.

    Fields: ``batch`` (>= 1), ``heads`` (query heads, required), ``kv_heads`` (None -> heads; must
    divide heads), ``seqlen_q``, ``seqlen_k`` (None -> seqlen_q), ``head_dim`` (16..512, required),
    ``head_dim_v`` (None -> head_dim), ``dtype`` (fp16, bf16, fp32, fp8e4m3, fp8e5m2), ``scale``
    (None -> 1/sqrt(head_dim)), ``causal``, ``causal_align``, ``window_left``/``window_right``,
    ``alibi_slopes`` (one per query head, or "auto" for the standard ones), ``softcap`` (> 0),
    ``score_mod`` (expression over score, b, h, q_idx, kv_idx, Sq, Sk, Hq, Hkv),
    ``mask_mod`` (boolean expression over b, h, q_idx, kv_idx, Sq, Sk, Hq, Hkv; true keeps the
    key), ``allow_tf32`` (fp32 only: GEMMs may use tf32 tensor cores).
    """

    batch: int = 1
    heads: int
    kv_heads: int | None = None
    seqlen_q: int = 1024
    seqlen_k: int | None = None
    head_dim: int
    head_dim_v: int | None = None
    dtype: str = "bf16"
    scale: float | None = None
    causal: bool = False
    causal_align: str = "bottom_right"
    window_left: int | None = None
    window_right: int | None = None
    alibi_slopes: tuple[float, ...] | None = None
    softcap: float | None = None
    score_mod: str | None = None
    mask_mod: str | None = None
    allow_tf32: bool = False

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)

        put("batch", _check_int("batch", self.batch, 1))
        heads = _check_int("heads", self.heads, 1)
        put("heads", heads)
        kv_heads = heads if self.kv_heads is None else _check_int("kv_heads", self.kv_heads, 1)
        if heads % kv_heads:
            small = [d for d in range(1, min(heads, 4096) + 1) if heads % d == 0][:16]
            divisors = ", ".join(map(str, small)) + (", ..." if len(small) == 16 or heads > 4096 else "")
            raise SpecError("kv_heads", kv_heads, f"a divisor of heads={heads}: {divisors}",
                            hint="kv_heads must divide heads, e.g. 8 for 32")
        put("kv_heads", kv_heads)
        seqlen_q = _check_int("seqlen_q", self.seqlen_q, 1)
        put("seqlen_q", seqlen_q)
        put("seqlen_k", seqlen_q if self.seqlen_k is None else _check_int("seqlen_k", self.seqlen_k, 1))
        head_dim = _check_int("head_dim", self.head_dim, HEAD_DIM_MIN, HEAD_DIM_MAX)
        put("head_dim", head_dim)
        head_dim_v = head_dim if self.head_dim_v is None else _check_int("head_dim_v", self.head_dim_v, HEAD_DIM_MIN, HEAD_DIM_MAX)
        put("head_dim_v", head_dim_v)
        _check_index_limits(self)
        dtype = _canonical_dtype(self.dtype)
        put("dtype", dtype)

        if self.scale is None:
            scale = 1.0 / math.sqrt(head_dim)
        else:
            scale = _check_float("scale", self.scale, "a finite non-zero number (default 1/sqrt(head_dim))")
            if not math.isfinite(scale) or scale == 0.0:
                raise SpecError("scale", self.scale, "a finite non-zero number (default 1/sqrt(head_dim))",
                                hint=f"leave it unset for 1/sqrt({head_dim}) = {1.0 / math.sqrt(head_dim):.6g}")
        put("scale", scale)

        causal = _check_bool("causal", self.causal)
        if not isinstance(self.causal_align, str) or self.causal_align.strip().lower() not in CAUSAL_ALIGNS:
            raise SpecError("causal_align", self.causal_align, " or ".join(CAUSAL_ALIGNS),
                            hint="bottom_right: FlashAttention / KV-cache decode; top_left: torch SDPA is_causal")
        put("causal_align", self.causal_align.strip().lower())

        for side in ("window_left", "window_right"):
            value = getattr(self, side)
            if value is not None:
                negative = isinstance(value, int) and not isinstance(value, bool) and value < 0
                put(side, _check_int(side, value, 0, INDEX_MAX, allowed=f"None (unbounded) or an integer in 0..{INDEX_MAX} (2**31 - 1, int32)",
                                     hint="use None (not -1) for an unbounded side" if negative else
                                     "kernels read a window side as int32; one of seqlen_q + seqlen_k or more keeps every key, as None (unbounded) does"))
        windowed = self.windowed
        if causal and windowed and self.causal_align == "top_left" and self.seqlen_q != self.seqlen_k:
            # The window is measured from the bottom-right diagonal; with a top-left causal mask and
            # Sq != Sk the two diagonals differ and the result is rarely what was meant.
            raise SpecError("causal_align", "top_left", "bottom_right when a window is set and seqlen_q != seqlen_k",
                            hint="windows are measured from the bottom-right diagonal i + seqlen_k - seqlen_q; use causal_align = bottom_right")
        if causal and self.window_right not in (None, 0):
            raise SpecError("window_right", self.window_right, "None or 0 when causal=True",
                            hint="a causal query sees no key right of its diagonal; drop window_right or set causal=false")

        put("alibi_slopes", self._checked_alibi(heads))

        if self.softcap is not None:
            softcap = _check_float("softcap", self.softcap, "None or a finite number > 0")
            if not math.isfinite(softcap) or softcap <= 0:
                raise SpecError("softcap", self.softcap, "None or a finite number > 0",
                                hint="scores become softcap * tanh(score / softcap); Gemma 2 uses 50.0")
            put("softcap", softcap)

        put("score_mod", _check_mod("score_mod", self.score_mod, SCORE_MOD_NAMES, want_bool=False))
        put("mask_mod", _check_mod("mask_mod", self.mask_mod, MASK_MOD_NAMES, want_bool=True))

        if _check_bool("allow_tf32", self.allow_tf32) and dtype != "fp32":
            raise SpecError("allow_tf32", True, f"false unless dtype is fp32 (dtype is {dtype})",
                            hint="tf32 only changes fp32 GEMMs; drop allow_tf32 or set dtype=fp32")

    def _checked_alibi(self, heads: int) -> tuple[float, ...] | None:
        value = self.alibi_slopes
        allowed = f"None, \"auto\", or {heads} finite numbers (one per query head)"
        if value is None:
            return None
        if isinstance(value, str):
            if value.strip().lower() == "auto":
                return alibi_slopes_for(heads)
            raise SpecError("alibi_slopes", value, allowed, hint="write \"auto\" for the standard geometric slopes")
        if isinstance(value, Mapping) or not hasattr(value, "__iter__"):
            raise SpecError("alibi_slopes", value, allowed, hint=f"got {type(value).__name__}; give a list")
        slopes = tuple(value)
        for s in slopes:
            if isinstance(s, bool) or not isinstance(s, numbers.Real) or not math.isfinite(float(s)):
                raise SpecError("alibi_slopes", value, allowed, hint=f"{s!r} is not a finite number")
        if len(slopes) != heads:
            raise SpecError("alibi_slopes", value, allowed, hint=f"got {len(slopes)} slope(s) for heads={heads}")
        return tuple(float(s) for s in slopes)

    # ------------------------------------------------------------ derived

    @property
    def variant(self) -> str:
        """'mha' (kv_heads == heads), 'mqa' (kv_heads == 1 < heads) or 'gqa'."""
        if self.kv_heads == self.heads:
            return "mha"
        return "mqa" if self.kv_heads == 1 else "gqa"

    @property
    def group_size(self) -> int:
        """Query heads per KV head: heads // kv_heads."""
        return self.heads // self.kv_heads  # type: ignore[operator]

    @property
    def windowed(self) -> bool:
        """True where a sliding window bounds the keys on either side (window_left or window_right set)."""
        return self.window_left is not None or self.window_right is not None

    @property
    def is_decode(self) -> bool:
        """True for one query per sequence (seqlen_q == 1), the KV-cache decode step."""
        return self.seqlen_q == 1

    @property
    def flops_fwd(self) -> int:
        """Nominal forward FLOPs: ``2*B*Hq*Sq*Sk*(head_dim + head_dim_v)`` (the two GEMMs, 2 flops per MAC).

        Halved when causal and Sq == Sk (about half the score matrix is kept). Windows, masks and the
        other causal shapes are not discounted, so this is the figure FlashAttention benchmarks report.
        """
        total = 2 * self.batch * self.heads * self.seqlen_q * self.seqlen_k * (self.head_dim + self.head_dim_v)  # type: ignore[operator]
        return total // 2 if self.causal and self.seqlen_q == self.seqlen_k else total

    def runtime_scalars(self) -> dict[str, int | float]:
        """Values of the kernel's runtime scalars (``abi.RUNTIME_SCALARS``) this spec sets."""
        return scalar_values(self)

    def describe(self) -> str:
        """One line, e.g. ``gqa bf16 B=1 Hq=32/Hkv=8 Sq=1024 Sk=1024 D=128 causal(bottom_right)``."""
        parts = [self.variant, self.dtype, f"B={self.batch}", f"Hq={self.heads}/Hkv={self.kv_heads}",
                 f"Sq={self.seqlen_q}", f"Sk={self.seqlen_k}", f"D={self.head_dim}"]
        if self.head_dim_v != self.head_dim:
            parts.append(f"Dv={self.head_dim_v}")
        if self.causal:
            parts.append(f"causal({self.causal_align})")
        if self.windowed:
            side = lambda v: "-" if v is None else str(v)  # noqa: E731
            parts.append(f"window({side(self.window_left)},{side(self.window_right)})")
        if not math.isclose(self.scale, 1.0 / math.sqrt(self.head_dim), rel_tol=1e-12):  # type: ignore[arg-type]
            parts.append(f"scale={self.scale:.6g}")
        if self.alibi_slopes is not None:
            parts.append("alibi")
        if self.softcap is not None:
            parts.append(f"softcap={self.softcap:g}")
        if self.score_mod is not None:
            parts.append(f"score_mod[{self.score_mod}]")
        if self.mask_mod is not None:
            parts.append(f"mask_mod[{self.mask_mod}]")
        if self.allow_tf32:
            parts.append("tf32")
        return " ".join(parts)

    # ------------------------------------------------------------ dicts and files

    def to_dict(self) -> dict[str, Any]:
        """Every canonical field with its normalized value (JSON-serializable; alibi_slopes as a list)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if out["alibi_slopes"] is not None:
            out["alibi_slopes"] = list(out["alibi_slopes"])
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AttentionSpec":
        """Build a spec from canonical keys; unknown keys raise SpecError with a "did you mean" hint."""
        if not isinstance(d, Mapping):
            raise SpecError("spec", d, "a table/dict of spec fields", hint=f"got {type(d).__name__}")
        names = [f.name for f in fields(cls)]
        for key in d:
            if key not in names:
                guess = difflib.get_close_matches(str(key).replace("-", "_").lower(), names, n=1)
                hint = f"did you mean {guess[0]!r}?" if guess else "fields: " + ", ".join(names)
                raise SpecError(str(key), d[key], "a spec field: " + ", ".join(names), hint=f"unknown key; {hint}")
        for key in ("heads", "head_dim"):
            if d.get(key) is None:
                raise SpecError(key, d.get(key), "an integer >= 1" if key == "heads" else f"an integer in {HEAD_DIM_MIN}..{HEAD_DIM_MAX}",
                                hint=f"{key} is required")
        return cls(**dict(d))

    @classmethod
    def from_file(cls, path: str | Path) -> "AttentionSpec":
        """Load a spec from a ``.toml`` (fields at top level or under ``[spec]``) or ``.json`` file."""
        return cls.from_dict(load_spec_dict(path))


def load_spec_dict(path: str | Path) -> dict[str, Any]:
    """The raw field dict of a ``.toml``/``.json`` spec file (the ``spec`` table when there is one)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise SpecError("file", str(path), "a .toml or .json file", hint=f"unknown suffix {p.suffix or '(none)'!r}")
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise SpecError("file", str(path), "a readable .toml or .json file", hint=err.strerror or str(err)) from None
    try:
        data = tomllib.loads(raw.decode("utf-8")) if suffix == ".toml" else json.loads(raw)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SpecError("file", str(path), f"valid {suffix[1:].upper()}", hint=shorten(str(err))) from None
    except RecursionError:
        raise SpecError("file", str(path), f"a {suffix[1:].upper()} table of spec fields",
                        hint="it nests tables or arrays too deeply to read; a spec is one flat table of fields") from None
    except ValueError as err:  # e.g. an integer of more than 4300 digits
        raise SpecError("file", str(path), f"valid {suffix[1:].upper()}", hint=shorten(str(err))) from None
    if not isinstance(data, dict):
        raise SpecError("file", str(path), "a table/object of spec fields", hint=f"the file holds a {type(data).__name__}")
    if isinstance(data.get("spec"), dict):
        # Metadata (a title, other tables) may sit beside [spec]; a spec field, or a near miss of
        # one (a typo), in the wrong place would otherwise be dropped without a word.
        names = [f.name for f in fields(AttentionSpec)]
        stray = sorted(k for k in data if k != "spec" and (k in names or difflib.get_close_matches(k, names, n=1, cutoff=0.8)))
        if stray:
            near = difflib.get_close_matches(stray[0], names, n=1, cutoff=0.8)
            what = f"{stray[0]!r} looks like the spec field {near[0]!r}" if near and near[0] != stray[0] else f"{stray[0]!r} is a spec field"
            raise SpecError(stray[0], data[stray[0]], "spec fields under [spec] only, when a [spec] table exists",
                            hint=f"{what}: move it under [spec] (TOML keys after [spec] belong to it)")
        return dict(data["spec"])
    return data


# ---------------------------------------------------------------- command line

_INT_FLAGS = ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim", "head_dim_v")


def add_spec_arguments(parser: argparse.ArgumentParser, *, kernels: bool = False) -> None:
    """Add ``--spec FILE`` and one flag per spec field; flags given override the file's values.

    ``kernels=True`` is for commands that generate a kernel: ``--dtype`` lists the formats kernels
    are generated for (``dtypes.KERNEL_DTYPES``), and ``spec_from_args`` refuses any other."""
    parser.set_defaults(spec_kernel_dtypes=kernels)
    g = parser.add_argument_group("attention spec", "What to build. Flags given on the command line override the --spec file.")
    g.add_argument("--spec", metavar="FILE", default=None,
                   help="Spec file, .toml (fields at top level or under [spec]) or .json, with the field names below "
                        "(kv_heads, head_dim_v, ...). A file written from to_dict() holds derived values (kv_heads, seqlen_k, "
                        "head_dim_v, scale) explicitly, so they do not follow a --heads/--head-dim override.")
    g.add_argument("--batch", type=int, default=None, metavar="B", help="Batch size (default 1).")
    g.add_argument("--heads", type=int, default=None, metavar="HQ", help="Number of query heads (required unless in --spec).")
    g.add_argument("--kv-heads", type=int, default=None, metavar="HKV",
                   help="Number of key/value heads; must divide --heads. Default: --heads (MHA); 1 gives MQA, anything between GQA.")
    g.add_argument("--seqlen-q", type=int, default=None, metavar="SQ", help="Query length (default 1024; 1 is a decode step).")
    g.add_argument("--seqlen-k", type=int, default=None, metavar="SK", help="Key/value length (default: --seqlen-q; the KV-cache length for decode).")
    g.add_argument("--head-dim", type=int, default=None, metavar="D",
                   help=f"Q/K head dimension, any integer in {HEAD_DIM_MIN}..{HEAD_DIM_MAX} (required unless in --spec).")
    g.add_argument("--head-dim-v", type=int, default=None, metavar="DV", help="V/output head dimension (default: --head-dim; e.g. 128 with D=192).")
    g.add_argument("--dtype", default=None, metavar="DTYPE",
                   help=("Q/K/V/O element type kernels are generated for: " + ", ".join(f"{d} (default)" if d == "bf16" else d for d in KERNEL_DTYPES)
                         + "; aliases float16/half, bfloat16, float32/float. fp8e4m3 and fp8e5m2 are planned, not generated yet.") if kernels else
                        ("Q/K/V/O element type: fp16, bf16 (default), fp32, fp8e4m3, fp8e5m2; aliases float16/half, bfloat16, float32/float. "
                         "Kernels are generated for " + ", ".join(KERNEL_DTYPES) + " (fp8 is planned)."))
    g.add_argument("--scale", type=float, default=None, help="Score scale applied to Q@K^T (default 1/sqrt(head_dim)); finite, non-zero.")
    g.add_argument("--causal", action="store_true", default=None, help="Causal masking (default off); alignment set by --causal-align.")
    g.add_argument("--no-causal", dest="causal", action="store_false", default=None, help="Turn causal masking off (overrides the --spec file).")
    g.add_argument("--causal-align", choices=CAUSAL_ALIGNS, default=None,
                   help="bottom_right (default): query i sees keys j <= i + Sk - Sq, as FlashAttention >= 2.1 and KV-cache decode need; "
                        "top_left: j <= i, as torch SDPA is_causal. Identical when Sq == Sk.")
    g.add_argument("--window", default=None, metavar="L,R",
                   help="Sliding window: query i sees keys within L before and R after its diagonal (i + Sk - Sq). "
                        "'-', '-1', 'inf' or 'none' leaves a side unbounded; with --causal R must be 0 or unbounded. "
                        "Write --window=-,0 (with '=') when the value starts with '-'. Default: no window.")
    g.add_argument("--alibi-slopes", default=None, metavar="auto|S1,S2,...",
                   help="ALiBi bias per query head: 'auto' for the standard geometric slopes (Press et al.), "
                        "or one comma-separated slope per head. Default: none.")
    g.add_argument("--softcap", type=float, default=None, help="Logit soft-capping: scores become softcap * tanh(score / softcap); > 0. Default: none.")
    g.add_argument("--score-mod", default=None, metavar="EXPR",
                   help="Expression giving the new score, over " + ", ".join(SCORE_MOD_NAMES)
                        + "; functions " + ", ".join(sorted(FUNCTIONS)) + ". E.g. 'score + 0.5 * (kv_idx - q_idx)'. Default: none.")
    g.add_argument("--mask-mod", default=None, metavar="EXPR",
                   help="Boolean expression over " + ", ".join(MASK_MOD_NAMES)
                        + " that is true for keys to keep, e.g. 'q_idx - kv_idx < 128 or kv_idx < 4'. Default: none.")
    g.add_argument("--allow-tf32", action="store_true", default=None, help="fp32 only: let GEMMs use tf32 tensor cores (default off).")


def _parse_window(text: str) -> tuple[int | None, int | None]:
    allowed = "L,R with integers >= 0, or '-'/'-1'/'inf'/'none' for an unbounded side"
    parts = [p.strip().lower() for p in str(text).split(",")]
    if len(parts) != 2:
        raise SpecError("window", text, allowed, hint="give both sides, e.g. 256,0 or -,0")
    out: list[int | None] = []
    for p in parts:
        if p in ("-", "-1", "inf", "none"):
            out.append(None)
            continue
        try:
            v = int(p)
        except ValueError:
            raise SpecError("window", text, allowed, hint=f"{shorten(repr(p), 80)} is not an integer") from None
        if v < 0:
            raise SpecError("window", text, allowed, hint=f"{shorten(str(v), 80)} is negative; use '-' for unbounded")
        out.append(v)
    return out[0], out[1]


def _parse_alibi(text: str) -> str | list[float]:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return [float(s) for s in text.split(",")]
    except ValueError:
        raise SpecError("alibi_slopes", text, "'auto' or comma-separated numbers, one per query head",
                        hint="e.g. --alibi-slopes auto") from None


def spec_from_args(ns: argparse.Namespace) -> AttentionSpec:
    """Build a spec from parsed flags: the --spec file's fields, overridden by every flag that was given."""
    path = getattr(ns, "spec", None)
    d: dict[str, Any] = load_spec_dict(path) if path else {}
    simple = (*_INT_FLAGS, "dtype", "scale", "causal", "causal_align", "softcap", "score_mod", "mask_mod", "allow_tf32")
    for name in simple:
        value = getattr(ns, name, None)
        if value is not None:
            d[name] = value
    window = getattr(ns, "window", None)
    if window is not None:
        d["window_left"], d["window_right"] = _parse_window(window)
    alibi = getattr(ns, "alibi_slopes", None)
    if alibi is not None:
        d["alibi_slopes"] = _parse_alibi(alibi)
    spec = AttentionSpec.from_dict(d)
    note = kernel_dtype_note(spec)
    if note is not None and getattr(ns, "spec_kernel_dtypes", False):
        raise SpecError("dtype", spec.dtype, ", ".join(KERNEL_DTYPES) + " (what kernels are generated for today)", hint=note)
    return spec


def kernel_dtype_note(spec: AttentionSpec) -> str | None:
    """Why no kernel is generated for the spec's dtype (a valid spec may name fp8), or None."""
    if spec.dtype in KERNEL_DTYPES:
        return None
    return (f"{spec.dtype} kernels are not generated yet: fp8 is planned (it needs per-tensor scales the spec does not carry); "
            f"generate with --dtype {' / '.join(KERNEL_DTYPES)}")


__all__ = [
    "AttentionSpec", "DTYPES", "CAUSAL_ALIGNS", "SCORE_MOD_NAMES", "MASK_MOD_NAMES",
    "alibi_slopes_for", "load_spec_dict", "add_spec_arguments", "spec_from_args", "kernel_dtype_note",
]
