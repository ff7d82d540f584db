"""Caps on what a generation may spend (rounds, tokens, money) and its running totals."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .errors import BudgetExceeded, LLMError
from .messages import Completion


@dataclass(frozen=True)
class Prices:
    """US dollars per million input and output tokens, as providers publish them."""

    input_per_million: float
    output_per_million: float

    def __post_init__(self) -> None:
        for name in ("input_per_million", "output_per_million"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise LLMError(f"price {name} = {value!r} is not a number >= 0", where="prices",
                               hint="give US dollars per million tokens, e.g. 3.0")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million) / 1e6


class Budget:
    """Counts rounds, tokens and cost; refuses a request once a cap is reached.

    ``admit(max_tokens)`` runs before a request: it raises when no round or token is left and
    returns ``max_tokens`` clamped to the tokens left, so one answer can overshoot the token cap
    by its prompt at most. ``charge(completion)`` runs after: it adds the counts and raises
    ``BudgetExceeded`` (carrying the completion) when a cap is now passed. Thread-safe.
    """

    def __init__(self, *, max_rounds: int | None = None, max_total_tokens: int | None = None,
                 max_cost: float | None = None, prices: Prices | None = None):
        for name, value in (("max_rounds", max_rounds), ("max_total_tokens", max_total_tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise LLMError(f"{name} = {value!r} is not a positive integer", where="budget", hint="or None for no cap")
        if max_cost is not None and (isinstance(max_cost, bool) or not isinstance(max_cost, (int, float)) or not max_cost > 0):
            raise LLMError(f"max_cost = {max_cost!r} is not a positive number", where="budget", hint="US dollars, or None")
        if max_cost is not None and prices is None:
            raise LLMError("max_cost needs prices", where="budget",
                           hint="give prices per million input/output tokens, or drop max_cost")
        self.max_rounds = max_rounds
        self.max_total_tokens = max_total_tokens
        self.max_cost = max_cost
        self.prices = prices
        self.rounds = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.estimated = False  # some counts came from text length, not the server
        self._lock = threading.Lock()

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost(self) -> float | None:
        """Dollars spent so far, or None without prices."""
        return None if self.prices is None else self.prices.cost(self.input_tokens, self.output_tokens)

    def admit(self, max_tokens: int) -> int:
        """Reserve a round; the answer's token limit, clamped to what is left of the token cap."""
        with self._lock:
            if self.max_rounds is not None and self.rounds >= self.max_rounds:
                raise BudgetExceeded(f"all {self.max_rounds} rounds are used", hint="raise the round cap (max_rounds)")
            if self.max_total_tokens is not None and self.total_tokens >= self.max_total_tokens:
                raise BudgetExceeded(f"{self.total_tokens} tokens used of a cap of {self.max_total_tokens}",
                                     hint="raise the token cap (max_total_tokens)")
            cost = self.cost
            if self.max_cost is not None and cost is not None and cost >= self.max_cost:
                raise BudgetExceeded(f"${cost:.4f} spent of a cap of ${self.max_cost:.4f}", hint="raise the cost cap (max_cost)")
            self.rounds += 1
            if self.max_total_tokens is not None:
                return max(1, min(max_tokens, self.max_total_tokens - self.total_tokens))
            return max_tokens

    def charge(self, completion: Completion) -> None:
        """Add an answer's tokens; raise BudgetExceeded if that passed a cap."""
        with self._lock:
            self.input_tokens += completion.input_tokens
            self.output_tokens += completion.output_tokens
            self.estimated |= completion.estimated
            if self.max_total_tokens is not None and self.total_tokens > self.max_total_tokens:
                raise BudgetExceeded(f"{self.total_tokens} tokens used, over the cap of {self.max_total_tokens}",
                                     hint="raise the token cap (max_total_tokens)", completion=completion)
            cost = self.cost
            if self.max_cost is not None and cost is not None and cost > self.max_cost:
                raise BudgetExceeded(f"${cost:.4f} spent, over the cap of ${self.max_cost:.4f}",
                                     hint="raise the cost cap (max_cost)", completion=completion)

    def summary(self) -> dict[str, object]:
        """Totals for a report (JSON-ready)."""
        return {"rounds": self.rounds, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens, "estimated": self.estimated, "cost_usd": self.cost,
                "max_rounds": self.max_rounds, "max_total_tokens": self.max_total_tokens, "max_cost_usd": self.max_cost}
