"""What is in scope at a statement while a translator walks a kernel: names, tiles, global views,
loop bounds, and the names the translator itself generated.

A tile remembers the index vectors of its rows and columns (its *roles*: which global query row
and key column each element is), so masks and score modifiers can read ``q_idx`` and ``kv_idx``.
``loop()`` opens a loop's scope and closes it whole: the loop variable, the tiles first defined
in the body and the names generated there do not outlive the loop.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

from ..tl import nodes as n
from .bounds import nonnegative, tile_inside


@dataclass
class Tile:
    """A register or shared tile: its TL dims, format, level and index-vector roles."""

    dims: tuple[n.Expr, ...]
    fmt: str
    rows: str | None = None  # the backend's name of the vector of global row indices (q_idx)
    cols: str | None = None  # ... of column indices (kv_idx)
    level: str = "register"
    heads: str | None = None  # packed rows: ... of each row's index along the packed dimension (h_idx)

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass(frozen=True)
class View:
    """A global view ``Allocate X in global (extents) at tensor[offset]``."""

    tensor: str
    extents: tuple[n.Expr, ...]
    offset: tuple[n.Expr, ...]
    fmt: str
    pack: n.Expr | None = None  # a packed view: row r is slice offset[-1] + r % pack at position r // pack


class Scope:
    """Names (TL name -> the backend's expression for it), facts known about them, tiles and views."""

    def __init__(self, names: dict[str, str], nonneg: set[str]):
        self.names = dict(names)
        self.nonneg = set(nonneg)
        self.loop_stops: dict[str, n.Expr] = {}  # loop variable -> its exclusive upper bound
        self.tiles: dict[str, Tile] = {}
        self.views: dict[str, View] = {}
        self.generated: set[str] = set()

    def fresh(self, base: str) -> str:
        """A generated name that no TL name and no other generated name uses."""
        name, i = base, 1
        while name in self.generated or name in self.tiles or name in self.views or name in self.names:
            i += 1
            name = f"{base}{i}"
        self.generated.add(name)
        return name

    def tile_inside(self, coord: n.Expr, size: n.Expr, extent: n.Expr) -> bool:
        return tile_inside(coord, size, extent, self.loop_stops, self.nonneg)

    @contextlib.contextmanager
    def loop(self, var: str, start: n.Expr, stop: n.Expr, rendered: str) -> Iterator[None]:
        names, generated, tiles = dict(self.names), set(self.generated), set(self.tiles)
        self.names[var] = rendered
        self.loop_stops[var] = stop
        if nonnegative(start, self.nonneg):
            self.nonneg.add(var)
        try:
            yield
        finally:
            self.names, self.generated = names, generated  # a later loop may reuse these names
            self.nonneg.discard(var)
            del self.loop_stops[var]
            for name in set(self.tiles) - tiles:
                del self.tiles[name]
