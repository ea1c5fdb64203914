"""The one tool executor shared by mediated mode and the MCP endpoint."""

from sidecar.execution.executor import ToolExecutor
from sidecar.execution.outcome import ToolOutcome, refused

__all__ = ["ToolExecutor", "ToolOutcome", "refused"]
