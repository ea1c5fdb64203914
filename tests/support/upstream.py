"""The stub LLM upstream shared by the test suites: a real aiohttp server on 127.0.0.1.

It replays recorded provider exchanges from the shared fixtures (every cassette format listed
in the fixtures' SOURCES.md) and serves scripted conversations: a queue of replies per route
(JSON, SSE, any status, delays, gates, connection resets, garbage). Every request it receives
is recorded with its headers and body so tests can assert what went upstream.

    async with StubUpstream() as upstream:
        upstream.enqueue("openai", Reply.json({...}))
        upstream.enqueue_fixture("openai/nonstream_tool_loop.pydantic-ai.yaml", turn=0)
        ... OpenAI provider base URL: upstream.openai_url; Anthropic: upstream.anthropic_url
        upstream.received[-1].json["model"]
"""

from __future__ import annotations

import asyncio
import gzip
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

Api = Literal["openai", "anthropic"]
ROUTES: dict[str, str] = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}
SSE = "text/event-stream; charset=utf-8"
JSON = "application/json"

# The recorded provider exchanges the tests replay (origins and licences in their SOURCES.md);
# CLAW_FIXTURES points the suite at another copy.
FIXTURES_DIR = Path(
    os.environ.get("CLAW_FIXTURES", Path(__file__).resolve().parents[1] / "fixtures" / "providers")
)


# --- recorded exchanges -------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """One recorded provider exchange, decoded to the exact bytes the provider sent."""

    source: str  # fixture path relative to the fixtures dir
    turn: int  # interaction index within the fixture
    api: Api
    request: dict[str, Any] | None  # the recorded request body, parsed
    status: int
    content_type: str
    body: bytes

    @property
    def stream(self) -> bool:
        return self.content_type.startswith("text/event-stream")

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)

    def reply(self) -> Reply:
        if self.stream:
            return Reply.sse(self.body, status=self.status)
        return Reply(status=self.status, body=self.body, content_type=self.content_type)


def fixture_files() -> list[str]:
    """Every fixture (relative path) a stub can replay."""
    suffixes = (".yaml", ".json", ".chunks.jsonl", ".sse")
    return sorted(
        p.relative_to(FIXTURES_DIR).as_posix()
        for p in FIXTURES_DIR.rglob("*")
        if p.is_file() and p.name.endswith(suffixes)
    )


def load_fixture(name: str) -> list[Recorded]:
    """Parse one fixture file into its exchanges (cassettes hold several turns)."""
    path = FIXTURES_DIR / name
    api = _api_of(name)
    if path.name.endswith(".yaml"):
        return _load_cassette(name, path, api)
    data = path.read_bytes()
    if path.name.endswith(".chunks.jsonl"):
        return [Recorded(name, 0, api, None, 200, SSE, chunks_to_sse(data))]
    if path.name.endswith(".sse"):
        return [Recorded(name, _turn_of(path.name), api, None, 200, SSE, data)]
    status = int(path.name.split("_")[1]) if path.name.startswith("error_") else 200
    return [Recorded(name, 0, api, None, status, JSON, data)]


def chunks_to_sse(jsonl: bytes) -> bytes:
    """vercel ``*.chunks.jsonl`` (one data payload per line) to SSE with ``event:`` lines."""
    events = []
    for line in jsonl.splitlines():
        if line.strip():
            event_type = orjson.loads(line)["type"]
            events.append(b"event: " + event_type.encode() + b"\ndata: " + line + b"\n\n")
    return b"".join(events)


def _api_of(name: str) -> Api:
    first = name.split("/")[0]
    if first == "derived":
        return "anthropic" if name.split("/")[-1].startswith("anthropic_") else "openai"
    return "anthropic" if first == "anthropic" else "openai"


def _turn_of(filename: str) -> int:
    marker = filename.rsplit(".turn", 1)[-1].split(".")[0]
    return int(marker) - 1 if marker.isdigit() else 0


def _load_cassette(name: str, path: Path, api: Api) -> list[Recorded]:
    cassette = yaml.safe_load(path.read_text())
    exchanges = []
    for turn, interaction in enumerate(cassette["interactions"]):
        request, response = interaction["request"], interaction["response"]
        status = response["status"]["code"] if "status" in response else response["status_code"]
        headers = {k.lower(): v[0] for k, v in (response.get("headers") or {}).items()}
        exchanges.append(
            Recorded(
                source=name,
                turn=turn,
                api=api,
                request=_request_body(request),
                status=int(status),
                content_type=headers.get("content-type", JSON),
                body=_response_body(response),
            )
        )
    return exchanges


def _request_body(request: dict[str, Any]) -> dict[str, Any] | None:
    if "parsed_body" in request:
        return request["parsed_body"]
    raw = request.get("body")
    if isinstance(raw, dict):
        raw = raw.get("string")
    if isinstance(raw, bytes):
        raw = _gunzip(raw)
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None


def _response_body(response: dict[str, Any]) -> bytes:
    if "parsed_body" in response:  # pydantic-ai stores JSON parsed
        return orjson.dumps(response["parsed_body"])
    if "content" in response:  # httpx format (gpt-fn)
        content = response["content"]
        return content.encode() if isinstance(content, str) else _gunzip(content)
    raw = response["body"]["string"]
    return _gunzip(raw) if isinstance(raw, bytes) else raw.encode()


def _gunzip(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


# --- scripted replies ---------------------------------------------------------------------------

RESET = object()  # in Reply.chunks: drop the connection at this point


@dataclass
class Reply:
    """One scripted upstream answer.

    ``chunks`` streams the body in pieces, each written as it comes; an item may also be a
    float (sleep that long), an ``asyncio.Event`` (wait until the test sets it) or ``RESET``.
    """

    status: int = 200
    body: bytes = b""
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    chunks: Sequence[bytes | float | asyncio.Event | object] | None = None
    delay: float = 0.0  # before the response headers
    reset: bool = False  # drop the connection without answering

    @classmethod
    def json(cls, payload: Any, status: int = 200, **kwargs: Any) -> Reply:
        return cls(status=status, body=orjson.dumps(payload), **kwargs)

    @classmethod
    def sse(
        cls, events: bytes | Iterable[bytes | float | asyncio.Event | object], **kwargs: Any
    ) -> Reply:
        """SSE from whole text (split into one write per event) or from explicit pieces."""
        if isinstance(events, bytes):
            pieces: list[Any] = [e + b"\n\n" for e in events.split(b"\n\n") if e.strip()]
        else:
            pieces = list(events)
        return cls(content_type=SSE, chunks=pieces, **kwargs)

    @classmethod
    def error(cls, api: Api, status: int, message: str, type: str = "api_error") -> Reply:
        """A provider error body of the documented shape."""
        if api == "anthropic":
            body = {"type": "error", "error": {"type": type, "message": message}}
        else:
            body = {"error": {"message": message, "type": type, "param": None, "code": None}}
        return cls.json(body, status=status)

    @classmethod
    def garbage(cls, status: int = 200, content_type: str = JSON) -> Reply:
        return cls(status=status, body=b"<html>\x00not json{{", content_type=content_type)

    @classmethod
    def hang(cls, seconds: float = 3600.0) -> Reply:
        return cls(delay=seconds)

    @classmethod
    def dropped(cls) -> Reply:
        return cls(reset=True)


def openai_completion(text: str = "Hello!", model: str = "gpt-4o-mini", **usage: int) -> dict:
    """A minimal non-streaming Chat Completions body."""
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage.get("prompt_tokens", 10),
            "completion_tokens": usage.get("completion_tokens", 3),
            "total_tokens": usage.get("prompt_tokens", 10) + usage.get("completion_tokens", 3),
        },
    }


def anthropic_message(text: str = "Hello!", model: str = "claude-haiku-4-5", **usage: int) -> dict:
    """A minimal non-streaming Messages body."""
    return {
        "id": "msg_stub",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("input_tokens", 10),
            "output_tokens": usage.get("output_tokens", 3),
        },
    }


# --- the server ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """A request the stub received."""

    method: str
    path: str
    headers: CIMultiDictProxy[str]
    body: bytes
    raw_path: str = ""  # as sent: percent-encoding and query kept

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


class StubUpstream:
    """Replays and scripts provider answers; records every request."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._queues: dict[str, deque[Reply]] = {}
        self._defaults: dict[str, Reply] = {}
        self._responders: dict[str, Callable[[Received], Reply | None]] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> StubUpstream:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> StubUpstream:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def openai_url(self) -> str:
        """Provider base URL for an ``api: openai`` provider (ends in /v1, like OpenAI's)."""
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    # scripting

    def enqueue(self, route: Api | str, *replies: Reply) -> None:
        """Queue replies for a route (``"openai"``, ``"anthropic"`` or a path), served in order."""
        self._queues.setdefault(ROUTES.get(route, route), deque()).extend(replies)  # type: ignore[call-overload]

    def always(self, route: Api | str, reply: Reply) -> None:
        """Serve ``reply`` whenever the route's queue is empty (load tests)."""
        self._defaults[ROUTES.get(route, route)] = reply  # type: ignore[call-overload]

    def respond(self, route: Api | str, responder: Callable[[Received], Reply | None]) -> None:
        """Answer each request of the route as ``responder`` decides from it (a provider's
        rules: keys, headers, sizes); None falls back to the queue."""
        self._responders[ROUTES.get(route, route)] = responder  # type: ignore[call-overload]

    def enqueue_fixture(self, name: str, turn: int | None = None) -> list[Recorded]:
        """Queue a fixture's recorded answers (all turns, or one) on its API's route."""
        exchanges = load_fixture(name)
        if turn is not None:
            exchanges = [exchanges[turn]]
        for exchange in exchanges:
            self.enqueue(exchange.api, exchange.reply())
        return exchanges

    def pending(self, route: Api | str) -> int:
        return len(self._queues.get(ROUTES.get(route, route), ()))  # type: ignore[call-overload]

    def requests_to(self, route: Api | str) -> list[Received]:
        path = ROUTES.get(route, route)  # type: ignore[call-overload]
        return [r for r in self.received if r.path == path]

    # serving

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append(
            Received(
                request.method,
                request.path,
                CIMultiDictProxy(CIMultiDict(request.headers)),
                body,
                request.raw_path,
            )
        )
        responder = self._responders.get(request.path)
        reply = responder(self.received[-1]) if responder else None
        if reply is None:
            queue = self._queues.get(request.path)
            reply = queue.popleft() if queue else self._defaults.get(request.path)
        if reply is None:
            message = f"stub upstream: no scripted reply for {request.method} {request.path}"
            return web.json_response({"error": {"message": message, "type": "stub"}}, status=599)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.reset:
            return _drop(request)
        headers = {"Content-Type": reply.content_type, **reply.headers}
        if reply.chunks is None:
            return web.Response(status=reply.status, body=reply.body, headers=headers)
        response = web.StreamResponse(status=reply.status, headers=headers)
        await response.prepare(request)
        for item in reply.chunks:
            if item is RESET:
                return _drop(request, response)
            if isinstance(item, float | int):
                await asyncio.sleep(item)
            elif isinstance(item, asyncio.Event):
                await item.wait()
            else:
                await response.write(item)  # type: ignore[arg-type]
        await response.write_eof()
        return response


def _drop(request: web.Request, response: web.StreamResponse | None = None) -> web.StreamResponse:
    transport = request.transport
    if transport is not None:
        transport.abort()
    return response or web.Response(status=204)
