"""Stand-ins for OpenAI-compatible local model servers, each with its real server's habits.

A real aiohttp server on 127.0.0.1 whose "model" follows a script of turns (a tool call or a
text answer); what differs between servers is the wire shape of each answer, taken from their
source (see ``tests/fixtures/local_servers/SOURCES.md``):

``LlamaCppPython`` (llama-cpp-python 0.3.x, ``llama_cpp/server/app.py`` and
``llama_chat_format.py`` ``chatml_function_calling``):
- a streamed request offering tools under ``tool_choice: auto`` (or none given) whose model
  picks a tool raises "Automatic streaming tool choice is not supported" inside the SSE
  publisher: the answer is ``200 text/event-stream`` carrying nothing at all;
- a streamed text answer has no usage chunk (``stream_options`` is ignored);
- a tool call is mirrored in the legacy ``function_call`` field; this stub also reuses the id
  ``call_0`` in every round, as templates that number calls per turn do;
- routes it does not serve (``/v1/responses``) answer FastAPI's ``404 {"detail":"Not Found"}``.

``LlamaServer`` (llama.cpp's ``llama-server``, ``tools/server/server-task.cpp``): Responses
streams whose events carry no ``output_index``, ``content_index`` or ``sequence_number``, and
whose function-call items carry no ``id``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass(frozen=True, slots=True)
class Turn:
    """What the scripted model says next: a call (``tool`` and ``arguments``) or ``text``."""

    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


def call(tool: str, **arguments: Any) -> Turn:
    return Turn(tool=tool, arguments=arguments)


def say(text: str) -> Turn:
    return Turn(text=text)


@dataclass(slots=True)
class Seen:
    path: str
    body: dict[str, Any]

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def offers_tools(self) -> bool:
        return bool(self.body.get("tools"))


class LocalServer:
    """The scripted model behind a local server's routes; subclasses render its answers."""

    routes: tuple[str, ...] = ()

    def __init__(self, *turns: Turn) -> None:
        self.script = list(turns)
        self.seen: list[Seen] = []
        self._runner: web.AppRunner | None = None
        self.url = ""
        self._created = itertools.count(1_700_000_000)

    async def __aenter__(self) -> LocalServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def requests_to(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else {}
        self.seen.append(Seen(request.path, body))
        if request.method != "POST" or request.path not in self.routes:
            return web.json_response({"detail": "Not Found"}, status=404)
        return await self.answer(request, body)

    async def answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        raise NotImplementedError

    def next_turn(self) -> Turn:
        return self.script.pop(0) if self.script else say("(the script ran out)")

    def created(self) -> int:
        return next(self._created)


async def sse(
    request: web.Request, payloads: list[Any], *, done: bool = True
) -> web.StreamResponse:
    """An SSE answer written one event at a time, sse-starlette's framing."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await response.prepare(request)
    for payload in payloads:
        if isinstance(payload, tuple):  # (event name, data)
            frame = b"event: " + payload[0].encode() + b"\ndata: " + orjson.dumps(payload[1])
        else:
            frame = b"data: " + orjson.dumps(payload)
        await response.write(frame + b"\n\n")
    if done:
        await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def chat_completion(turn: Turn, created: int) -> dict[str, Any]:
    """A whole Chat Completions answer: a call mirrored in the legacy ``function_call`` field,
    its id ``call_0`` whatever the round."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    finish = "stop"
    if turn.tool:
        arguments = orjson.dumps(turn.arguments).decode()
        function = {"name": turn.tool, "arguments": arguments}
        message = {
            "role": "assistant",
            "content": None,
            "function_call": function,
            "tool_calls": [{"id": "call_0", "type": "function", "function": function}],
        }
        finish = "tool_calls"
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": created,
        "model": "local-model",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
    }


class LlamaCppPython(LocalServer):
    routes = ("/v1/chat/completions",)

    async def answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        automatic = body.get("tool_choice") in (None, "auto") and bool(body.get("tools"))
        if body.get("stream"):
            if automatic and self.script and self.script[0].tool:
                # The publisher raised before its first chunk: headers out, nothing else.
                response = web.StreamResponse(
                    headers={"Content-Type": "text/event-stream; charset=utf-8"}
                )
                await response.prepare(request)
                await response.write(b": ping - 2026-11-25 20:00:00.000000\r\n\r\n")
                await response.write_eof()
                return response
            return await sse(request, self._text_chunks(self.next_turn()))
        return web.json_response(chat_completion(self.next_turn(), self.created()))

    def _text_chunks(self, turn: Turn) -> list[dict[str, Any]]:
        head = {"id": "chatcmpl-local", "object": "chat.completion.chunk"}
        head |= {"created": self.created(), "model": "local-model"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**head, "choices": [choice]}

        words = [w + " " for w in turn.text.split(" ")]
        words[-1] = words[-1].rstrip(" ")
        return [
            chunk({"role": "assistant"}),
            *(chunk({"content": word}) for word in words),
            chunk({}, "stop"),
        ]


class LlamaServer(LocalServer):
    """llama.cpp's ``llama-server``: Chat Completions and Responses."""

    routes = ("/v1/chat/completions", "/v1/responses")

    async def answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        turn = self.next_turn()
        if request.path != "/v1/responses":
            return web.json_response(chat_completion(turn, self.created()))
        if body.get("stream"):
            return await sse(request, self._response_events(turn), done=False)
        return web.json_response(self._response(self._output(turn)))

    def _output(self, turn: Turn) -> list[dict[str, Any]]:
        if turn.tool:
            arguments = orjson.dumps(turn.arguments).decode()
            item = {"type": "function_call", "status": "completed", "arguments": arguments}
            return [{**item, "call_id": "fc_call_0", "name": turn.tool}]
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}
        item = {"type": "message", "status": "completed", "id": "msg_local"}
        return [{**item, "content": [part], "role": "assistant"}]

    def _response(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        response = {"id": "resp_local", "object": "response", "created_at": self.created()}
        response |= {"status": "completed", "model": "local-model", "output": output}
        return response | {"usage": {"input_tokens": 12, "output_tokens": 4, "total_tokens": 16}}

    def _response_events(self, turn: Turn) -> list[tuple[str, dict[str, Any]]]:
        """``to_json_oaicompat_resp`` (partial) then ``..._resp_stream`` (final): no
        output_index, content_index or sequence_number; a call's item has no id."""
        started = {"id": "resp_local", "object": "response", "status": "in_progress"}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": started},
            {"type": "response.in_progress", "response": started},
        ]
        output = self._output(turn)
        if turn.tool:
            item = {"arguments": "", "call_id": "fc_call_0", "name": turn.tool}
            item |= {"type": "function_call", "status": "in_progress"}
            events.append({"type": "response.output_item.added", "item": item})
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "delta": output[0]["arguments"],
                    "item_id": "fc_call_0",
                }
            )
        else:
            message = {"content": [], "id": "msg_local", "role": "assistant"}
            message |= {"status": "in_progress", "type": "message"}
            events.append({"type": "response.output_item.added", "item": message})
            part = {"type": "output_text", "text": ""}
            added = {"type": "response.content_part.added", "item_id": "msg_local", "part": part}
            events.append(added)
            for piece in re.findall(r"\S+\s*", turn.text):
                delta = {"type": "response.output_text.delta", "item_id": "msg_local"}
                events.append({**delta, "delta": piece})
            text = {"type": "response.output_text.done", "item_id": "msg_local"}
            events.append({**text, "text": turn.text})
            done_part = {"type": "response.content_part.done", "item_id": "msg_local"}
            events.append({**done_part, "part": output[0]["content"][0]})
        events.append({"type": "response.output_item.done", "item": output[0]})
        events.append({"type": "response.completed", "response": self._response(output)})
        return [(event["type"], event) for event in events]
