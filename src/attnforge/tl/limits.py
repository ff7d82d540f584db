"""How much the TL tools take on: nesting the parser accepts, and the interpreter's work budget and
array sizes. Inputs past these limits are refused with an error that names the limit, instead of
a RecursionError, a hang or an out-of-memory kill.

Why these numbers:

* ``MAX_SOURCE_BYTES``: the parser reads about 150 KB a second; the shipped programs are 2 to
  4 KB, so 256 KiB is a hundred times more than any of them and parses in a second or two.
* ``MAX_EXPR_DEPTH``: every tool walks expression trees recursively (parser, checker, printer,
  interpreter, translators); a 100-level expression goes through all of them with a recursion
  limit of 250 (Python's default is 1000), and the shipped programs nest at most 8 levels.
* ``MAX_LOOP_DEPTH``: the checker and interpreter recurse once or twice per loop level; the
  shipped programs nest one loop.
* ``MAX_STEPS``: a step is a program instance, a loop trip or a statement (one more per 4096
  elements of the tile it writes, so a step costs about the same at any tile size); the
  interpreter runs 10,000 to 20,000 steps a second (measured on one core), so a run within the
  budget ends within a minute or two. The README's ``tl run`` example needs 50,000 steps, a
  1024 x 1024 causal run with 16 x 16 tiles 210,000; a loop or grid that would exceed the budget
  is refused before it runs, or after its first trip or instance.
* ``MAX_ELEMENTS``: a float64 array of 2**26 elements is 512 MiB; the float64 reference holds a few
  (B, Hq, Sq, Sk) score arrays at once, so a run within the limit needs a few GiB at most.
"""

from __future__ import annotations

MAX_SOURCE_BYTES = 256 * 1024  # a TL source (or expression) in characters, a TL file in bytes
MAX_EXPR_DEPTH = 100  # operators, unary signs, `not`, calls and element reads nested in one another
MAX_LOOP_DEPTH = 20  # `for` loops nested in one another
MAX_STEPS = 1_000_000  # interpreter steps per run: program instances, loop trips and statements
MAX_ELEMENTS = 2**26  # elements of any one array: a tensor, a tile, a GEMM product, the reference's scores

__all__ = ["MAX_SOURCE_BYTES", "MAX_EXPR_DEPTH", "MAX_LOOP_DEPTH", "MAX_STEPS", "MAX_ELEMENTS"]
