"""attnforge: fast, verified attention kernels for any GPU and variant, by way of a Thinking Language."""

from .errors import AttnforgeError, SpecError, TargetError, TLCheckError, TLRuntimeError, TLSyntaxError
from .spec import AttentionSpec
from .targets import TARGETS, Target, get_target

__version__ = "0.1.0"

# torch-facing entry points load lazily: `import attnforge` stays light for the CLI and the TL tools.
_LAZY = {"attention": "api", "load": "api", "verify": "verify", "generate": "generate"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        value = getattr(module, name)
        if _LAZY[name] == "api":  # kept: attention() is called per step, and this lookup costs microseconds
            globals()[name] = value
        return value
    raise AttributeError(f"module 'attnforge' has no attribute {name!r}")

__all__ = [
    "AttentionSpec", "Target", "TARGETS", "get_target", "attention", "load", "verify", "generate",
    "AttnforgeError", "SpecError", "TargetError", "TLSyntaxError", "TLCheckError", "TLRuntimeError",
]
