"""Stage 1: from an AttentionSpec and a target to a TL program (built-in planner; an LLM later)."""

from .builtin import Plan, plan

__all__ = ["Plan", "plan"]
