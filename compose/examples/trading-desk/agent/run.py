"""The example agent runner: one task for the model through the sidecar, then the answer.

It knows no service URL and no credential: OPENAI_BASE_URL points at the sidecar and
OPENAI_API_KEY is this agent's token (both from agents/<id>.env).

- mediated agents just ask: the sidecar offers the granted tools, runs them and returns the
  final answer.
- native agents (the compiler mounts /claw/mcp.json for them) own the loop: they list their
  tools over MCP, offer them to the model, and run the model's calls with `tools/call`.
  Outside a pod (scripts/demo.sh), CLAW_MCP_CONFIG names that file instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from string import Template
from typing import Any

from openai import APIError, AsyncOpenAI

QUESTION = "Summarise my positions and buying power, and the latest news on my holdings."
CONTEXT = Path("/claw/CONTEXT.md")
MCP_CONFIG = Path(os.environ.get("CLAW_MCP_CONFIG", "/claw/mcp.json"))
MAX_TURNS = 8


def first_messages() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if CONTEXT.is_file():
        messages.append({"role": "system", "content": CONTEXT.read_text(encoding="utf-8")})
    messages.append({"role": "user", "content": os.environ.get("CLAW_QUESTION", QUESTION)})
    return messages


def mcp_server(config_path: Path) -> tuple[str, dict[str, str]]:
    """URL and headers of the one server in mcp.json, with ${VAR} taken from the environment."""
    [server] = json.loads(config_path.read_text(encoding="utf-8"))["mcpServers"].values()
    headers = {k: Template(v).substitute(os.environ) for k, v in server.get("headers", {}).items()}
    return server["url"], headers


async def ask(llm: AsyncOpenAI, model: str) -> str:
    reply = await llm.chat.completions.create(model=model, messages=first_messages())
    return reply.choices[0].message.content or ""


async def native_loop(llm: AsyncOpenAI, model: str, config_path: Path) -> str:
    # Imported here so a mediated agent's image needs no MCP client.
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    url, headers = mcp_server(config_path)
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as session,
    ):
        listing = await session.list_tools()
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or "",
                    "parameters": tool.input_schema,
                },
            }
            for tool in listing.tools
        ]
        messages = first_messages()
        for _ in range(MAX_TURNS):
            reply = await llm.chat.completions.create(model=model, messages=messages, tools=tools)
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = await session.call_tool(
                    call.function.name, json.loads(call.function.arguments or "{}")
                )
                text = "".join(b.text for b in result.content if getattr(b, "text", None))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return f"(stopped after {MAX_TURNS} model turns without an answer)"


async def main() -> int:
    model = os.environ.get("CLAW_MODEL", "gpt-4o-mini")
    # No SDK retries: a mediated request may already have run tools, so one question is one
    # request (and one audit record); the sidecar's error says whether trying again helps.
    async with AsyncOpenAI(max_retries=0) as llm:  # reads OPENAI_BASE_URL and OPENAI_API_KEY
        try:
            if MCP_CONFIG.is_file():
                answer = await native_loop(llm, model, MCP_CONFIG)
            else:
                answer = await ask(llm, model)
        except Exception as exc:  # one line for whoever reads the agent's log, no traceback
            print(f"agent: {failure(exc)}", file=sys.stderr)
            return 1
    print(answer)
    return 0


def failure(exc: BaseException) -> str:
    """What went wrong, in one line. The MCP client runs in a task group, so an error inside
    the native loop arrives wrapped in an exception group: its first leaf is the cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, APIError):
        return f"the model request failed: {describe(exc)}"
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def describe(exc: APIError) -> str:
    """One line from the error the sidecar (or the SDK) gave, without a traceback."""
    body = exc.body if isinstance(exc.body, dict) else {}
    message = body.get("message") or exc.message
    code = f" ({body['code']})" if body.get("code") else ""
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}{code}: {message}" if status else message


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
