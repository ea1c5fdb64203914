"""The one tool executor shared by mediated mode and the MCP endpoint."""
