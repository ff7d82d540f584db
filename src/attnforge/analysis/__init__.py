"""Backend-neutral facts about a TL program that every translator uses: which tensors a kernel
touches and in which formats (``facts``), what is provably non-negative or inside a tensor and
where indices need int64 (``bounds``), and the names, tiles and loops in scope at each statement
(``scope``)."""

from .bounds import is_float, multiplies_indices, nonnegative, tile_inside
from .facts import LAUNCH_PARAMS, STRATEGY_PARAMS, KernelFacts, kernel_facts, scratch_ranks, stmt_exprs
from .scope import Scope, Tile, View

__all__ = ["is_float", "multiplies_indices", "nonnegative", "tile_inside", "LAUNCH_PARAMS", "STRATEGY_PARAMS",
           "KernelFacts", "kernel_facts", "scratch_ranks", "stmt_exprs", "Scope", "Tile", "View"]
