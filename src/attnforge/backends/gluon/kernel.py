"""A generated Gluon module on disk, loaded and called like a Triton one (``GeneratedKernel``'s
argument checks, outputs and calling convention), natively only, on the GPU family it is written
for: Gluon has no CPU interpreter, and a tcgen05 kernel does not compile for a Hopper GPU."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Optional

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

    def launch_keyed(self, q: Any, k: Any, v: Any, o: Any, lse: Any, *, slots: list, **scalars) -> None:
        """The first call of an ``attention()`` dispatch key: recorded for a replay only when
        ``replay_enabled()``."""
        if replay_enabled():
            super().launch_keyed(q, k, v, o, lse, slots=slots, **scalars)
        else:
            self.launch(q, k, v, o, lse, **scalars)

    def checked_launch(self, slots: list, **scalars) -> Optional[Callable[..., None]]:
        """For the later calls of an ``attention()`` dispatch key whose first launch passed every
        check: with ``replay_enabled()``, the Triton modules' recorded direct launch
        (``replay.KeyLaunch``, Gluon's host descriptors included); otherwise the module's launch
        with its argument checks skipped, through Triton's JIT on every call."""
        if replay_enabled():
            return super().checked_launch(slots, **scalars)
        if "checked" not in self.accepts:
            return None
        return functools.partial(self.module.launch, checked=True, **scalars)


def replay_enabled() -> bool:
    """Whether ``attention()`` replays a Gluon key's recorded launches through Triton's C launcher
    (``ATTNFORGE_GLUON_REPLAY=1``). Off by default until it has been verified and timed on a GPU:
    the Triton modules' replay, extended to Gluon's descriptors, was written without one."""
    return os.environ.get("ATTNFORGE_GLUON_REPLAY") == "1"
