"""Native mode: the agent's granted tools over MCP Streamable HTTP at ``/mcp``."""

from clawpod.sidecar.mcp.endpoint import McpEndpoint

__all__ = ["McpEndpoint"]
