"""What Triton cannot do on a target, as rules with their reasons.

A TL program may ask for a strategy (a 0/1 parameter, ``analysis.STRATEGY_PARAMS``) that the
target's hardware lacks or that this Triton cannot compile there. The backend refuses such a
program before translating it, and the planner does not propose it; neither special-cases it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...targets import Target


@dataclass(frozen=True)
class Rule:
    strategy: str
    blocks: Callable[[Target], bool]
    reason: str
    hint: str


RULES: tuple[Rule, ...] = (
    Rule("tma", lambda t: not t.has_tma, "tma = 1 needs TMA (sm_90 or newer)", "set tma = 0: pointer loads with cp.async"),
    Rule("ws", lambda t: t.cc[0] == 9,
         "ws = 1 (warp_specialize) does not compile for sm_90 with Triton 3.6 (its NVGPUWarpSpecialization pass fails)",
         "set ws = 0 on Hopper"),
)


def refusal(strategy: str, target: Target) -> Rule | None:
    """The rule that keeps ``strategy`` off ``target``, if any."""
    return next((r for r in RULES if r.strategy == strategy and r.blocks(target)), None)
