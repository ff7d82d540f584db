"""One-line use from PyTorch: ``attnforge.attention(q, k, v, causal=True)``.

Semantics follow ``torch.nn.functional.scaled_dot_product_attention`` where they overlap:
q is (B, Hq, Sq, D), k is (B, Hkv, Sk, D), v is (B, Hkv, Sk, Dv) (``layout="bshd"`` takes
(B, S, H, D) tensors, as FlashAttention does, without copying); ``scale`` defaults to
1/sqrt(D); grouped-query attention follows from Hq being a multiple of Hkv (SDPA's
``enable_gqa``). Differences, on purpose: ``causal=True`` aligns the mask bottom-right (query i
sees keys j <= i + Sk - Sq, FlashAttention's and KV-cache decode's convention); SDPA's
``is_causal`` is top-left, which ``causal_align="top_left"`` gives. The two agree when Sq == Sk.
A row that sees no key gives O = 0 and log-sum-exp -inf (SDPA gives NaN).

The first call for a new kind of operator generates, compiles and verifies a kernel and caches
it on disk (``attnforge.cache``), saying so in a line on stderr with the path of its report; later
calls, in this process or others, load it (a damaged cache entry is set aside and rebuilt, with a
``CacheRepairWarning``). The call is a ``torch.library`` custom op
(``torch.ops.attnforge.attention``), so ``torch.compile`` graphs can hold it. Forward only:
inputs that require grad raise (backward is not implemented yet).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import torch

from .abi import new_outputs
from .backends import Backend, Kernel, backend_for_directory, choose_backend, get_backend, names
from .cache import build_or_load, entry_key
from .dtypes import KERNEL_DTYPES, torch_dtype
from .errors import AttnforgeError
from .spec import AttentionSpec
from .targets import DEFAULT_TARGET, Target, detect_local_target, get_target, tma_can_read

_DTYPES = {torch_dtype(name): name for name in KERNEL_DTYPES}
_loaded: dict[tuple[str, str, bool], Kernel] = {}


def load(directory: str | Path) -> Kernel:
    """A directory written by ``attnforge generate`` (or its source file) as a callable:
    ``kernel(q, k, v, scale=..., [softcap=..., window_left=..., alibi_slopes=...]) -> (o, lse)``
    on BHSD-indexed tensors (GPU tensors natively; CPU tensors through the backend's interpreter)."""
    path = Path(directory)
    if path.is_dir():
        backend = backend_for_directory(path)
        return backend.load(path / backend.source_file)
    for name in names():
        if path.name == get_backend(name).source_file:
            return get_backend(name).load(path)
    raise AttnforgeError(f"no generated kernel at {path}", where=str(path), hint="give the directory 'attnforge generate --out DIR' wrote")


def _target_for(device: torch.device) -> Target:
    """The local GPU's table entry (as ``--target auto`` resolves it); without a GPU, the default
    target, whose kernels then run in the interpreter."""
    if device.type == "cuda":
        return detect_local_target(device.index)
    return get_target(DEFAULT_TARGET)


def _spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float], causal: bool, causal_align: str,
          window_left: Optional[int], window_right: Optional[int], alibi: bool, softcap: Optional[float],
          score_mod: Optional[str], mask_mod: Optional[str], allow_tf32: bool) -> AttentionSpec:
    B, Hq, Sq, D = q.shape
    return AttentionSpec(batch=B, heads=Hq, kv_heads=k.shape[1], seqlen_q=Sq, seqlen_k=k.shape[2], head_dim=D,
                         head_dim_v=v.shape[3], dtype=_DTYPES[q.dtype], scale=scale, causal=causal, causal_align=causal_align,
                         window_left=window_left, window_right=window_right, alibi_slopes="auto" if alibi else None,
                         softcap=softcap, score_mod=score_mod, mask_mod=mask_mod, allow_tf32=allow_tf32)


def tma_compatible(*tensors: torch.Tensor) -> bool:
    """Whether TMA descriptors can read these tensors (``targets.tma_can_read``: contiguous BHSD
    and BSHD tensors can, when a row is a multiple of 16 bytes)."""
    return all(tma_can_read(t.stride(), t.element_size(), t.data_ptr()) for t in tensors)


# (spec, target, backend asked for, tma, interpret) -> (the backend chosen, _loaded's key): the choice and the
# cache key are worked out once per process (auto's choice and the key read the tuning database and plan the
# first choice: ~8 ms, which a torch.compile'd graph, calling kernel_for at each call, paid every call)
_resolved: dict[tuple, tuple[Backend, tuple[str, str, bool]]] = {}


def kernel_for(spec: AttentionSpec, device: torch.device, *, backend: str = "auto", tma: bool = True) -> Kernel:
    """The cached (built on first use) kernel for ``spec`` on ``device``. The backend and the kernel chosen for a
    spec stay this process's choice (as attention()'s dispatch cache keeps them): a tuning database written since
    is read by the next process."""
    target = _target_for(device)
    interpret = device.type != "cuda"
    memo = (spec, target.name, backend, tma, interpret)
    resolved = _resolved.get(memo)
    if resolved is None:
        chosen = choose_backend(backend, spec, target)
        resolved = chosen, (entry_key(spec, target, backend=chosen, tma=tma), target.name, interpret)
        if len(_resolved) >= _DISPATCH_LIMIT:
            _resolved.clear()
        _resolved[memo] = resolved
    chosen, key = resolved
    if key not in _loaded:
        # by name, so that the entry's report says which backend auto chose and why
        _loaded[key] = chosen.load(build_or_load(spec, target, backend=backend, tma=tma), interpret=interpret)
    return _loaded[key]


@torch.library.custom_op("attnforge::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alibi_slopes: Optional[torch.Tensor], scale: float,
                  causal: bool, causal_align: str, window_left: Optional[int], window_right: Optional[int],
                  softcap: Optional[float], score_mod: Optional[str], mask_mod: Optional[str], allow_tf32: bool,
                  out_bshd: bool, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    spec = _spec(q, k, v, scale=scale, causal=causal, causal_align=causal_align, window_left=window_left,
                 window_right=window_right, alibi=alibi_slopes is not None, softcap=softcap, score_mod=score_mod,
                 mask_mod=mask_mod, allow_tf32=allow_tf32)
    q, k, v = (t.resolve_neg() for t in (q, k, v))  # traced graphs are not checked for lazily negated views: resolved here
    kernel = kernel_for(spec, q.device, backend=backend, tma=tma_compatible(q, k, v))
    o, lse = new_outputs(q, v, bshd=out_bshd)
    scalars: dict = spec.runtime_scalars()
    if alibi_slopes is not None:
        scalars["alibi_slopes"] = alibi_slopes
    if q.is_cuda:
        with torch.cuda.device(q.device):  # launched on q's device and its stream
            kernel.launch(q, k, v, o, lse, **scalars)
    else:
        kernel.launch(q, k, v, o, lse, **scalars)
    return o, lse


@_attention_op.register_fake
def _attention_fake(q, k, v, alibi_slopes, scale, causal, causal_align, window_left, window_right, softcap, score_mod, mask_mod, allow_tf32, out_bshd, backend):
    return new_outputs(q, v, bshd=out_bshd)


def _window(window: None | int | Sequence[Optional[int]], causal: bool) -> tuple[Optional[int], Optional[int]]:
    if window is None:
        return None, None
    if isinstance(window, int) and not isinstance(window, bool):
        return window, 0 if causal else window
    if isinstance(window, (tuple, list)) and len(window) == 2:
        return window[0], window[1]
    raise AttnforgeError(f"window = {window!r} is not a window", where="window",
                         hint="an int w (keys within w of the diagonal; only behind it when causal) or (left, right) with None for unbounded")


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise AttnforgeError(f"{name} is a {type(t).__name__}, not a torch.Tensor", where=name)
        if t.dim() != 4:
            raise AttnforgeError(f"{name} has shape {tuple(t.shape)}; attention takes 4-d tensors", where=name,
                                 hint="(batch, heads, seq, head_dim) with layout='bhsd', or (batch, seq, heads, head_dim) with layout='bshd'")
        if t.dtype not in _DTYPES:
            raise AttnforgeError(f"{name} is {t.dtype}", where=name, hint="float16, bfloat16 or float32")
        if t.dtype != q.dtype or t.device != q.device:
            raise AttnforgeError(f"{name} is {t.dtype} on {t.device}, q is {q.dtype} on {q.device}", where=name, hint="q, k and v share one dtype and device")
        if not torch.compiler.is_compiling() and t.is_neg():  # e.g. z.conj().imag: its memory holds the values with the opposite sign
            raise AttnforgeError(f"{name} is a lazily negated view (its negative bit is set); a kernel would read it unnegated", where=name,
                                 hint=f"pass {name}.resolve_neg()")
    if layout not in ("bhsd", "bshd"):
        raise AttnforgeError(f"layout = {layout!r}", where="layout", hint="'bhsd' (SDPA) or 'bshd' (FlashAttention)")
    axes = ("batch", "heads", "seq", "head_dim") if layout == "bhsd" else ("batch", "seq", "heads", "head_dim")
    bhsd = [t if layout == "bhsd" else t.transpose(1, 2) for t in (q, k, v)]
    (B, Hq, _, D), (Bk, Hkv, Sk, Dk), (Bv, Hv, Sv, _) = (tuple(t.shape) for t in bhsd)
    problems = []
    if not B == Bk == Bv:
        problems.append(f"batch sizes differ (q {B}, k {Bk}, v {Bv})")
    if Hkv != Hv or Hkv == 0 or Hq % Hkv:
        problems.append(f"k and v need the same number of heads, dividing q's {Hq} (k {Hkv}, v {Hv})")
    if Sk != Sv:
        problems.append(f"k and v need the same length (k {Sk}, v {Sv})")
    if D != Dk:
        problems.append(f"q and k need the same head dim (q {D}, k {Dk})")
    if problems:
        raise AttnforgeError("; ".join(problems) + f"; shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}",
                             where="q, k, v", hint=f"layout {layout!r} reads dims as ({', '.join(axes)})")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise AttnforgeError("backward is not supported yet: attnforge generates forward kernels only",
                             where="attention", hint="call it under torch.no_grad() / torch.inference_mode(), or detach the inputs if no gradient is wanted")


class PreparedCall:
    """What a dispatch-cache hit needs: the kernel, its runtime scalars (with the ALiBi slopes
    when they are the same at every call), and the compiled kernels its launches recorded
    (``slots``). The first launch of a key runs every check of the kernel's launcher; later ones
    go to ``fast``, the launch with the checks skipped (``Kernel.checked_launch``, optional in
    the protocol), when the kernel has one."""

    __slots__ = ("kernel", "scalars", "out_bshd", "slots", "fast")

    def __init__(self, kernel: Kernel, scalars: dict, slopes: Optional[torch.Tensor], out_bshd: bool):
        self.kernel, self.out_bshd = kernel, out_bshd
        # a slopes tensor made from "auto" or a list is the same at every call: bound with the scalars
        self.scalars = scalars if slopes is None else {**scalars, "alibi_slopes": slopes}
        self.slots: list = []
        self.fast = None

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, **per_call) -> None:
        """``per_call``: the ALiBi slopes when the caller passes them as a tensor (read at each call)."""
        if self.fast is not None:
            self.fast(q, k, v, o, lse, **per_call)
            return
        keyed = getattr(self.kernel, "launch_keyed", None)
        if keyed is None:  # a kernel whose launches are not recorded (the CUDA backend's: it plans them itself)
            self.kernel.launch(q, k, v, o, lse, **self.scalars, **per_call)
        else:
            keyed(q, k, v, o, lse, slots=self.slots, **self.scalars, **per_call)
        checked = getattr(self.kernel, "checked_launch", None)
        self.fast = checked(self.slots, **self.scalars) if checked is not None else None  # this launch passed every check


# (shapes, strides, dtype, device, 16-byte alignment of q/k/v and of a slopes tensor, every option with its type) -> PreparedCall. Every
# argument check and the spec's validation run once per key; a hit only allocates the outputs
# and launches. What Triton specialises a kernel on is all in the key (see launching.launch_kernel).
_dispatch: dict[tuple, PreparedCall] = {}
_DISPATCH_LIMIT = 4096


def _dispatch_key(q, k, v, causal, causal_align, scale, window, alibi_slopes, softcap, score_mod, mask_mod, allow_tf32,
                  layout, backend) -> Optional[tuple]:
    """The key of this call, or None when it cannot be cached (inputs that need autograd's
    refusal; a key that cannot be hashed fails its lookup). Built on every call: plain tuples of
    what the tensors report, a few hundred nanoseconds each."""
    if not (type(q) is type(k) is type(v) is torch.Tensor) or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        return None
    if q.is_neg() or k.is_neg() or v.is_neg():  # lazily negated views: the checks refuse them, every time
        return None
    if isinstance(alibi_slopes, torch.Tensor):
        # the slopes are a pointer argument too: Triton specialises on their stride (1 or not) and
        # 16-byte alignment as on q's, and a hit launches the kernel the first call compiled
        slopes_key = ("tensor", alibi_slopes.shape, alibi_slopes.stride(), alibi_slopes.data_ptr() % 16, alibi_slopes.dtype,
                      alibi_slopes.device)
    elif isinstance(alibi_slopes, (list, tuple)):
        slopes_key = (tuple(alibi_slopes), tuple(map(type, alibi_slopes)))
    else:
        slopes_key = (alibi_slopes, type(alibi_slopes))
    if isinstance(window, (list, tuple)):
        window = tuple(window)
        window_types = tuple(map(type, window))
    else:
        window_types = None
    # options with their types: True == 1 and hash alike, but the checks a hit skips refuse one and not the other
    options = (causal, causal_align, scale, window, softcap, score_mod, mask_mod, allow_tf32, layout, backend)
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype, q.device, k.device, v.device,
           q.data_ptr() % 16, k.data_ptr() % 16, v.data_ptr() % 16, slopes_key, options, tuple(map(type, options)), window_types)
    return key


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    causal_align: str = "bottom_right",
    scale: Optional[float] = None,
    window: None | int | tuple[Optional[int], Optional[int]] = None,
    alibi_slopes: None | str | torch.Tensor | Sequence[float] = None,
    softcap: Optional[float] = None,
    score_mod: Optional[str] = None,
    mask_mod: Optional[str] = None,
    allow_tf32: bool = False,
    layout: str = "bhsd",
    return_lse: bool = False,
    backend: str = "auto",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention with a generated, verified kernel (see the module docstring for semantics).

    ``window``: an int w keeps keys within w of the diagonal (behind it only, when causal), or
    ``(left, right)`` with None for an unbounded side. ``alibi_slopes``: "auto" (the standard
    geometric slopes) or Hq numbers. ``softcap``: scores become softcap * tanh(score / softcap).
    ``score_mod``/``mask_mod``: TL expressions over score, b, h, q_idx, kv_idx, Sq, Sk, Hq, Hkv,
    e.g. ``score_mod="score - 0.1 * abs(q_idx - kv_idx)"``, ``mask_mod="kv_idx % 4 != 0"``.
    ``backend``: which stage-2 backend builds the kernel (``auto``, or a name from
    ``attnforge backends``). Returns O in the input layout, and the natural-log log-sum-exp
    (B, Hq, Sq, fp32) with ``return_lse=True``."""
    if torch.compiler.is_compiling():  # traced: through the custom op, which graphs can hold
        return _attention_traced(q, k, v, causal=causal, causal_align=causal_align, scale=scale, window=window, alibi_slopes=alibi_slopes,
                                 softcap=softcap, score_mod=score_mod, mask_mod=mask_mod, allow_tf32=allow_tf32, layout=layout,
                                 return_lse=return_lse, backend=backend)
    if isinstance(q, torch.Tensor) and q.is_cuda and q.get_device() != torch._C._cuda_getDevice():
        # kernels launch on the current device and its stream: make q's the current one (FlashAttention's CUDAGuard)
        with torch.cuda.device(q.device):
            return attention(q, k, v, causal=causal, causal_align=causal_align, scale=scale, window=window, alibi_slopes=alibi_slopes,
                             softcap=softcap, score_mod=score_mod, mask_mod=mask_mod, allow_tf32=allow_tf32, layout=layout,
                             return_lse=return_lse, backend=backend)
    key = _dispatch_key(q, k, v, causal, causal_align, scale, window, alibi_slopes, softcap, score_mod, mask_mod, allow_tf32, layout, backend)
    try:
        prepared = _dispatch.get(key) if key is not None else None
    except TypeError:  # an option that cannot be hashed: such calls are prepared every time
        key = prepared = None
    if prepared is None:
        prepared = _prepare(q, k, v, causal=causal, causal_align=causal_align, scale=scale, window=window, alibi_slopes=alibi_slopes,
                            softcap=softcap, score_mod=score_mod, mask_mod=mask_mod, allow_tf32=allow_tf32, layout=layout, backend=backend)
        if key is not None:
            if len(_dispatch) >= _DISPATCH_LIMIT:
                _dispatch.clear()
            _dispatch[key] = prepared
    if layout == "bshd":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    o, lse = new_outputs(q, v, bshd=prepared.out_bshd)
    if isinstance(alibi_slopes, torch.Tensor):  # read at each call (the key holds its shape, stride and alignment, not its values)
        slopes = alibi_slopes if alibi_slopes.dtype == torch.float32 and alibi_slopes.device == q.device else alibi_slopes.to(device=q.device, dtype=torch.float32)
        prepared.launch(q, k, v, o, lse, alibi_slopes=slopes)
    else:
        prepared.launch(q, k, v, o, lse)
    if layout == "bshd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def _prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, alibi_slopes, backend: str, layout: str, **options) -> PreparedCall:
    """Check a call's arguments, validate its spec and get its kernel (built on first use): once per dispatch key."""
    q, k, v, spec, slopes = _checked(q, k, v, alibi_slopes=alibi_slopes, layout=layout, **options)
    kernel = kernel_for(spec, q.device, backend=backend, tma=tma_compatible(q, k, v))
    return PreparedCall(kernel, spec.runtime_scalars(), None if isinstance(alibi_slopes, torch.Tensor) else slopes, layout == "bshd")


def _checked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, causal_align: str, scale: Optional[float], window,
             alibi_slopes, softcap: Optional[float], score_mod: Optional[str], mask_mod: Optional[str], allow_tf32: bool,
             layout: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionSpec, Optional[torch.Tensor]]:
    """The call's tensors viewed BHSD, its spec (every field validated, the bad one named) and
    its ALiBi slopes as a tensor; every argument checked first."""
    _check_inputs(q, k, v, layout)
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    window_left, window_right = _window(window, causal)
    spec = _spec(q, k, v, scale=scale, causal=causal, causal_align=causal_align, window_left=window_left,
                 window_right=window_right, alibi=alibi_slopes is not None, softcap=softcap, score_mod=score_mod,
                 mask_mod=mask_mod, allow_tf32=allow_tf32)
    return q, k, v, spec, _slopes(q, alibi_slopes)


def _slopes(q: torch.Tensor, alibi_slopes) -> Optional[torch.Tensor]:
    """The ALiBi slopes as an fp32 tensor on q's device (None without ALiBi), checked."""
    if isinstance(alibi_slopes, torch.Tensor):
        # checked without reading the values back (no device sync; traceable by torch.compile)
        if alibi_slopes.shape != (q.shape[1],) or not alibi_slopes.is_floating_point():
            raise AttnforgeError(f"alibi_slopes has shape {tuple(alibi_slopes.shape)} and dtype {alibi_slopes.dtype}", where="alibi_slopes",
                                 hint=f"one float per query head: shape ({q.shape[1]},)")
        return alibi_slopes.to(device=q.device, dtype=torch.float32)
    if alibi_slopes is not None:
        values = AttentionSpec(heads=q.shape[1], head_dim=q.shape[3], alibi_slopes=alibi_slopes).alibi_slopes
        return torch.tensor(values, dtype=torch.float32, device=q.device)
    return None


def _attention_traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, return_lse: bool, backend: str, layout: str,
                      **options) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``attention`` under torch.compile: the custom op ``torch.ops.attnforge.attention``."""
    q, k, v, spec, slopes = _checked(q, k, v, layout=layout, **options)
    o, lse = _attention_op(q, k, v, slopes, float(spec.scale), spec.causal, spec.causal_align, spec.window_left, spec.window_right,
                           options["softcap"], options["score_mod"], options["mask_mod"], options["allow_tf32"], layout == "bshd", backend)
    if layout == "bshd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


__all__ = ["attention", "load", "kernel_for"]
