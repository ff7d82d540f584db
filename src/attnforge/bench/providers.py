"""What ``attnforge bench`` times: PyTorch SDPA with one backend forced (cuDNN, flash), compiled
FlexAttention, and ``attnforge.attention`` with each stage-2 backend.

Every provider computes the same function on a row: softmax(Q K^T / sqrt(D)) V with GQA from the
shapes, and for a causal row the bottom-right mask (top-left and bottom-right agree when Sq == Sk;
for Sq < Sk SDPA gets ``causal_lower_right``, flex a mask_mod with the offset). A provider that
cannot run a row raises ``Unsupported`` with the reason; the runner records the row as n/a.
torch is imported only inside the methods, so listing providers costs nothing.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

from .matrix import Row

SDPA_CUDNN = "sdpa-cudnn"
SDPA_FLASH = "sdpa-flash"
FLEX = "flex"
BASELINE = SDPA_CUDNN
ATTNFORGE_PREFIX = "attnforge-"
REASON_LIMIT = 400


class Unsupported(Exception):
    """A provider cannot run a row; the message says why."""


@dataclass
class Prepared:
    """A provider made ready for a row: ``fn()`` runs it once, inside ``context()``."""

    fn: Callable[[], Any]
    context: Callable[[], ContextManager] = contextlib.nullcontext
    first_call_s: float | None = None  # the first call (a build, a compile), outside the timings
    notes: list[str] = field(default_factory=list)


def reason_of(err: BaseException, caught: list | None = None) -> str:
    """One line: the exception's first line, then what the warnings raised with it said."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    said = []
    for w in caught or ():
        msg = " ".join(str(w.message).split())
        if msg and msg not in said:
            said.append(msg)
    if said:
        text += " (" + "; ".join(said) + ")"
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 3] + "..."


def _sync(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize()


def _first_call(fn: Callable[[], Any], context: Callable[[], ContextManager], device: Any) -> float:
    """Run ``fn`` once inside ``context`` and wait for it; an error becomes ``Unsupported`` with
    the warnings said on the way (SDPA says there why each backend refused)."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with context():
                fn()
            _sync(device)
        except Unsupported:
            raise
        except Exception as err:  # a refusal, a compile error, out of memory: the row is n/a for this provider
            raise Unsupported(reason_of(err, caught)) from err
    return time.perf_counter() - start


class Provider:
    name = "provider"
    description = ""
    verified = False  # True: its output must pass the row-by-row bound (attnforge); else only the norm tolerance

    def unsupported(self, row: Row) -> str | None:
        """Why this provider cannot run ``row``, known without torch or a GPU (None: try it)."""
        return None

    def unavailable(self, device: Any) -> str | None:
        """Why this provider cannot run at all on ``device`` (None: it can)."""
        return None

    def prepare(self, row: Row, q: Any, k: Any, v: Any) -> Prepared:
        raise NotImplementedError


class Sdpa(Provider):
    """``F.scaled_dot_product_attention`` inside ``sdpa_kernel(SDPBackend.<backend>)``: that backend or an error."""

    def __init__(self, name: str, backend: str, description: str):
        self.name, self.backend, self.description = name, backend, description

    def unsupported(self, row: Row) -> str | None:
        if self.backend == "FLASH_ATTENTION":
            if row.dtype not in ("fp16", "bf16"):
                return f"FlashAttention-2 takes fp16 and bf16, not {row.dtype}"
            if row.head_dim > 256:
                return f"FlashAttention-2 takes head dims up to 256, not {row.head_dim}"
        if self.backend == "CUDNN_ATTENTION" and row.dtype not in ("fp16", "bf16"):
            return f"cuDNN attention takes fp16 and bf16, not {row.dtype}"
        return None

    def unavailable(self, device: Any) -> str | None:
        import torch

        if self.backend == "MATH":
            return None
        if getattr(device, "type", str(device)) != "cuda":
            return f"{self.name} runs on a CUDA GPU only"
        if torch.cuda.get_device_capability() < (8, 0):
            return f"{self.name} needs compute capability 8.0 or newer"
        if self.backend == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
            return "cuDNN is not available in this torch build"
        return None

    def prepare(self, row: Row, q: Any, k: Any, v: Any) -> Prepared:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, self.backend)
        kwargs: dict = {}
        if row.causal and row.seqlen_q == row.seqlen_k:
            kwargs["is_causal"] = True
        elif row.causal:
            from torch.nn.attention.bias import causal_lower_right

            kwargs["attn_mask"] = causal_lower_right(row.seqlen_q, row.seqlen_k)
        if row.heads != row.kv_heads:
            kwargs["enable_gqa"] = True

        def fn() -> Any:
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

        def context() -> ContextManager:
            return sdpa_kernel(backend)

        return Prepared(fn, context, _first_call(fn, context, q.device))


class Flex(Provider):
    """``torch.compile(flex_attention)``; a block mask for causal rows, ``enable_gqa`` for GQA."""

    name = FLEX
    description = "torch.compile(flex_attention), block mask for causal"
    _compiled: dict[str, Any] = {}  # "fn": the one compiled flex_attention of the process (a dict: a function stored on the class would bind)

    def unavailable(self, device: Any) -> str | None:
        if getattr(device, "type", str(device)) != "cuda":
            return "compiled FlexAttention is timed on a CUDA GPU only"
        try:
            from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
        except ImportError as err:
            return f"this torch has no FlexAttention ({err})"
        return None

    def compiled(self) -> Any:
        if "fn" not in self._compiled:
            import torch
            import torch._dynamo
            from torch.nn.attention.flex_attention import flex_attention

            # Every row is a new shape: without this torch.compile gives up after 8 and runs flex eagerly.
            for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 1024))
            self._compiled["fn"] = torch.compile(flex_attention, dynamic=False)
        return self._compiled["fn"]

    def prepare(self, row: Row, q: Any, k: Any, v: Any) -> Prepared:
        try:
            compiled = self.compiled()
            block_mask = None
            if row.causal:
                from torch.nn.attention.flex_attention import create_block_mask

                offset = row.seqlen_k - row.seqlen_q  # bottom-right: query i sees keys <= i + offset

                def causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
                    return kv_idx <= q_idx + offset

                block_mask = create_block_mask(causal, None, None, row.seqlen_q, row.seqlen_k, device=q.device)
        except Exception as err:
            raise Unsupported(reason_of(err)) from err
        gqa = row.heads != row.kv_heads

        def fn() -> Any:
            return compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa)

        return Prepared(fn, contextlib.nullcontext, _first_call(fn, contextlib.nullcontext, q.device))


class Attnforge(Provider):
    """``attnforge.attention(q, k, v, causal=..., backend=NAME)``; its first call builds and verifies a kernel."""

    verified = True

    def __init__(self, backend: str):
        self.backend = backend
        self.name = ATTNFORGE_PREFIX + backend
        self.description = f"attnforge.attention(..., backend={backend!r})"

    def prepare(self, row: Row, q: Any, k: Any, v: Any) -> Prepared:
        import attnforge

        backend = self.backend

        def fn() -> Any:
            return attnforge.attention(q, k, v, causal=row.causal, backend=backend)

        seconds = _first_call(fn, contextlib.nullcontext, q.device)
        return Prepared(fn, contextlib.nullcontext, seconds, [f"first call (build, verify, cache) {seconds:.1f} s"])


def default_providers() -> list[Provider]:
    from ..backends import names

    return [
        Sdpa(SDPA_CUDNN, "CUDNN_ATTENTION", "SDPA, cuDNN backend"),
        Sdpa(SDPA_FLASH, "FLASH_ATTENTION", "SDPA, flash backend (FlashAttention-2)"),
        Flex(),
        *(Attnforge(name) for name in names()),
        Attnforge("auto"),  # what a user gets by default: the tuning database's choice of backend per bucket
    ]


def choose(providers: list[Provider], wanted: list[str] | None) -> list[Provider]:
    """``providers`` restricted to ``wanted`` (names, in the order given); an unknown name is an error."""
    if not wanted:
        return providers
    by_name = {p.name: p for p in providers}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        from ..errors import AttnforgeError

        raise AttnforgeError(f"unknown provider {', '.join(unknown)}", where="--providers", hint="providers: " + ", ".join(by_name))
    return [by_name[w] for w in dict.fromkeys(wanted)]
