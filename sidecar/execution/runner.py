"""What runs a checked tool call: the executor, and the gate in front of it (governance/gate.py),
with one signature and one set of limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..model.checked_call import CheckedCall
from ..model.outcome import ToolOutcome


@dataclass(frozen=True, slots=True)
class CallLimits:
    """The bounds of one call, chosen by its caller from the agent's tool policy."""

    timeout_s: float
    max_result_bytes: int
    idempotency_key: str | None = None
    """Sent with a call that is neither read-only nor idempotent (SPEC §8.2)."""


class ToolRunner(Protocol):
    async def execute(self, agent_id: str, call: CheckedCall, limits: CallLimits) -> ToolOutcome:
        """Run ``call`` for ``agent_id`` and say how it went; refusals are outcomes too."""
        ...
