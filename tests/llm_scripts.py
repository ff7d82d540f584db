"""Scripted model answers for the LLM pipeline tests (not a test module): TL programs for a small
spec (the built-in planner's own text with small tiles, and broken variants of it), Triton
modules (attnforge's own translation made self-contained, and hostile variants of it), and a
client that answers from a list."""

from __future__ import annotations

from attnforge.backends import get_backend
from attnforge.llm.errors import LLMError
from attnforge.llm.messages import Completion
from attnforge.plan.builtin import prefill_source
from attnforge.selftest.model_style import model_style
from attnforge.spec import AttentionSpec
from attnforge.targets import get_target
from attnforge.tl.parser import parse

H100 = get_target("h100")
SPEC = AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="fp16")
CAUSAL = AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="fp16", causal=True)
SPEC_ARGS = ["--target", "h100", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dtype", "fp16"]
TILES = dict(BM=64, BN=32, warps=4, stages=2)


def program(spec: AttentionSpec = SPEC, **params: int) -> str:
    """The planner's TL program for ``spec`` on h100 with small tiles (fast in the interpreters)."""
    return prefill_source(spec, H100, {**TILES, **params})


def fenced(code: str, language: str = "tl") -> str:
    """An answer as models write them: a little reasoning, then the code block."""
    return f"The tiles fit the shared memory of the H100.\n\n```{language}\n{code.rstrip()}\n```\n"


def module(spec: AttentionSpec = SPEC, **params: int) -> str:
    """attnforge's own Triton translation of ``program(spec)``, self-contained as a model must write it."""
    source = get_backend("triton").translate(parse(program(spec, **params)), head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
    return model_style(source)


def with_launch_prefix(source: str, lines: str) -> str:
    """``source`` with ``lines`` run first thing in ``launch``."""
    head = "def launch(q, k, v, o, lse, *, scale) -> None:\n"
    assert head in source
    body = "".join(f"    {line}\n" for line in lines.strip("\n").split("\n"))
    return source.replace(head, head + body, 1)


HOST_ATTENTION = '''import math

import torch
import triton
import triton.language as tl

HEAD_DIM = 32
HEAD_DIM_V = 32
TENSOR_DTYPES = {"q": torch.float16, "k": torch.float16, "v": torch.float16, "o": torch.float16, "lse": torch.float32}


@triton.jit
def busy(x_ptr):
    pass


def launch(q, k, v, o, lse, *, scale) -> None:
    busy[(1,)](o)
    group = q.shape[1] // k.shape[1]
    kk = k.float().repeat_interleave(group, dim=1)
    vv = v.float().repeat_interleave(group, dim=1)
    s = (q.float()[:, :, :, None, :] * kk[:, :, None, :, :]).sum(-1) * scale
    m = s.amax(-1, keepdim=True)
    p = torch.pow(math.e, s - m)
    total = p.sum(-1, keepdim=True)
    o.copy_(((p / total)[..., None] * vv[:, :, None, :, :]).sum(-2).to(o.dtype))
    lse.copy_((m + torch.log(total)).squeeze(-1))
'''


class Scripted:
    """A client that answers from a list, and keeps every request (a test double for the network)."""

    spec = "openai:scripted"

    def __init__(self, answers: list[str]):
        self.answers = list(answers)
        self.requests: list[list] = []

    def complete(self, messages, *, max_tokens: int) -> Completion:
        self.requests.append(list(messages))
        if not self.answers:
            raise LLMError(f"the script has no answer for request {len(self.requests)}", where=self.spec)
        return Completion(self.answers.pop(0), 1000, 200, 0.01, "scripted-1")
