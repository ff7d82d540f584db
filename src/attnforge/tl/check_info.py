"""What the body check knows about each name in a kernel (``Info``), and how its messages write a
tile's dimensions (``dims_text``): shared by ``check_body``, ``check_gemm`` and ``check_packed``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import nodes as n
from .printer import expr as show

if TYPE_CHECKING:
    from .check_packed import Packed


@dataclass
class Info:
    """What the checker knows about one name inside a kernel."""

    level: str
    shape: tuple  # evaluated dims under the current probe
    dims: tuple[n.Expr, ...]  # the expressions, for alignment checks
    dtype: str
    node: n.Node
    layout: str | None = None
    rows: bool | Packed = False  # carries row indices (q_idx); a Packed: packed rows (q_idx and h_idx)
    cols: bool = False  # carries column indices (kv_idx)
    tensor: str | None = None  # global views: the argument viewed
    from_shared: bool = False  # an MMA operand streamed from shared memory in K-steps
    online: n.OnlineSoftmax | None = None  # derived from the probabilities of this update
    init: object = None
    ring: int | None = None  # a ring of this many shared tiles (Hopper form), named NAME[i]


def dims_text(dims) -> str:
    """Dimensions as written, e.g. ``(BM, D)``."""
    return "(" + ", ".join(show(d) for d in dims) + ")"

