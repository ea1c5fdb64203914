"""Native mode: the agent's granted tools over MCP Streamable HTTP at ``/mcp``."""
