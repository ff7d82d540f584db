"""A TL program written elsewhere (by a person, or an LLM) as the pipeline's one plan.

It goes through every gate the planner's programs do: the TL checker for the target here, then
(in ``generate``) the judge against the spec, translation, compile and verification.
"""

from __future__ import annotations

from typing import Collection, Iterator, Mapping

from ..errors import AttnforgeError, TLCheckError
from ..spec import AttentionSpec
from ..targets import Target
from ..tl.checker import check
from ..tl.parser import parse
from .builtin import Plan


class GivenPlanner:
    name = "given"

    def __init__(self, source: str, file: str = "kernel.tl"):
        self.source, self.file = source, file

    def plans(self, spec: AttentionSpec, target: Target, refused: Collection[str] = ()) -> Iterator[Plan]:
        program = parse(self.source, file=self.file)
        params = {p.name: p.value for k in program.kernels for p in k.params}
        for name in sorted(refused):
            if params.get(name):
                why = f": {refused[name]}" if isinstance(refused, Mapping) else ""
                raise AttnforgeError(f"the program sets {name} = 1, which the backend cannot do on {target.name}{why}", where=self.file, hint=f"set {name} = 0")
        result = check(program, target, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file=self.file)
        if not result.ok:
            raise TLCheckError(result.errors, file=self.file)
        kind = "decode" if program.declares("NSPLIT") else "prefill"  # a split count, fixed or chosen at launch
        yield Plan(program, self.source, params, kind, (f"given program {self.file}",), result)
