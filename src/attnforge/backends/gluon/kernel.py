"""A generated Gluon module on disk, loaded and called like a Triton one (``GeneratedKernel``'s
argument checks, outputs and calling convention), natively only, on the GPU family it is written
for: Gluon has no CPU interpreter, and a tcgen05 kernel does not compile for a Hopper GPU. An
``attention()`` dispatch key's later calls replay its recorded launches as a Triton module's do
(``triton/replay.py``, which rebuilds Gluon's host TMA descriptors from each call's tensors); a
split-KV pair's (decode) later calls skip the checks but take Triton's JIT: its replay (a pointer
Q, fresh scratch, the merge's counters of the call's stream) is not built."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Optional

from ...errors import AttnforgeError
from ..triton.kernel import GeneratedKernel, gpu_available
from .compile import ARCH_MAJOR

NO_INTERPRETER = ("Gluon kernels run natively only, on the GPU family they are written for (sm_90 or sm_100): Triton has no CPU "
                  "interpreter for Gluon. On a machine without one, generate with --no-verify (compiled and reported for the target), "
                  "or use --backend triton")


class GluonKernel(GeneratedKernel):
    def __init__(self, path: str | Path, *, interpret: bool | None = None):
        if interpret or (interpret is None and not gpu_available()):
            raise AttnforgeError("cannot run a Gluon kernel here", where=str(path), hint=NO_INTERPRETER)
        super().__init__(path, interpret=False)
        import torch

        arch = getattr(self.module, "ARCH", "sm_90")
        major = torch.cuda.get_device_capability()[0]
        if major != ARCH_MAJOR[arch]:
            raise AttnforgeError(f"this Gluon kernel is written for {arch}; the local GPU, {torch.cuda.get_device_name()}, is sm_{major}x",
                                 where=str(path), hint=NO_INTERPRETER)

    def checked_launch(self, slots: list, **scalars) -> Optional[Callable[..., None]]:
        """``GeneratedKernel.checked_launch`` (a replay); for a split-KV pair, the launch with its checks skipped."""
        if getattr(self.module, "SPLIT_KV", False):
            return functools.partial(self.module.launch, checked=True, **scalars) if "checked" in self.accepts else None
        return super().checked_launch(slots, **scalars)

