"""The interpreter's tile: an array with where it lives and the global indices of its rows and columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Tile:
    data: np.ndarray
    level: str
    dtype: str
    rows: np.ndarray | None = None
    cols: np.ndarray | None = None
    layout: str | None = None
    extent: tuple[int, ...] | None = None  # global views: the in-bounds extent of each dimension
    heads: np.ndarray | None = None  # packed rows: the index along the packed dimension (h_idx) of each row
    pack: int | None = None  # packed global views: P; ``data`` is then (P, T, ...) and row r is data[r % P, r // P]
    pack_base: int = 0  # packed global views: the first packed slice (the last offset)
