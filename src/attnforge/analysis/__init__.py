"""Backend-neutral facts about a TL program that every translator uses: which tensors a kernel
touches and in which formats (``facts``), what is provably non-negative or inside a tensor and
where indices need int64 (``bounds``), and the names, tiles and loops in scope at each statement
(``scope``), and which online softmaxes may run in base 2 (``softmax``)."""

from .bounds import is_float, multiplies_indices, nonnegative, tile_inside
from .facts import LAUNCH_PARAMS, STRATEGY_PARAMS, KernelFacts, kernel_facts, scratch_ranks, stmt_exprs
from .scope import Scope, Tile, View
from .softmax import LN2, LOG2E, Base2, base2_softmax

__all__ = ["is_float", "multiplies_indices", "nonnegative", "tile_inside", "LAUNCH_PARAMS", "STRATEGY_PARAMS",
           "KernelFacts", "kernel_facts", "scratch_ranks", "stmt_exprs", "Scope", "Tile", "View", "LN2", "LOG2E", "Base2", "base2_softmax"]
