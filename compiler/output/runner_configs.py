"""MCP client configs for native runners (SPEC §3, §7.5): the context's ``mcp.json`` (no
secret: it names ``${CLAW_AGENT_TOKEN}`` for clients that expand it) and, under ``agents/``
beside the env file, ready-to-use configs with the literal token, one per client family:
``mcpServers`` readers (Claude Code, fastmcp, the MCP Inspector, the official SDK's users),
langchain-mcp-adapters, and Codex's TOML."""

from __future__ import annotations

import json
from typing import Any

from ..pod_file.reserved import AGENT_TOKEN_ENV

SERVER_NAME = "clawpod"
# "http" is Streamable HTTP to both families below, under a different key: mcpServers readers
# take "type", langchain-mcp-adapters takes "transport" and passes every other key on to its
# transport (so a "type" there fails), hence one file per family.
MCP_TRANSPORT = "http"
TOKEN_REFERENCE = f"${{{AGENT_TOKEN_ENV}}}"


def mcp_config(url: str, token: str = TOKEN_REFERENCE) -> dict[str, Any]:
    """A standard ``mcpServers`` config; the token is a reference unless one is given."""
    server = {"type": MCP_TRANSPORT, **_endpoint(url, token)}
    return {"mcpServers": {SERVER_NAME: server}}


def langchain_config(url: str, token: str) -> dict[str, Any]:
    """langchain-mcp-adapters' ``MultiServerMCPClient`` connections, as-is."""
    return {SERVER_NAME: {"transport": MCP_TRANSPORT, **_endpoint(url, token)}}


def _endpoint(url: str, token: str) -> dict[str, Any]:
    return {"url": url, "headers": {"Authorization": f"Bearer {token}"}}


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
