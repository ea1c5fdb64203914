"""``clawc discover SERVICE_URL``: a running MCP service's tool list as a descriptor (§11.1).

The tools are written exactly as the service states them, so the build pins what was reviewed:
the operator reads the file, trims what no agent should get, and grants the rest in the pod.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..compiler.errors import CompileError

DISCOVER_TIMEOUT_S = 30.0  # the whole listing, every page (the drift check's bound too)


async def _list_tools(url: str, headers: dict[str, str]) -> list[Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from ..sidecar.backends.mcp import all_tools
    from ..sidecar.backends.mcp_http import bounded_transport

    # The sidecar's bounded client: the same page, tool and answer-size bounds as its drift
    # check (a hostile service's endless listing costs clawc as little as the sidecar).
    http = httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(DISCOVER_TIMEOUT_S), transport=bounded_transport()
    )
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        return await all_tools(client)


def _tool_entry(tool: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description or tool.title or tool.name,
        "inputSchema": tool.input_schema,
    }
    if tool.annotations is not None:
        annotations = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
        if annotations:
            entry["annotations"] = annotations
    return entry


def discover_descriptor(
    url: str, token_env: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """:func:`fetch_descriptor` for callers without an event loop (the CLI)."""
    return asyncio.run(fetch_descriptor(url, token_env, env))


async def fetch_descriptor(
    url: str, token_env: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The descriptor of the MCP service at ``url`` (its MCP endpoint); with ``token_env``, the
    service is asked with that variable's value as a bearer token, and the descriptor names it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CompileError(f"{url!r} is not an http(s) URL of an MCP endpoint")
    if parts.username or parts.password:
        raise CompileError(
            "put the credential in an environment variable (--token-env), not the URL"
        )
    headers: dict[str, str] = {}
    auth: dict[str, str] = {"type": "none"}
    if token_env:
        token = (env if env is not None else os.environ).get(token_env)
        if not token:
            raise CompileError(f"--token-env {token_env}: the variable is not set")
        headers["Authorization"] = f"Bearer {token}"
        auth = {"type": "bearer", "env": token_env}
    try:
        tools = await asyncio.wait_for(_list_tools(url, headers), DISCOVER_TIMEOUT_S)
    except Exception as exc:
        cause = _first_cause(exc)
        raise CompileError(
            f"cannot list the tools of {url}: {type(cause).__name__}: {cause}"
        ) from None
    return {
        "version": 2,
        "description": "Tools discovered from an MCP service; review them before granting.",
        "auth": auth,
        "mcp": {"path": parts.path or "/"},
        "tools": [_tool_entry(tool) for tool in tools],
    }


def _first_cause(exc: BaseException) -> BaseException:
    """The error itself, not the task group that carried it out of the SDK's client."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def write_descriptor(descriptor: dict[str, Any], target: Path) -> None:
    target.write_text(json.dumps(descriptor, indent=2, ensure_ascii=False) + "\n")


def refresh_pod_descriptors(pod: Path, env: dict[str, str] | None = None) -> list[Path]:
    """``clawc compile --discover``: every JSON descriptor of the pod that declares ``mcp``, of a
    service with an ``x-claw.url``, gets the tool list its running service serves now."""
    import yaml

    document = yaml.safe_load(pod.read_text()) or {}
    refreshed: list[Path] = []
    for name, service in (document.get("services") or {}).items():
        claw = (service or {}).get("x-claw") or {}
        describe, base_url = claw.get("describe"), claw.get("url")
        if not describe or not base_url:
            continue
        path = pod.parent / describe
        if path.suffix != ".json":
            continue  # YAML descriptors keep their comments: refresh them with clawc discover
        current = json.loads(path.read_text())
        mcp = current.get("mcp")
        if not isinstance(mcp, dict):
            continue
        auth = current.get("auth") or {}
        token_env = auth.get("env") if auth.get("type") == "bearer" else None
        url = base_url.rstrip("/") + mcp.get("path", "/mcp")
        try:
            found = discover_descriptor(url, token_env, env)
        except CompileError as exc:
            raise CompileError(f"service {name}: {exc.reason}", file=str(path)) from None
        served = {tool["name"] for tool in found["tools"]}
        kept = [t for t in current.get("tools") or [] if "http" in t and t["name"] not in served]
        write_descriptor({**current, "tools": kept + found["tools"]}, path)
        refreshed.append(path)
    return refreshed
