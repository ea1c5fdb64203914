"""A tool call as the sidecar's callers make one: the one argument check, then the runner."""

from __future__ import annotations

from typing import Any

from clawpod.sidecar.execution.executor import CallLimits, ToolExecutor
from clawpod.sidecar.manifest import ManagedTool
from clawpod.sidecar.model.conversation import ToolOutcome


async def run_tool(
    executor: ToolExecutor,
    agent_id: str,
    tool: ManagedTool,
    arguments: str | dict[str, Any] | None,
    *,
    timeout_s: float = 5.0,
    max_result_bytes: int = 65536,
) -> ToolOutcome:
    """``invalid_arguments`` for arguments the check refuses, else what the executor returns."""
    checked = executor.check(tool, arguments)
    if isinstance(checked, ToolOutcome):
        return checked
    return await executor.execute(agent_id, checked, CallLimits(timeout_s, max_result_bytes))
