"""A SCRIPTED demo model: an OpenAI Chat Completions endpoint that follows fixed rules.

It is not a language model. It exists so the example pod can run its main job with no network
and no provider key (scripts/demo.sh, or as a pod service on the egress network), and it
behaves the same way every time:

- told to "buy 10 NVDA" (or sell) while an order tool (``symbol``, ``side`` and ``quantity``
  arguments) is offered, it places that order;
- asked about a ticker symbol (NVDA, AAPL, ...) while a tool with a ``symbol`` argument is
  offered, it calls the first such tool once per symbol, and any other such tool whose
  description shares a word with the question (fundamentals, ...); asked about something a
  no-argument tool's description mentions (positions, balance, buying power), it calls that
  tool too;
- once the tool results are in the conversation, it answers with a summary of them;
- otherwise it says what it is and what it can do.

Every answer starts with "(scripted demo model)".

Routes (no authentication; the sidecar sends its provider key, which is ignored):
  GET  /healthz
  GET  /v1/models
  POST /v1/chat/completions           streaming (``"stream": true``) and not

Run: ``python app.py`` (listens on 0.0.0.0:8000, or $HOST:$PORT).
Tests and scripts/demo.sh import :func:`create_app` and read ``app[RECEIVED]`` (each request
body the model was sent).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from aiohttp import web

LABEL = "(scripted demo model)"
MODEL_ID = "clawpod-demo-scripted"
TICKER = re.compile(r"\b[A-Z]{2,5}\b")
NOT_TICKERS = {"USD", "EUR", "API", "OK", "AND", "THE", "ETF", "CEO"}
WORD = re.compile(r"[a-z]{5,}")
ORDER = re.compile(r"\b(?i:(buy|sell))\s+(\d+(?:\.\d+)?)\s+(?:shares of\s+)?([A-Z]{1,5})\b")
ORDER_ARGUMENTS = {"symbol", "side", "quantity"}
CREATED = 1_700_000_000  # fixed, so that replies are identical run after run

RECEIVED = web.AppKey("received", list)


def _functions(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t["function"] for t in body.get("tools") or [] if t.get("type") == "function"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _required(function: dict[str, Any]) -> list[str]:
    return list((function.get("parameters") or {}).get("required") or [])


def _words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def plan_calls(question: str, functions: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the rules pick for ``question``: (tool name, arguments) in order."""
    calls: list[tuple[str, dict[str, Any]]] = []
    order_tool = next((f for f in functions if set(_required(f)) == ORDER_ARGUMENTS), None)
    ordered: set[str] = set()
    if order_tool is not None:
        for side, quantity, symbol in ORDER.findall(question):
            amount = float(quantity) if "." in quantity else int(quantity)
            arguments = {"symbol": symbol, "side": side.lower(), "quantity": amount}
            calls.append((order_tool["name"], arguments))
            ordered.add(symbol)
    symbols = [s for s in dict.fromkeys(TICKER.findall(question)) if s not in NOT_TICKERS | ordered]
    words = _words(question)
    by_symbol = [f for f in functions if _required(f) == ["symbol"]]
    for rank, function in enumerate(by_symbol):
        if rank == 0 or words & _words(function.get("description", "")):
            calls += [(function["name"], {"symbol": symbol}) for symbol in symbols]
    for function in functions:
        if not _required(function) and words & _words(function.get("description", "")):
            calls.append((function["name"], {}))
    return calls


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} item(s)" if value else "none"
    if isinstance(value, dict):
        return f"{len(value)} field(s)"
    return str(value)


def summarise(result: str) -> str:
    """One line for one tool result (the sidecar's ``{"ok", "status", "data"}`` envelope)."""
    try:
        envelope = json.loads(result)
    except ValueError:
        return result[:200]
    if not isinstance(envelope, dict):
        return _describe(envelope)
    if envelope.get("ok") is False:
        error = envelope.get("error") or {}
        return f"failed ({error.get('code')}): {error.get('message')}"
    data = envelope.get("data", envelope)
    if not isinstance(data, dict):
        return _describe(data)
    return ", ".join(f"{key.replace('_', ' ')} {_describe(value)}" for key, value in data.items())


def next_message(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message the rules give for this request: tool calls or text."""
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    after = messages[last_user + 1 :]
    names = {
        call["id"]: call["function"]["name"]
        for message in after
        for call in message.get("tool_calls") or []
    }
    results = [m for m in after if m.get("role") == "tool"]
    if results:
        lines = [
            f"- {names.get(m.get('tool_call_id'), 'a tool')}: {summarise(_text(m.get('content')))}"
            for m in results
        ]
        return {"role": "assistant", "content": f"{LABEL} From your tools:\n" + "\n".join(lines)}
    question = _text(messages[last_user].get("content")) if last_user >= 0 else ""
    calls = plan_calls(question, _functions(body))
    if not calls:
        text = f"{LABEL} I follow fixed rules: ask about a ticker such as NVDA, or your positions."
        return {"role": "assistant", "content": text}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_demo_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for n, (name, arguments) in enumerate(calls, start=1)
        ],
    }


def _usage(body: dict[str, Any], message: dict[str, Any]) -> dict[str, int]:
    # A stand-in count (about four characters a token), so the audit's usage sums mean something.
    prompt = len(json.dumps(body.get("messages") or [])) // 4
    completion = max(1, len(json.dumps(message)) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(message: dict[str, Any]) -> str:
    return "tool_calls" if message.get("tool_calls") else "stop"


def completion(body: dict[str, Any], message: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-demo-{number}",
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model", MODEL_ID),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(message)}],
        "usage": _usage(body, message),
    }


def chunks(body: dict[str, Any], message: dict[str, Any], number: int) -> list[dict[str, Any]]:
    """The same reply as Chat Completions stream chunks (usage last when it was asked for)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-demo-{number}",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": body.get("model", MODEL_ID),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    for index, call in enumerate(message.get("tool_calls") or []):
        head = {**call, "index": index, "function": {**call["function"], "arguments": ""}}
        out.append(chunk({"tool_calls": [head]}))
        arguments = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
        out.append(chunk({"tool_calls": [arguments]}))
    for word in re.findall(r"\S+\s*", message.get("content") or ""):
        out.append(chunk({"content": word}))
    out.append(chunk({}, _finish_reason(message)))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append({**chunk({}), "choices": [], "usage": _usage(body, message)})
    return out


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def models(request: web.Request) -> web.Response:
    entry = {"id": MODEL_ID, "object": "model", "created": CREATED, "owned_by": "clawpod-demo"}
    return web.json_response({"object": "list", "data": [entry]})


async def chat_completions(request: web.Request) -> web.StreamResponse:
    try:
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise ValueError
    except ValueError:
        error = {"message": "expected a JSON object with messages", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=400)
    received = request.app[RECEIVED]
    received.append(body)
    message = next_message(body)
    if not body.get("stream"):
        return web.json_response(completion(body, message, len(received)))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for item in chunks(body, message, len(received)):
        await response.write(f"data: {json.dumps(item)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def create_app() -> web.Application:
    app = web.Application()
    app[RECEIVED] = []
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


def main() -> None:
    host, port = os.environ.get("HOST", "0.0.0.0"), int(os.environ.get("PORT", "8000"))
    web.run_app(create_app(), host=host, port=port)


if __name__ == "__main__":
    main()
