"""A scripted OpenAI-compatible upstream for the Docker end-to-end tests.

It plays a model that always uses one tool: a request whose last message is the user's gets a
call to the first offered tool whose name contains ``TOOL_MATCH`` (arguments: ``TOOL_ARGUMENTS``,
default ``{}``); a request whose last message
is a tool result gets a text answer quoting that result. Requests must carry the provider key
``EXPECTED_API_KEY`` (401 otherwise), which proves the sidecar, not the agent, supplied it.

Each request is summarised as one JSON line on stdout (never the key itself), so a test can read
what the model was shown with ``docker logs``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import sys
import time
from typing import Any

from aiohttp import web

ANSWER_PREFIX = "Scripted answer from tool data: "
DELAYED: web.AppKey[bool] = web.AppKey("delayed", bool)


def completion(model: str, message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-scripted-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def tool_call_message(tool_name: str, turn: int) -> dict[str, Any]:
    call = {
        "id": f"call_scripted_{turn}",
        "type": "function",
        "function": {"name": tool_name, "arguments": os.environ.get("TOOL_ARGUMENTS", "{}")},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def reply_for(body: dict[str, Any], tool_match: str) -> dict[str, Any]:
    messages = body.get("messages") or []
    model = body.get("model", "scripted")
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        text = ANSWER_PREFIX + str(last.get("content"))
        return completion(model, {"role": "assistant", "content": text}, "stop")
    tools = body.get("tools") or []
    offered = [t["function"]["name"] for t in tools if t.get("type") == "function"]
    matching = [name for name in offered if tool_match in name]
    if not matching:
        return completion(model, {"role": "assistant", "content": "No tool was offered."}, "stop")
    return completion(model, tool_call_message(matching[0], len(messages)), "tool_calls")


def summary(request: web.Request, body: dict[str, Any], authorized: bool) -> dict[str, Any]:
    messages = body.get("messages") or []
    return {
        "path": request.path,
        "authorized": authorized,
        "model": body.get("model"),
        "stream": bool(body.get("stream")),
        "roles": [m.get("role") for m in messages],
        "tool_call_ids": [call.get("id") for m in messages for call in m.get("tool_calls") or []],
        "tools": [t.get("function", {}).get("name") for t in body.get("tools") or []],
    }


async def chat_completions(request: web.Request) -> web.Response:
    presented = request.headers.get("Authorization", "")
    expected = f"Bearer {os.environ['EXPECTED_API_KEY']}"
    authorized = hmac.compare_digest(presented.encode(), expected.encode())
    body = await request.json()
    print(json.dumps(summary(request, body, authorized)), flush=True)
    if not authorized:
        error = {"message": "invalid api key", "type": "invalid_request_error", "code": "401"}
        return web.json_response({"error": error}, status=401)
    reply = reply_for(body, os.environ.get("TOOL_MATCH", ""))
    if reply["choices"][0]["finish_reason"] == "stop" and not request.app[DELAYED]:
        # The first answer after a tool result waits ANSWER_DELAY_S: a test's window to kill
        # the sidecar in the middle of a request whose tool call has run.
        request.app[DELAYED] = True
        await asyncio.sleep(float(os.environ.get("ANSWER_DELAY_S", "0")))
    return web.json_response(reply)


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def main() -> None:
    app = web.Application()
    app[DELAYED] = False
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="0.0.0.0", port=int(os.environ.get("PORT", "8000")), print=None)


if __name__ == "__main__":
    sys.exit(main())
