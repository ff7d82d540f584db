"""Stage 1: from an AttentionSpec and a target to TL programs. A planner offers plans best
first (``plans(spec, target, refused) -> Iterator[Plan]``); the pipeline takes the next one when
the compiler says a plan does not fit. The built-in planner works by rules; an LLM planner
will implement the same method."""

from .builtin import BuiltinPlanner, Plan, plan, plans
from .given import GivenPlanner

__all__ = ["BuiltinPlanner", "GivenPlanner", "Plan", "plan", "plans"]
