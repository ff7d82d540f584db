"""The tensor arguments every attention kernel takes: their shapes (in size names) and formats.

Layout is BHSD by dimension order; strides are the launcher's business. ``dtype`` names a header
alias (``qkv``, ``out``) or a fixed format: the log-sum-exp and ALiBi slopes are always fp32.
"""

from __future__ import annotations

ARG_SHAPES: dict[str, tuple[str, ...]] = {
    "q": ("B", "Hq", "Sq", "D"),
    "k": ("B", "Hkv", "Sk", "D"),
    "v": ("B", "Hkv", "Sk", "Dv"),
    "o": ("B", "Hq", "Sq", "Dv"),
    "lse": ("B", "Hq", "Sq"),
    "alibi_slopes": ("Hq",),
}
ARG_DTYPE: dict[str, str] = {"q": "qkv", "k": "qkv", "v": "qkv", "o": "out", "lse": "fp32", "alibi_slopes": "fp32"}
INPUTS = ("q", "k", "v", "alibi_slopes")


def arg_format(name: str, dtypes: dict[str, str]) -> str:
    """The format of argument ``name`` under a kernel's dtype header (fp32 when the alias is unset)."""
    alias = ARG_DTYPE[name]
    return dtypes.get(alias, alias if alias == "fp32" else "fp32")
