"""A client with a budget and a transcript: what the generation loop should call."""

from __future__ import annotations

from typing import Sequence

from .budget import Budget
from .errors import BudgetExceeded, LLMError
from .messages import Client, Completion, Message, as_messages, check_max_tokens
from .transcript import Transcript


class Tracked:
    """Wraps a client: the budget admits each request (and clamps its max_tokens), every answer
    or failure goes to the transcript, then the budget is charged (it may raise BudgetExceeded
    after the answer was recorded)."""

    def __init__(self, client: Client, *, budget: Budget | None = None, transcript: Transcript | None = None):
        self.client = client
        self.spec = client.spec
        self.budget = budget
        self.transcript = transcript

    def complete(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        msgs = as_messages(messages)
        check_max_tokens(max_tokens)
        allowed = self.budget.admit(max_tokens) if self.budget is not None else max_tokens
        try:
            completion = self.client.complete(msgs, max_tokens=allowed)
        except LLMError as err:
            if self.transcript is not None and not isinstance(err, BudgetExceeded):
                self.transcript.record_error(self.spec, msgs, allowed, err)
            raise
        if self.transcript is not None:
            prices = self.budget.prices if self.budget is not None else None
            cost = prices.cost(completion.input_tokens, completion.output_tokens) if prices is not None else None
            self.transcript.record(self.spec, msgs, allowed, completion, cost)
        if self.budget is not None:
            self.budget.charge(completion)
        return completion
