"""Scripted OpenAI Responses upstream answers: response bodies and their faithful SSE.

The stream follows the documented event order — ``response.created``, ``response.in_progress``,
per output item ``response.output_item.added`` / its deltas / ``response.output_item.done``,
then ``response.completed`` — with ``sequence_number`` counting up from 0. It is written
independently of the sidecar's codec, so tests do not grade the codec with its own output.
"""

from __future__ import annotations

from typing import Any

import orjson

from tests.support.upstream import Reply

MODEL = "gpt-4o"


def message(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def call(call_id: str, name: str, arguments: Any, item_id: str | None = None) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return {
        "id": item_id or f"fc_{call_id}",
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": text,
    }


def reasoning(item_id: str, encrypted: str | None = None, summary: str = "") -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def response(
    *output: dict[str, Any],
    response_id: str = "resp_1",
    input_tokens: int = 10,
    output_tokens: int = 3,
    status: str = "completed",
    **fields: Any,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": MODEL,
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
        **fields,
    }


def sse_events(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event type, payload) of the stream that carries ``body``."""
    events: list[tuple[str, dict[str, Any]]] = []

    def emit(kind: str, **payload: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **payload}))

    pending = {**body, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for index, item in enumerate(body["output"]):
        ids = {"item_id": item.get("id", ""), "output_index": index}
        if item["type"] == "message":
            emit("response.output_item.added", output_index=index, item={**item, "content": []})
            for position, part in enumerate(item["content"]):
                at = {**ids, "content_index": position}
                emit("response.content_part.added", **at, part={**part, "text": ""})
                for start in range(0, len(part["text"]), 5):
                    delta = part["text"][start : start + 5]
                    emit("response.output_text.delta", **at, delta=delta, logprobs=[])
                emit("response.output_text.done", **at, text=part["text"], logprobs=[])
                emit("response.content_part.done", **at, part=part)
        elif item["type"] == "function_call":
            emit("response.output_item.added", output_index=index, item={**item, "arguments": ""})
            arguments = item["arguments"]
            for start in range(0, len(arguments), 4):
                emit(
                    "response.function_call_arguments.delta",
                    **ids,
                    delta=arguments[start : start + 4],
                )
            emit("response.function_call_arguments.done", **ids, arguments=arguments)
        else:
            emit("response.output_item.added", output_index=index, item=item)
        emit("response.output_item.done", output_index=index, item=item)
    emit(f"response.{body['status']}", response=body)
    return events


def sse(body: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
        for kind, payload in sse_events(body)
    )


def reply(body: dict[str, Any], *, stream: bool = False) -> Reply:
    return Reply.sse(sse(body)) if stream else Reply.json(body)
