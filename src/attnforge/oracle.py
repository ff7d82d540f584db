"""The float64 reference of what a *spec* asks for, at one problem size.

Every gate judges against the spec, never against what a program or kernel claims about itself:
the interpret step (a TL program in float64), kernel verification (a compiled kernel), and
``attnforge verify``. Modifiers read the sizes of the problem being checked.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .reference import Array, attention_reference
from .spec import AttentionSpec
from .tl.evaluate import expr_fn
from .tl.parser import parse_expr


def spec_reference(spec: AttentionSpec, sizes: Mapping[str, int], q: Array, k: Array, v: Array,
                   slopes: np.ndarray | None, *, scalars: Mapping[str, float] | None = None,
                   weights: bool = False) -> tuple[Array, ...]:
    """(O, LSE[, P, l]) in float64 for ``spec``'s operator on these inputs. ``scalars`` overrides
    the spec's runtime values (scale, softcap, window sides) where a check chose its own;
    ``slopes`` are the ALiBi slopes used (None when the spec has no ALiBi). Torch tensors give
    tensors on their device (``reference.attention_reference``)."""
    values = {**spec.runtime_scalars(), **(scalars or {})}
    kwargs: dict = {
        "scale": values["scale"], "causal": spec.causal, "causal_align": spec.causal_align,
        "window": (values.get("window_left") if spec.window_left is not None else None,
                   values.get("window_right") if spec.window_right is not None else None),
        "alibi_slopes": slopes if spec.alibi_slopes is not None else None,
        "softcap": values.get("softcap") if spec.softcap is not None else None,
        "weights": weights,
    }
    if spec.score_mod is not None:
        kwargs["score_mod"] = expr_fn(parse_expr(spec.score_mod), dict(sizes), True)
    if spec.mask_mod is not None:
        kwargs["mask_mod"] = expr_fn(parse_expr(spec.mask_mod), dict(sizes), False)
    return attention_reference(q, k, v, **kwargs)
