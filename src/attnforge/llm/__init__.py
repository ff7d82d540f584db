"""The LLM path: clients behind one interface, prompts, answer extraction, feedback for the
stage-1 loop, a sandbox for model-written Python, and transcripts.

Nothing here imports an SDK until a client for it is opened, so ``import attnforge`` and
``import attnforge.llm`` work without the ``llm`` extra.
"""

from .budget import Budget, Prices
from .clients import open_client
from .errors import BudgetExceeded, LLMError, SandboxError, UnsafeCodeError
from .messages import Client, Completion, Message
from .replay import Replay
from .tracked import Tracked
from .transcript import Transcript, read_transcript

__all__ = [
    "Budget", "BudgetExceeded", "Client", "Completion", "LLMError", "Message", "Prices", "Replay", "SandboxError",
    "Tracked", "Transcript", "UnsafeCodeError", "open_client", "read_transcript",
]
