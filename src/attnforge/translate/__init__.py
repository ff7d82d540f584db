"""Stage 2: TL programs to target code (Triton now; CUDA C++ next)."""

from .to_triton import KernelInfo, TritonModule, translate

__all__ = ["KernelInfo", "TritonModule", "translate"]
