"""A generated Gluon module on disk, loaded and called like a Triton one (``GeneratedKernel``'s
argument checks, outputs and calling convention), natively only: Gluon has no CPU interpreter."""

from __future__ import annotations

from pathlib import Path

from ...errors import AttnforgeError
from ..triton.kernel import GeneratedKernel, gpu_available

NO_INTERPRETER = ("Gluon kernels run natively on a Hopper GPU only: Triton has no CPU interpreter for Gluon. "
                  "On a machine without one, generate with --no-verify (compiled and reported for the target), "
                  "or use --backend triton")


class GluonKernel(GeneratedKernel):
    def __init__(self, path: str | Path, *, interpret: bool | None = None):
        if interpret or (interpret is None and not gpu_available()):
            raise AttnforgeError("cannot run a Gluon kernel here", where=str(path), hint=NO_INTERPRETER)
        super().__init__(path, interpret=False)
