"""A dispatch-cache key's launches, recorded once and replayed with each call's tensors.

What a generated launcher computes for a call -- sizes, strides, the grids, window bounds, the
split count, the scratch shapes -- follows from ``attention()``'s dispatch key (shapes, strides,
dtypes, alignment, scalars, the device), never from the tensors' addresses. So once one checked
call of a key has run, later calls need only its kernel launches with their own tensors put in:
``Replay`` keeps, per launch, the direct launch (``direct.DirectLaunch``), the grid and the
argument list, and where in the list the call's tensors, fresh scratch buffers and the tensors
behind TMA descriptors go. Descriptors are passed as their tensors; the direct launch encodes a
tensor map per address (and keeps it).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from .direct import DESCRIPTORS, DirectLaunch
from .launching import Recording, launch_hooked, recording

# where a tensor argument comes from: ("call", i) the call's i-th tensor, ("scratch", j) the j-th buffer allocated per
# call, ("view", j) the j-th view of a call's tensor the launcher made (a split-KV launch of one split: o.unsqueeze(1))
Source = tuple[str, int]
# a view: the call's tensor whose elements it views, its shape and strides
View = tuple[int, tuple[int, ...], tuple[int, ...]]


class Replay:
    """The recorded launches of one key; ``replay(tensors)`` runs them on a call's tensors."""

    __slots__ = ("launches", "scratch", "views", "device")

    def __init__(self, launches: list[tuple[DirectLaunch, tuple[int, ...], list, list[tuple[int, Source]]]],
                 scratch: list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]], device: int, views: list[View] | None = None):
        self.launches, self.scratch, self.device, self.views = launches, scratch, device, views or []

    @classmethod
    def record(cls, rec: Recording, tensors: Sequence[torch.Tensor], device: int) -> Optional["Replay"]:
        """From the recording of one call (its launches and the scratch buffers its launcher
        registered) and the call's tensors. None when a launch went through Triton's JIT, when
        one tensor was passed as two of the call's, or when a tensor argument is neither one of
        the call's, nor registered scratch, nor a view of all the elements of exactly one of the call's
        tensors in its dtype (a copy of an input made by the launcher would be replayed wrongly, so
        nothing is replayed; a view is made again on each call's tensor: its shape and strides follow
        from that tensor's, which the key fixes)."""
        trace = rec.launches
        if not trace or any(direct is None for direct, _, _ in trace):
            return None
        calls = {id(t): i for i, t in enumerate(tensors)}
        if len(calls) != len(tensors):  # one tensor passed as two (k is v): which position takes which later is unknown
            return None
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        scratch: list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = []
        scratch_of: dict[int, int] = {}
        views: list[View] = []
        view_of: dict[int, int] = {}
        launches = []
        for direct, grid, args in trace:
            template, subs = list(args), []
            for position, arg in enumerate(args):
                tensor = arg.base if isinstance(arg, DESCRIPTORS) else arg
                if not isinstance(tensor, torch.Tensor):
                    continue
                if id(tensor) in calls:
                    source: Source = ("call", calls[id(tensor)])
                elif not isinstance(arg, DESCRIPTORS) and (view := _view(tensor, tensors)) is not None:
                    if id(tensor) not in view_of:
                        view_of[id(tensor)] = len(views)
                        views.append(view)
                    source = ("view", view_of[id(tensor)])
                elif isinstance(arg, DESCRIPTORS) or id(tensor) not in rec.scratch or tensor.untyped_storage().data_ptr() in storages:
                    return None
                else:  # a buffer the launcher allocated for this call (split-KV's partial results)
                    if id(tensor) not in scratch_of:
                        scratch_of[id(tensor)] = len(scratch)
                        scratch.append((tuple(tensor.shape), tensor.stride(), tensor.dtype))
                    source = ("scratch", scratch_of[id(tensor)])
                if isinstance(arg, DESCRIPTORS) and position not in direct.positions:
                    return None
                template[position] = None
                subs.append((position, source))
            launches.append((direct, grid, template, subs))
        return cls(launches, scratch, device, views)

    def __call__(self, tensors: Sequence[torch.Tensor]) -> None:
        device = tensors[0].device
        fresh = [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in self.scratch]
        views = [tensors[i].as_strided(shape, stride) for i, shape, stride in self.views]
        pools = {"call": tensors, "scratch": fresh, "view": views}
        for direct, grid, template, subs in self.launches:
            args = list(template)
            for position, (pool, index) in subs:
                args[position] = pools[pool][index]
            direct(grid, args, self.device)


def _view(tensor: torch.Tensor, tensors: Sequence[torch.Tensor]) -> View | None:
    """``tensor`` as a view of one of the call's ``tensors``: the only one whose storage it shares,
    its elements from the same first one, as many, in its dtype (``o.unsqueeze(1)``); else None."""
    storage = tensor.untyped_storage().data_ptr()
    bases = [i for i, t in enumerate(tensors) if t.untyped_storage().data_ptr() == storage]
    if len(bases) != 1:
        return None
    base = tensors[bases[0]]
    if (base.dtype, base.storage_offset(), base.numel()) != (tensor.dtype, tensor.storage_offset(), tensor.numel()):
        return None
    return bases[0], tuple(tensor.shape), tensor.stride()


class KeyLaunch:
    """The launch of one dispatch key after its first call passed every check: its first call here
    runs the module's launcher (checks skipped) and records its launches; later calls replay
    them. A launch hook (a profiler), another current device, or a call that could not be
    recorded keep the launcher."""

    __slots__ = ("launch", "slopes", "replay", "recorded")

    def __init__(self, launch: Callable[..., None], slopes: Optional[torch.Tensor]):
        self.launch, self.slopes = launch, slopes  # slopes: bound with the scalars, if any
        self.replay: Optional[Replay] = None
        self.recorded = False

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, **per_call) -> None:
        replay = self.replay
        if replay is not None and not launch_hooked() and torch._C._cuda_getDevice() == replay.device:
            replay((q, k, v, o, lse, per_call.get("alibi_slopes", self.slopes)))
            return
        if self.recorded or q.device.type != "cuda":
            self.launch(q, k, v, o, lse, **per_call)
            return
        self.recorded = True
        rec = Recording()
        token = recording.set(rec)
        try:
            self.launch(q, k, v, o, lse, **per_call)
        finally:
            recording.reset(token)
        tensors = (q, k, v, o, lse, per_call.get("alibi_slopes", self.slopes))
        self.replay = Replay.record(rec, [t for t in tensors if t is not None], torch._C._cuda_getDevice())
