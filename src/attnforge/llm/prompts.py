"""Prompt templates (``prompts/*.md``, each with a version line) and their rendering.

A template holds ``{{ name }}`` placeholders; ``render`` fills every one from its keyword
arguments in one pass (so text that itself holds braces is left alone) and refuses a missing
or an unknown name. The version line stays in the rendered text, so a transcript records which
version of a prompt produced an answer. The builders below (``sketch_prompt`` ...) gather the
context from the spec, the target, the TL manual and the library.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from ..spec import AttentionSpec
from ..targets import Target, get_target
from ..tl import catalog
from .errors import LLMError
from .facts import module_contract, semantics, spec_facts, target_facts

_PACKAGE = "attnforge.llm"
_VERSION = re.compile(r"^<!-- attnforge prompt (?P<name>\w+), version (?P<version>\d+) -->$")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def prompt_names() -> list[str]:
    """The shipped templates, by name (``stage1_sketch``, ...)."""
    folder = resources.files(_PACKAGE).joinpath("prompts")
    return sorted(p.name[:-3] for p in folder.iterdir() if p.name.endswith(".md"))


@functools.lru_cache(maxsize=None)
def template_text(name: str) -> str:
    """A template as shipped, version line and placeholders included (``attnforge prompts show NAME``)."""
    if name not in prompt_names():
        raise LLMError(f"no prompt template {name!r}", where="prompts", hint="templates: " + ", ".join(prompt_names()))
    text = resources.files(_PACKAGE).joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")
    first = text.split("\n", 1)[0]
    match = _VERSION.match(first)
    if match is None or match["name"] != name:
        raise LLMError(f"template {name} does not start with its version line", where=f"prompts/{name}.md:1",
                       hint=f"first line: <!-- attnforge prompt {name}, version N -->")
    return text


def prompt_version(name: str) -> int:
    match = _VERSION.match(template_text(name).split("\n", 1)[0])
    assert match is not None  # template_text checked it
    return int(match["version"])


def placeholders(name: str) -> list[str]:
    """The names a template needs, in order of first use."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(template_text(name))))


def render(name: str, **context: str | int) -> str:
    """Template ``name`` with every placeholder filled from ``context``."""
    needed = placeholders(name)
    missing = [k for k in needed if k not in context]
    unknown = sorted(set(context) - set(needed))
    if missing or unknown:
        problem = "; ".join(filter(None, [missing and "missing " + ", ".join(missing), unknown and "unknown " + ", ".join(unknown)]))
        raise LLMError(f"prompt {name}: {problem}", where=f"prompts/{name}.md", hint="it takes: " + ", ".join(needed))
    for key, value in context.items():
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise LLMError(f"prompt {name}: {key} is {type(value).__name__}, not text", where=f"prompts/{name}.md")
    return _PLACEHOLDER.sub(lambda m: str(context[m[1]]), template_text(name))


@functools.lru_cache(maxsize=1)
def tl_manual() -> str:
    """docs/TL.md, shipped in the package (``attnforge/llm/TL.md``)."""
    try:
        return resources.files(_PACKAGE).joinpath("TL.md").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        raise LLMError("the TL manual is missing from the installed package", where="attnforge/llm/TL.md",
                       hint="reinstall attnforge (the manual is package data)") from None


def examples_for(spec: AttentionSpec) -> list[str]:
    """Library programs closest to the request: the plain one, then one per feature it uses."""
    names = ["gqa_fwd"]
    if spec.causal:
        names.append("gqa_causal_fwd" if spec.causal_align == "bottom_right" else "gqa_causal_topleft_fwd")
    if spec.windowed:
        names.append("sliding_window_fwd")
    if spec.alibi_slopes is not None:
        names.append("alibi_causal_fwd")
    if spec.softcap is not None:
        names.append("softcap_causal_fwd")
    if spec.is_decode:
        names.append("decode_split_kv")
    return [n for n in dict.fromkeys(names) if catalog.file_name(n)]


def examples_text(names: list[str]) -> str:
    return "\n\n".join(f"## {catalog.file_name(n)}\n\n```tl\n{catalog.source(n).rstrip()}\n```" for n in names)


def _target(target: Target | str) -> Target:
    return get_target(target) if isinstance(target, str) else target


HOPPER_FORM_RULES = """- Write the Hopper form (the manual's section 11): the gluon backend translates it, and only in the
  shape of `hopper_gqa_causal_fwd.tl` above. Two roles: `compute` on warps `0 : warps`, then `load`
  on warps `warps : warps + 1` with `regs 24`; K and V in rings of `stages` slots filled by async
  TMA copies that signal `k_ready`/`v_ready`, given back with `Arrive k_free` (after QK^T) and
  `Arrive v_free` (after PV); the compute loop's statements in that program's order (Wait, async
  QK^T GEMM, Wait GEMM, Arrive, scores, OnlineSoftmax, Cast, Reshape, Wait, async PV GEMM, Wait
  GEMM, Arrive), at most two loops (tiles seen whole,
  then masked ones); the epilogue Normalize, LogSumExp and the two stores. Features (masks, score
  modifiers) use the statements of the portable examples inside that loop."""


def sketch_prompt(spec: AttentionSpec, target: Target | str, form: str = "portable") -> str:
    """Stage 1, step 1: the TL sketch (parameters open), in the TL form the backend translates."""
    t = _target(target)
    names = (["hopper_gqa_causal_fwd"] if form == "hopper" else []) + examples_for(spec)
    return render("stage1_sketch", spec_facts=spec_facts(spec), semantics=semantics(), target_facts=target_facts(t),
                  tl_manual=tl_manual(), examples=examples_text(names), target_name=t.name, dtype=spec.dtype,
                  form_rules=HOPPER_FORM_RULES if form == "hopper" else "")


def params_prompt(spec: AttentionSpec, target: Target | str, sketch: str) -> str:
    """Stage 1, step 2: parameters for a sketch; a follow-up turn in the sketch's conversation."""
    t = _target(target)
    return render("stage1_params", sketch=sketch.strip(), target_facts=target_facts(t), spec_facts=spec_facts(spec),
                  target_name=t.name, max_warps=t.max_threads_per_block // 32)


def translate_prompt(spec: AttentionSpec, target: Target | str, program: str) -> str:
    """Stage 2: a checked TL program to a Triton module."""
    t = _target(target)
    return render("stage2_translate", tl_program=program.strip(), spec_facts=spec_facts(spec), semantics=semantics(),
                  target_facts=target_facts(t), module_contract=module_contract(spec), tl_manual=tl_manual(), target_name=t.name)


def translate_cuda_prompt(spec: AttentionSpec, target: Target | str, program: str, abi_source: str) -> str:
    """Stage 2 for the CUDA backend: a checked TL program to CUDA C++ kernels. ``abi_source``: the
    backend's own translation of the same program, whose launch facts and kernel headers are the
    ABI the model must keep (the model sees the headers, never the bodies)."""
    from ..backends.cuda.manual import translation_manual
    from ..backends.cuda.module import read_meta
    from .cuda_gate import header_text

    t = _target(target)
    meta = read_meta(abi_source)["kernels"]
    return render("stage2_translate_cuda", tl_program=program.strip(), spec_facts=spec_facts(spec), semantics=semantics(),
                  target_name=t.name, target_facts=target_facts(t), threads=", ".join(str(k["threads"]) for k in meta), smem=", ".join(str(k["smem"]) for k in meta),
                  headers=header_text(abi_source), manual=translation_manual(t), tl_manual=tl_manual())


def direct_prompt(spec: AttentionSpec, target: Target | str) -> str:
    """The baseline without TL: a Triton module straight from the request."""
    t = _target(target)
    return render("direct", spec_facts=spec_facts(spec), semantics=semantics(), target_facts=target_facts(t),
                  module_contract=module_contract(spec), target_name=t.name)


def feedback_prompt(feedback: str, *, language: str, round: int) -> str:
    """A follow-up turn: what failed (feedback.py's text) and a request for the whole corrected answer."""
    what = {"tl": "TL program", "python": "Triton module", "cuda": "CUDA kernels"}.get(language)
    if what is None:
        raise LLMError(f"language {language!r} is not tl, python or cuda", where="feedback_prompt")
    return render("feedback", what=what, feedback=feedback.strip(), fence=language, round=round)
