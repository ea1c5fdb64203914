"""The one tool executor shared by mediated mode and the MCP endpoint."""

from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.execution.outcome import ToolOutcome, refused

__all__ = ["ToolExecutor", "ToolOutcome", "refused"]
