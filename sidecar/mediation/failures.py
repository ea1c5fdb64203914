"""What the loop answers when it stops a call or the request (docs/contract.md §4.2 points 5,
11): a spent tool budget, a round mixing the sidecar's tools with the runner's, a repeated call,
the provider's failure. Entered only when one of them happens."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..manifest import ManagedTool, ToolPolicy
from ..model.conversation import ToolCall, ToolOutcome, refused
from ..model.errors import upstream_failure as upstream_error
from .commands import Fail, ModelFailed

NOT_EXECUTED = (
    "not executed: this response mixed sidecar tools and your own tools; "
    "re-issue sidecar tools and your own tools in separate turns"
)
BUDGET_EXHAUSTED = (
    "not executed: the tool budget of this request is spent; answer with what you have"
)


def budget_outcome() -> ToolOutcome:
    return refused("budget_exhausted", BUDGET_EXHAUSTED)


def mixed_outcome() -> ToolOutcome:
    return refused("mixed_executor_response", NOT_EXECUTED)


def timed_out(policy: ToolPolicy) -> Fail:
    return Fail(
        504,
        "timeout",
        f"the request exceeded its total tool budget of {policy.total_timeout_ms} ms",
    )


def budget_spent(calls: list[ToolCall], executed_rounds: int, policy: ToolPolicy) -> Fail:
    """The model kept calling tools once they were withdrawn (point 11)."""
    names = ", ".join(f"{c.name} ({c.id})" for c in calls)
    message = (
        f"the model kept calling tools after the tool budget was spent "
        f"({executed_rounds} rounds, max_rounds {policy.max_rounds}): {names}"
    )
    return Fail(502, "tool_budget_exhausted", message)


def mixed(calls: list[ToolCall], managed: Callable[[str], bool]) -> Fail:
    """A round mixing the sidecar's tools (``managed``) with the runner's: nothing ran."""
    sidecar = [f"{c.name} ({c.id})" for c in calls if managed(c.name)]
    runner = [f"{c.name} ({c.id})" for c in calls if not managed(c.name)]
    message = (
        "the model mixed sidecar tool calls [" + ", ".join(sidecar) + "] and runner tool "
        "calls [" + ", ".join(runner) + "] in one response; nothing was executed"
    )
    return Fail(502, "mixed_executor_response", message)


def upstream_failure(event: ModelFailed) -> Fail:
    if event.status is None:
        err = upstream_error(event.kind, event.message)
        return Fail(err.status, err.code, err.message)
    if event.status in (401, 403) or event.status >= 500:
        # The provider rejected the sidecar's key or failed: not the client's fault.
        message = f"provider answered {event.status}: {event.message}"
        return Fail(502, "upstream_error", message, retry_after=event.retry_after)
    return Fail(event.status, "upstream_error", event.message, retry_after=event.retry_after)


def repeated(tool: ManagedTool, earlier_id: str, earlier: ToolOutcome) -> ToolOutcome:
    """A call identical to one made before in this request: a repeatable tool's outcome again,
    any other refused (never executed twice)."""
    if tool.effect.repeatable:
        return dataclasses.replace(earlier, executed=False, latency_ms=0.0)
    return refused(
        "duplicate_call",
        f"identical call already made in this request (call {earlier_id}); "
        "it is not executed twice",
    )
