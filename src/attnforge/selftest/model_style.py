"""attnforge's own Triton translation rewritten the way a model must write a kernel module:
self-contained (no attnforge imports), launched the plain Triton way (``kernel[grid](...)``).

The LLM path's gate for model-written modules (static rules, then the sandbox) is exercised with
it: by the mutation suite (``where="model"`` mutants) and by the LLM tests, which need a correct
module to start from."""

from __future__ import annotations

import re

from ..errors import AttnforgeError

# launch_kernel(NAME, GRID, (\n ARGS \n), dict(CONSTEXPRS),\n num_warps=W, num_stages=S, slots=slots, index=I)
_LAUNCH = re.compile(r"launch_kernel\((\w+), (\(.*?,\)), \(\n(.*?)\n(\s*)\), dict\((.*?)\),\n\s*"
                     r"num_warps=(\d+), num_stages=(\d+), slots=slots, index=\d+\)", re.DOTALL)


def model_style(source: str) -> str:
    """``source`` (a generated Triton module) without attnforge's runtime: no imports from
    attnforge, no argument checks, windows clamped inline, kernels launched as ``kernel[grid]``.
    Raises AttnforgeError for a module this rewrite does not cover (TMA descriptors, persistent
    launches), rather than returning one that would not run."""
    source = re.sub(r"^from attnforge\S* import .*\n", "", source, flags=re.MULTILINE)
    source = source.replace(", checked: bool = False, slots: list | None = None) -> None:", ") -> None:")
    source = re.sub(r"^\s*``(checked|slots)``: .*\n", "", source, flags=re.MULTILINE)  # their docstring lines
    source = re.sub(r"^\s*if not checked:\n\s*check_arguments\(.*\)\n", "", source, flags=re.MULTILINE)
    source = re.sub(r"^\s*check_arguments\(.*\)\n", "", source, flags=re.MULTILINE)
    source = re.sub(r'window_bound\("\w+", (\w+), Sq, Sk\)', r"min(\1, Sq + Sk)", source)

    def plain(m: re.Match) -> str:
        name, grid, args, indent, consts, warps, stages = m.groups()
        inner = indent + "    "
        return f"{name}[{grid}](\n{args}\n{inner}{consts},\n{inner}num_warps={warps}, num_stages={stages},\n{indent})"

    source = _LAUNCH.sub(plain, source)
    source = re.sub(r"\bscratch\((torch\.empty\(.*\))\)$", r"\1", source, flags=re.MULTILINE)
    left = [name for name in ("launch_kernel", "checked", "tma_descriptor", "program_slots", "split_count", "window_bound", "scratch(") if name in source]
    if left:
        raise AttnforgeError(f"cannot rewrite this module in a model's style: it still uses {', '.join(left)}", where="selftest.model_style",
                             hint="plan it without TMA, persistent launches and launch-time split counts (a prefill spec on an a100 target), or extend model_style")
    return source
