"""attnforge: fast, verified attention kernels for any GPU and variant, by way of a Thinking Language."""

from .errors import AttnforgeError, SpecError, TargetError, TLCheckError, TLRuntimeError, TLSyntaxError
from .spec import AttentionSpec
from .targets import TARGETS, Target, get_target

__version__ = "0.1.0"

__all__ = [
    "AttentionSpec", "Target", "TARGETS", "get_target",
    "AttnforgeError", "SpecError", "TargetError", "TLSyntaxError", "TLCheckError", "TLRuntimeError",
]
