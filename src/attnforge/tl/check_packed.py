"""The packed-GQA rules of the body check: a global view that packs the query heads of one K/V
head into its rows (``Allocate ... pack P``, TL313), a tile stored into a view packed the same way
(TL413), and ``h_idx`` used on rows that are not packed (TL203).

``PackedViews`` holds methods of ``check_body.KernelCheck``, which mixes it in; they report
through its ``add`` and evaluate through its ``value``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..abi import ARG_SHAPES
from . import nodes as n
from .check_info import Info
from .printer import expr as show


@dataclass(frozen=True)
class Packed:
    """Rows of a packed view (``Allocate ... pack P``) or of a tile loaded from one: row ``r`` is
    slice ``r % P`` of the packed dimension (the query head, ``h_idx``) at position ``r // P``
    (``q_idx``). It stands where ``Info.rows`` is ``True`` for plain rows, so it travels with them."""

    p: int  # the pack factor under the current probe
    expr: n.Expr
    view: str  # the view that packed the rows
    line: int


class PackedViews:
    """The packed-view checks of ``KernelCheck`` (TL313, TL413, and TL203 for ``h_idx``)."""

    def _dim_name(self, tensor: str, axis: int) -> str:
        """A tensor dimension as written: its size name (Sq, Hq, ...) or its scratch shape expression."""
        if tensor in ARG_SHAPES:
            return ARG_SHAPES[tensor][axis]
        sc = next((sc for sc in self.k.scratch if sc.name == tensor), None)
        return show(sc.shape[axis]) if sc is not None and axis < len(sc.shape) else f"dimension {axis}"

    def check_packed_view(self, s: n.Allocate, env: dict, full: tuple, shape: tuple | None) -> Packed | bool:
        """TL313: ``Allocate X in global (P * T, ...) at t[..., o] pack P`` views the slices
        ``o .. o + P - 1`` of the last offset's dimension, interleaved into the first view dimension
        (row r is slice o + r % P at position r // P). The slices must lie inside the tensor in the
        first and the last program instance, the first dimension must be P times the packed one and
        the others the tensor's trailing ones, and packed query heads must share one K/V head."""
        instance = "first" if self.probe == 0 else "last"
        p = self.value(s.pack, env, "pack factor")
        if p is None:
            return False
        k = len(s.offset)
        example = "e.g. Allocate Q in global (Hq // Hkv * Sq, D) at q[b, hk * (Hq // Hkv)] pack Hq // Hkv with grid axis hk : Hkv"
        if p < 1:
            self.add("TL313", s.pack, f"pack factor {_valued(s.pack, p)} is not positive", "pack at least one slice: " + example)
            return False
        if not s.shape or k + len(s.shape) != len(full):
            if not s.shape:
                self.add("TL313", s, f"{s.name} has no dimension to pack the slices of {s.tensor} into", "a packed view keeps the dimensions after its offsets, the first one multiplied by P: " + example)
            return False
        dim, axis = full[k - 1], k - 1
        lead = self.value(s.offset[-1], env, "offset")
        first, what = show(s.offset[-1]), self._dim_name(s.tensor, axis)
        if isinstance(lead, int) and (lead < 0 or lead + p > dim):
            self.add("TL313", s.offset[-1], f"{s.name} packs slices {first} .. {first} + {show(s.pack)} - 1 = {lead}..{lead + p - 1} of dimension {axis} of {s.tensor} ({what} = {dim}), "
                     f"which leave the tensor in the {instance} program instance", "start the packed slices at a multiple of P that leaves P slices: " + example)
        if shape is not None:
            inner = self._dim_name(s.tensor, k)
            if shape[0] != p * full[k]:
                self.add("TL313", s.shape[0], f"{s.name} packs {_valued(s.pack, p)} slices of {inner} = {full[k]} rows, so its first dimension is {p * full[k]}, "
                         f"not {_valued(s.shape[0], shape[0])}", f"write ({show(s.pack)} * {inner}, ...): the packed rows are every (slice, position) pair")
            elif tuple(shape[1:]) != tuple(full[k + 1:]):
                rest = ", ".join(self._dim_name(s.tensor, a) for a in range(k + 1, len(full)))
                self.add("TL313", s, f"{s.name} views {s.tensor} packed with shape ({', '.join(show(d) for d in s.shape)}); after the packed dimension come the tensor's trailing dimensions ({rest})",
                         f"write ({show(s.pack)} * {inner}{', ' + rest if rest else ''})")
        if dim == env.get("Hq") and env.get("Hkv"):
            group = env["Hq"] // env["Hkv"]
            if group % p or (isinstance(lead, int) and lead % p):
                self.add("TL313", s.pack, f"{s.name} packs query heads {lead}..{lead + p - 1} of {s.tensor}, which read different K/V heads (Hq // Hkv = {group} query heads per K/V head) in the {instance} program instance",
                         "pack the query heads of one K/V head, starting at a multiple of the pack factor: " + example)
        return Packed(p, s.pack, s.name, s.line)

    def check_packed_store(self, s: n.Copy, src: Info, glob: Info) -> None:
        """TL413: a tile whose rows are known is stored into a view packed the same way: packed
        (head, position) rows into a view with the same pack factor, plain rows into a plain view."""
        have = src.rows.p if isinstance(src.rows, Packed) else None
        want = glob.rows.p if isinstance(glob.rows, Packed) else None
        if not src.rows or have == want or not isinstance(glob.node, n.Allocate):
            return
        view = glob.node
        if have is None:
            self.add("TL413", s, f"{s.src} has plain rows (one position each) but view {s.dst} (line {view.line}) is packed ({_valued(view.pack, want)} slices per position)",
                     f"load the tile from a view packed the same way, or view {s.dst} without 'pack'")
        elif want is None:
            self.add("TL413", s, f"{s.src} has packed rows (pack {_valued(src.rows.expr, have)}, from {src.rows.view} at line {src.rows.line}) but view {s.dst} (line {view.line}) is not packed: "
                     f"row r would go to position r of one head instead of slice r % {have} at position r // {have}", f"view the output packed the same way: ... at {view.tensor}[...] pack {show(src.rows.expr)}")
        else:
            self.add("TL413", s, f"{s.src} has rows packed {_valued(src.rows.expr, have)} slices per position (from {src.rows.view} at line {src.rows.line}) but view {s.dst} (line {view.line}) packs {_valued(view.pack, want)}",
                     f"pack both views with the same factor, e.g. pack {show(src.rows.expr)}")

    def h_idx_defined(self, e: n.Expr, info: Info, name: str) -> tuple[str, ...]:
        """TL203, with its own hint, for ``h_idx`` on a tile whose rows are not packed; returns
        the extra name to let through so the generic check does not report it again."""
        if "h_idx" not in n.expr_names(e) or isinstance(info.rows, Packed):
            return ()
        self.add("TL203", e, f"name 'h_idx' is not defined here: the rows of {name} are not packed",
                 "h_idx is the query head of each row of a tile loaded from a packed view (Allocate ... pack P); in a kernel with one head per program use the grid axis (h)")
        return ("h_idx",)


def _valued(e: n.Expr, value) -> str:
    """An expression with its value under the probe, e.g. ``Hq // Hkv = 3`` (a literal alone)."""
    return show(e) if show(e) == str(value) else f"{show(e)} = {value}"

