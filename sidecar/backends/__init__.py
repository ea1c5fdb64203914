"""How a checked tool call reaches its service: HTTP requests and results, MCP services through
the official client, and the drift check and quarantine of those services."""
