"""The front door on the wire: LLM requests on its own HTTP/1.1 protocol, every other request
handed to aiohttp with the connection, and the HTTP/1.1 rules a hand-written server must keep
(keep-alive, pipelining order, chunked bodies, limits, interim responses, HTTP/1.0, shutdown)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
import pytest
from clawpod.sidecar.server.usage import StreamUsage

from tests.sidecar.conftest import Pod, PodFactory
from tests.support.upstream import Reply, openai_completion

GUARD_S = 10  # against a hang, not a timing assertion
CHAT = "/v1/chat/completions"
BODY = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return orjson.loads(self.body)


class RawClient:
    """One TCP connection, requests written byte for byte, responses read by their framing."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, pod: Pod) -> RawClient:
        host, port = pod.sidecar.listening.address
        return cls(*await asyncio.open_connection(host, port))

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answer(self) -> Answer:
        return await asyncio.wait_for(self._read(), GUARD_S)

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.reader.read(1), GUARD_S) == b""

    async def _read(self) -> Answer:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        status = int(status_line.split()[1])
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            body = await self._chunks()
        elif status < 200:
            body = b""
        else:
            body = await self.reader.read()
        return Answer(status, headers, body)

    async def _chunks(self) -> bytes:
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return b"".join(parts)
            parts.append(data[:-2])

    async def close(self) -> None:
        self.writer.close()


def chat_request(token: str, body: bytes = BODY, *, extra: str = "", version: str = "1.1") -> bytes:
    head = (
        f"POST {CHAT} HTTP/{version}\r\nHost: sidecar\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


def get_request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: sidecar\r\n\r\n".encode()


@pytest.fixture
async def pod(make_pod: PodFactory) -> Pod:
    pod = await make_pod()
    pod.upstream.always("openai", Reply.json(openai_completion("front")))
    return pod


def served_by(pod: Pod) -> tuple[int, int]:
    """(connections on the front door, connections handed to aiohttp)."""
    listening = pod.sidecar.listening
    return len(listening.front.connections), len(listening.runner.server.connections)


def answer_text(answer: Answer) -> str:
    return answer.json()["choices"][0]["message"]["content"]


async def test_keep_alive_requests_stay_on_the_front_door(pod: Pod) -> None:
    client = await RawClient.open(pod)
    for _ in range(3):
        client.send(chat_request(pod.token))
        answer = await client.answer()
        assert answer.status == 200 and answer_text(answer) == "front"
        assert "connection" not in answer.headers and "date" in answer.headers
    assert served_by(pod) == (1, 0)
    assert len(pod.audit_lines()) == 3
    await client.close()


async def test_other_routes_hand_the_connection_to_aiohttp(pod: Pod) -> None:
    client = await RawClient.open(pod)
    client.send(chat_request(pod.token))
    assert (await client.answer()).status == 200
    client.send(get_request("/healthz"))
    health = await client.answer()
    assert health.status == 200 and health.json() == {"status": "ok"}
    assert served_by(pod) == (0, 1)
    # The LLM route still works on the handed-over connection (aiohttp's side of serve_llm).
    client.send(chat_request(pod.token))
    answer = await client.answer()
    assert answer.status == 200 and answer_text(answer) == "front"
    assert len(pod.audit_lines()) == 2
    await client.close()


async def test_first_request_for_aiohttp_is_replayed_whole(pod: Pod) -> None:
    client = await RawClient.open(pod)
    # The head arrives in pieces: every byte must reach aiohttp.
    request = get_request("/metrics")
    for piece in (request[:5], request[5:20], request[20:]):
        client.send(piece)
        await client.writer.drain()
        await asyncio.sleep(0.01)
    metrics = await client.answer()
    assert metrics.status == 200 and b"claw_" in metrics.body
    client.send(get_request("/nowhere"))
    missing = await client.answer()
    assert missing.status == 404 and missing.json()["error"]["code"] == "not_found"
    await client.close()


async def test_pipelined_requests_are_answered_in_order(pod: Pod) -> None:
    pod.upstream.always("openai", Reply.json(openai_completion("first"), delay=0.2))
    client = await RawClient.open(pod)
    slow = chat_request(pod.token)
    client.send(slow + chat_request("not-a-token"))
    first, second = await client.answer(), await client.answer()
    assert first.status == 200 and answer_text(first) == "first"
    assert second.status == 403  # answered at once, but sent only after the first
    await client.close()


async def test_pipelined_request_for_aiohttp_ends_the_connection_after_owed_answers(
    pod: Pod,
) -> None:
    client = await RawClient.open(pod)
    client.send(chat_request(pod.token) + get_request("/healthz"))
    assert (await client.answer()).status == 200
    assert await client.closed_by_server()  # the client sends /healthz again, elsewhere
    await client.close()


async def test_unexpected_failure_is_a_shaped_500_without_internals(
    pod: Pod, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("db password is hunter2")

    monkeypatch.setattr(pod.sidecar.state.router, "resolve", broken)
    client = await RawClient.open(pod)
    client.send(chat_request(pod.token))
    answer = await client.answer()
    assert answer.status == 500 and answer.json()["error"]["code"] == "internal_error"
    assert b"hunter2" not in answer.body
    client.send(chat_request(pod.token))  # the connection is still usable
    assert (await client.answer()).status == 500
    await client.close()


# Both servers run the LLM routes through serve_llm and an Exchange; these pin each side's
# Exchange (the suites elsewhere start every connection on the front door).
SIDES = ("front", "aiohttp")


async def open_on(pod: Pod, side: str) -> RawClient:
    client = await RawClient.open(pod)
    if side == "aiohttp":
        client.send(get_request("/healthz"))
        assert (await client.answer()).status == 200
    assert served_by(pod) == ((1, 0) if side == "front" else (0, 1))
    return client


STREAM = [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', b"data: [DONE]\n\n"]
STREAM_BODY = orjson.dumps({**orjson.loads(BODY), "stream": True})


@pytest.mark.parametrize("side", SIDES)
async def test_stream_is_relayed_chunked_on_either_side(pod: Pod, side: str) -> None:
    pod.upstream.always("openai", Reply.sse(STREAM))
    client = await open_on(pod, side)
    client.send(chat_request(pod.token, STREAM_BODY))
    answer = await client.answer()
    assert answer.status == 200 and answer.headers["transfer-encoding"] == "chunked"
    assert answer.body == b"".join(STREAM)
    await client.close()


@pytest.mark.parametrize("side", SIDES)
async def test_body_over_the_limit_is_413_on_either_side(make_pod: PodFactory, side: str) -> None:
    pod = await make_pod(max_body_bytes=1024)
    client = await open_on(pod, side)
    client.send(chat_request(pod.token, b'{"model": "gpt-4o-mini", "x": "' + b"a" * 2048 + b'"}'))
    answer = await client.answer()
    assert answer.status == 413 and answer.json()["error"]["code"] == "request_too_large"
    await client.close()


@pytest.mark.parametrize("side", SIDES)
async def test_failure_after_the_stream_started_ends_it_in_band_on_either_side(
    pod: Pod, side: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: StreamUsage, chunk: bytes) -> None:
        raise RuntimeError("db password is hunter2")

    monkeypatch.setattr(StreamUsage, "feed", broken)
    pod.upstream.always("openai", Reply.sse(STREAM))
    client = await open_on(pod, side)
    client.send(chat_request(pod.token, STREAM_BODY))
    answer = await client.answer()
    assert answer.status == 200
    *_, last = answer.body.rstrip(b"\n").split(b"\n\n")
    assert orjson.loads(last.removeprefix(b"data: "))["error"]["code"] == "internal_error"
    assert b"hunter2" not in answer.body
    await client.close()


async def test_chunked_request_body(pod: Pod) -> None:
    client = await RawClient.open(pod)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {pod.token}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in (BODY[:10], BODY[10:]))
    client.send(head + chunks + b"0\r\n\r\n")
    answer = await client.answer()
    assert answer.status == 200
    assert pod.upstream.requests_to("openai")[-1].json["messages"][0]["content"] == "hi"
    await client.close()


async def test_declared_body_over_the_limit_is_refused_before_it_arrives(
    make_pod: PodFactory,
) -> None:
    pod = await make_pod(max_body_bytes=1024)
    client = await RawClient.open(pod)
    client.send(
        f"POST {CHAT} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {pod.token}\r\n"
        "Content-Length: 4096\r\n\r\n".encode()
    )
    answer = await client.answer()
    assert answer.status == 413 and answer.json()["error"]["code"] == "request_too_large"
    assert answer.headers["connection"] == "close"
    assert await client.closed_by_server()
    await client.close()


async def test_chunked_body_over_the_limit_is_refused(make_pod: PodFactory) -> None:
    pod = await make_pod(max_body_bytes=1024)
    client = await RawClient.open(pod)
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {pod.token}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    client.send(head + b"800\r\n" + b"x" * 2048 + b"\r\n0\r\n\r\n")
    answer = await client.answer()
    assert answer.status == 413 and answer.json()["type"] == "error"  # Anthropic's shape
    assert len(pod.audit_lines()) == 1
    await client.close()


async def test_expect_continue_gets_an_interim_response(pod: Pod) -> None:
    client = await RawClient.open(pod)
    head = chat_request(pod.token, extra="Expect: 100-continue\r\n")
    client.send(head[: -len(BODY)])
    interim = await client.answer()
    assert interim.status == 100
    client.send(BODY)
    assert (await client.answer()).status == 200
    await client.close()


async def test_malformed_request_gets_400_and_close(pod: Pod) -> None:
    client = await RawClient.open(pod)
    client.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: s\r\nContent-Length: x\r\n\r\n")
    answer = await client.answer()
    assert answer.status == 400 and answer.json()["error"]["code"] == "bad_request"
    assert await client.closed_by_server()
    await client.close()


async def test_oversized_head_gets_431(pod: Pod) -> None:
    client = await RawClient.open(pod)
    client.send(f"POST {CHAT} HTTP/1.1\r\nX-Big: {'a' * 70_000}\r\n\r\n".encode())
    answer = await client.answer()
    assert answer.status == 431
    assert await client.closed_by_server()
    await client.close()


async def test_http10_client_gets_its_answer_and_a_close(pod: Pod) -> None:
    client = await RawClient.open(pod)
    client.send(chat_request(pod.token, version="1.0"))
    answer = await client.answer()
    assert answer.status == 200 and answer.headers["connection"] == "close"
    assert await client.closed_by_server()
    await client.close()


async def test_http10_stream_is_delimited_by_the_close(pod: Pod) -> None:
    pod.upstream.always("openai", Reply.sse([b"data: {}\n\n", b"data: [DONE]\n\n"]))
    client = await RawClient.open(pod)
    body = orjson.dumps({**orjson.loads(BODY), "stream": True})
    client.send(chat_request(pod.token, body, version="1.0"))
    answer = await client.answer()
    assert answer.status == 200 and "transfer-encoding" not in answer.headers
    assert answer.body == b"data: {}\n\ndata: [DONE]\n\n"
    await client.close()


async def test_shutdown_lets_a_request_in_progress_finish(pod: Pod) -> None:
    pod.upstream.always("openai", Reply.json(openai_completion("late"), delay=0.3))
    client = await RawClient.open(pod)
    idle = await RawClient.open(pod)
    client.send(chat_request(pod.token))
    await asyncio.sleep(0.1)
    await pod.sidecar.listening.close(GUARD_S)
    answer = await client.answer()
    assert answer.status == 200 and answer_text(answer) == "late"
    assert await idle.closed_by_server()
    assert len(pod.audit_lines()) == 1
    await client.close()
    await idle.close()
