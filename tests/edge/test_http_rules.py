"""The HTTP/1.1 rules the sidecar keeps on aiohttp's server (restored from the hand-written front
door's suite): pipelining in order, body limits, interim responses, malformed requests,
HTTP/1.0, and a shutdown that lets a request in progress finish and be audited."""

from __future__ import annotations

import asyncio

import orjson

from tests.edge.conftest import SHORT, EdgePodFactory
from tests.edge.wire import (
    BODY,
    CHAT,
    GUARD_S,
    RawClient,
    chat_request,
    get_request,
    outcome,
)
from tests.sidecar.conftest import Pod
from tests.support.upstream import Reply, openai_completion

STREAM = [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', b"data: [DONE]\n\n"]
STREAM_BODY = orjson.dumps({**orjson.loads(BODY), "stream": True})


def answer_text(body: dict) -> str:
    return body["choices"][0]["message"]["content"]


async def test_pipelined_requests_are_answered_in_order(pod: Pod) -> None:
    pod.upstream.always("openai", Reply.json(openai_completion("first"), delay=0.2))
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token) + chat_request("not-a-token") + get_request("/nope"))
    first, second, third = await client.answer(), await client.answer(), await client.answer()
    assert first.status == 200 and answer_text(first.json()) == "first"
    assert second.status == 403  # ready at once, but sent only after the first
    assert third.status == 404
    await client.close()


async def test_keep_alive_serves_many_requests_on_one_connection(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    for _ in range(3):
        await client.send(chat_request(pod.token))
        answer = await client.answer()
        assert answer.status == 200 and answer_text(answer.json()) == "edge"
    assert len(pod.audit_lines()) == 3
    await client.close()


async def test_stream_is_relayed_chunked(pod: Pod) -> None:
    pod.upstream.always("openai", Reply.sse(STREAM))
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token, STREAM_BODY))
    answer = await client.answer()
    assert answer.status == 200 and answer.headers["transfer-encoding"] == "chunked"
    assert answer.body == b"".join(STREAM)
    await client.close()


async def test_chunked_request_body(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {pod.token}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in (BODY[:10], BODY[10:]))
    await client.send(head + chunks + b"0\r\n\r\n")
    assert (await client.answer()).status == 200
    assert pod.upstream.requests_to("openai")[-1].json["messages"][0]["content"] == "hi"
    await client.close()


async def test_a_body_goes_upstream_byte_for_byte_whole_or_in_parts(pod: Pod) -> None:
    """A body that came with its head is taken from the parser's buffer as it lies; one that
    arrives in parts is gathered: both reach the provider exactly as the client sent them."""
    body = BODY.replace(b'"hi"', b'"' + "é ".encode() * 3000 + b'"')
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token, body))
    assert (await client.answer()).status == 200
    request = chat_request(pod.token, body)
    cut = request.index(b"\r\n\r\n") + 4 + 100
    for part in (request[:cut], request[cut : cut + 1000], request[cut + 1000 :]):
        await client.send(part)
        await asyncio.sleep(0.05)
    assert (await client.answer()).status == 200
    assert [r.body for r in pod.upstream.requests_to("openai")] == [body, body]
    await client.close()


async def test_declared_body_over_the_limit_is_refused_before_it_arrives(
    make_edge_pod: EdgePodFactory,
) -> None:
    pod = await make_edge_pod(SHORT, max_body_bytes=1024)
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(
        f"POST {CHAT} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {pod.token}\r\n"
        "Content-Length: 4096\r\n\r\n".encode()
    )
    answer = await client.answer()
    assert answer.status == 413 and answer.json()["error"]["code"] == "request_too_large"
    assert answer.headers["connection"] == "close"
    assert await client.closed_by_server()
    await client.close()


async def test_chunked_body_over_the_limit_is_refused_before_it_ends(
    make_edge_pod: EdgePodFactory,
) -> None:
    """Issue 13 finding 5: the 413 comes while the body is still arriving (no last chunk)."""
    pod = await make_edge_pod(max_body_bytes=1024)
    client = await RawClient.open(pod.sidecar.listening.address)
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {pod.token}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    await client.send(head + b"800\r\n" + b"x" * 2048 + b"\r\n")
    answer = await client.answer()
    assert answer.status == 413 and answer.json()["type"] == "error"  # Anthropic's shape
    assert answer.headers["connection"] == "close"
    assert len(pod.audit_lines()) == 1
    await client.close()


async def test_expect_continue_gets_an_interim_response(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    request = chat_request(pod.token, extra="Expect: 100-continue\r\n")
    await client.send(request[: -len(BODY)])
    assert (await client.answer()).status == 100
    await client.send(BODY)
    assert (await client.answer()).status == 200
    await client.close()


async def test_http10_gets_no_interim_response(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token, extra="Expect: 100-continue\r\n", version="1.0"))
    answer = await client.answer()
    assert answer.status == 200
    await client.close()


async def test_malformed_request_gets_400_as_json_and_close(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: s\r\nContent-Length: x\r\n\r\n")
    answer = await client.answer()
    assert answer.status == 400 and answer.json()["error"]["code"] == "bad_request"
    assert answer.json()["type"] == "error"  # both SDKs read this envelope
    assert await client.closed_by_server()
    await client.close()


async def test_http10_client_gets_its_answer_and_a_close(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token, version="1.0"))
    answer = await client.answer()
    assert answer.status == 200 and answer_text(answer.json()) == "edge"
    assert await client.closed_by_server()
    await client.close()


async def test_nothing_after_a_close_is_processed(pod: Pod) -> None:
    """Issue 13 finding 5: an HTTP/1.0 keep-alive connection stays open; a request pipelined
    after one that asked for the close is never served (aiohttp refuses the batch with 400)."""
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token, version="1.0", extra="Connection: keep-alive\r\n"))
    first = await client.answer()
    assert first.status == 200 and first.headers["connection"] == "keep-alive"
    closing = chat_request(pod.token, extra="Connection: close\r\n")
    await client.send(closing + chat_request(pod.token))
    seen = await outcome(client, GUARD_S, GUARD_S)
    assert seen.closed and len(seen.statuses) == 1
    assert len(pod.upstream.requests_to("openai")) <= 2
    await client.close()


async def test_shutdown_lets_a_request_in_progress_finish_and_be_audited(pod: Pod) -> None:
    pod.upstream.always("openai", Reply.json(openai_completion("late"), delay=0.3))
    client = await RawClient.open(pod.sidecar.listening.address)
    idle = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token))
    while not pod.upstream.requests_to("openai"):
        await asyncio.sleep(0.01)
    closing = asyncio.create_task(pod.sidecar.close())
    answer = await client.answer()
    assert answer.status == 200 and answer_text(answer.json()) == "late"
    assert await idle.closed_by_server()
    await asyncio.wait_for(closing, GUARD_S)
    assert len(pod.audit_lines()) == 1
    await client.close()
    await idle.close()


async def test_a_non_utf8_token_is_a_401_in_the_callers_protocol(pod: Pod) -> None:
    """Issue 13 finding 5: not a 500 with a traceback."""
    client = await RawClient.open(pod.sidecar.listening.address)
    for header in (b"Authorization: Bearer claw_\xff\xfe", b"x-api-key: \xc3\x28key"):
        await client.send(
            b"POST /v1/messages HTTP/1.1\r\nHost: s\r\n" + header + b"\r\n"
            b"anthropic-version: 2023-06-01\r\nContent-Length: 2\r\n\r\n{}"
        )
        answer = await client.answer()
        assert answer.status == 401, answer.body
        assert answer.json()["type"] == "error"
    await client.close()


async def test_a_non_utf8_forwarded_header_is_a_400_in_the_callers_protocol(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    body = b'{"model": "claude-3-5-haiku-latest", "max_tokens": 5, "messages": []}'
    await client.send(
        b"POST /v1/messages HTTP/1.1\r\nHost: s\r\nx-api-key: " + pod.token.encode() + b"\r\n"
        b"anthropic-version: 2023-06-01\r\nanthropic-beta: tools-\xff\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    answer = await client.answer()
    assert answer.status == 400, answer.body
    assert (
        answer.json()["type"] == "error" and "anthropic-beta" in answer.json()["error"]["message"]
    )
    assert pod.upstream.requests_to("anthropic") == []
    await client.close()
