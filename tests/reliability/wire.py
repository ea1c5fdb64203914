"""Provider wire bodies for the fault matrix, and SDK calls that report what the client saw."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import anthropic
import openai
import orjson

from tests.reliability.harness import Pod
from tests.support import secret_sweep
from tests.support.upstream import anthropic_message, openai_completion

Api = Literal["openai", "anthropic"]
OPENAI_MODEL = "gpt-4o"
ANTHROPIC_MODEL = "claude-haiku-4-5"


def tool_call(api: Api, name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict:
    """A model reply asking for one tool call."""
    if api == "openai":
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {
            "id": "chatcmpl-call",
            "object": "chat.completion",
            "created": 1,
            "model": OPENAI_MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    return {
        "id": "msg_call",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def text(api: Api, answer: str) -> dict:
    """A model reply with a final text answer."""
    if api == "openai":
        return openai_completion(answer, OPENAI_MODEL)
    return anthropic_message(answer, ANTHROPIC_MODEL)


def _openai_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-sse",
        "object": "chat.completion.chunk",
        "created": 3,
        "model": OPENAI_MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _anthropic_event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


def sse_events(api: Api, answer: str) -> list[bytes]:
    """A complete streamed text answer, one event per item (the first two start it)."""
    half = len(answer) // 2
    if api == "openai":
        return [
            _openai_chunk({"role": "assistant", "content": answer[:half]}),
            _openai_chunk({"content": answer[half:]}),
            _openai_chunk({}, finish="stop"),
            b"data: [DONE]\n\n",
        ]
    message = {
        "id": "msg_sse",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    block = {"type": "text", "text": ""}
    return [
        _anthropic_event("message_start", {"message": message})
        + _anthropic_event("content_block_start", {"index": 0, "content_block": block}),
        _anthropic_event(
            "content_block_delta",
            {"index": 0, "delta": {"type": "text_delta", "text": answer[:half]}},
        ),
        _anthropic_event(
            "content_block_delta",
            {"index": 0, "delta": {"type": "text_delta", "text": answer[half:]}},
        ),
        _anthropic_event("content_block_stop", {"index": 0})
        + _anthropic_event(
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 3},
            },
        )
        + _anthropic_event("message_stop", {}),
    ]


def sse_error_event(api: Api) -> bytes:
    if api == "openai":
        error = {"message": "upstream overloaded mid-stream", "type": "server_error", "code": None}
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n"
    error = {"type": "overloaded_error", "message": "upstream overloaded mid-stream"}
    return _anthropic_event("error", {"error": error})


# --- what the client saw ------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """An answer, or an error the SDK understood: HTTP status (None when it came in-band on a
    stream already answered 200) and our error code (None for errors relayed from upstream)."""

    answer: str | None = None
    status: int | None = None
    code: str | None = None
    message: str = ""
    retry_after: str | None = None

    @property
    def in_band(self) -> bool:
        return self.answer is None and self.status is None


async def ask(pod: Pod, api: Api, agent: str, prompt: str, *, stream: bool) -> Seen:
    """One request through the real SDK; every body and message is kept for the secret sweep."""
    messages = [{"role": "user", "content": prompt}]
    try:
        if api == "openai":
            seen = await _ask_openai(pod, agent, messages, stream)
        else:
            seen = await _ask_anthropic(pod, agent, messages, stream)
    except openai.APIStatusError as exc:
        seen = _openai_error(exc, exc.status_code, exc.response.headers.get("retry-after"))
    except openai.APIError as exc:  # an error event inside a stream
        seen = _openai_error(exc, None, None)
    except anthropic.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error") or {}
        in_band = exc.response.status_code == 200
        seen = Seen(
            status=None if in_band else exc.status_code,
            code=error.get("code"),
            message=str(error.get("message", exc.message)),
            retry_after=exc.response.headers.get("retry-after"),
        )
    secret_sweep.collect(f"{api} answer", orjson.dumps(seen.__dict__))
    return seen


def _openai_error(exc: openai.APIError, status: int | None, retry_after: str | None) -> Seen:
    body = exc.body if isinstance(exc.body, dict) else {}
    return Seen(status=status, code=body.get("code"), message=exc.message, retry_after=retry_after)


async def _ask_openai(pod: Pod, agent: str, messages: list, stream: bool) -> Seen:
    client = pod.openai(agent)
    if not stream:
        reply = await client.chat.completions.create(model=OPENAI_MODEL, messages=messages)
        return Seen(answer=reply.choices[0].message.content)
    parts = []
    finished = False
    response = await client.chat.completions.create(
        model=OPENAI_MODEL, messages=messages, stream=True
    )
    async for chunk in response:
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finished = finished or choice.finish_reason is not None
    # A stream that ends without a finish reason is not an answer.
    return Seen(answer="".join(parts) if finished else None, message="stream ended unfinished")


async def _ask_anthropic(pod: Pod, agent: str, messages: list, stream: bool) -> Seen:
    client = pod.anthropic(agent)
    if not stream:
        reply = await client.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=messages
        )
        return Seen(answer="".join(b.text for b in reply.content if b.type == "text"))
    async with client.messages.stream(
        model=ANTHROPIC_MODEL, max_tokens=64, messages=messages
    ) as events:
        final = await events.get_final_message()
    return Seen(answer="".join(b.text for b in final.content if b.type == "text"))
