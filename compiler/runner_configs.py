"""MCP client configs for native runners (SPEC §3, §7.5): the context's ``mcp.json`` (no
secret: it names ``${CLAW_AGENT_TOKEN}`` for clients that expand it) and, under ``agents/``
beside the env file, ready-to-use configs with the literal token for clients that do not
(fastmcp, the MCP Inspector, langchain-mcp-adapters) and Codex's TOML."""

from __future__ import annotations

import json
from typing import Any

SERVER_NAME = "clawpod"
# "http" is what Claude Code and most mcpServers readers call Streamable HTTP; some
# (langchain-mcp-adapters) read "transport" instead of "type".
MCP_TRANSPORT = "http"
TOKEN_REFERENCE = "${CLAW_AGENT_TOKEN}"


def mcp_config(url: str, token: str = TOKEN_REFERENCE) -> dict[str, Any]:
    """A standard ``mcpServers`` config; the token is a reference unless one is given."""
    server: dict[str, Any] = {"type": MCP_TRANSPORT}
    if token != TOKEN_REFERENCE:
        server["transport"] = MCP_TRANSPORT
    server |= {"url": url, "headers": {"Authorization": f"Bearer {token}"}}
    return {"mcpServers": {SERVER_NAME: server}}


def codex_config(agent_id: str, url: str, token: str) -> str:
    """Codex CLI's ``[mcp_servers.<name>]`` table (Streamable HTTP, a static header)."""
    # JSON strings of these ASCII values are valid TOML basic strings.
    return (
        f"# Codex CLI MCP server of agent '{agent_id}' (secret: holds its token);\n"
        "# merge into ~/.codex/config.toml. --rotate-tokens replaces it.\n"
        f"[mcp_servers.{SERVER_NAME}]\n"
        f"url = {json.dumps(url)}\n"
        f"http_headers = {{ Authorization = {json.dumps('Bearer ' + token)} }}\n"
    )
