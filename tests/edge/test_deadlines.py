"""What aiohttp lacks and the edge adds (issue 13 finding 11, SPEC §10): a request-head
deadline, a bound on a head's total size, a body-idle deadline, keep-alive idle, and a cap on
connections with a 503 in the caller's protocol past it. Deadlines are half a second here."""

from __future__ import annotations

import asyncio

from clawpod.sidecar.server.front.edge import EdgeLimits
from tests.edge.conftest import SHORT, EdgePodFactory
from tests.edge.wire import CHAT, GUARD_S, RawClient, chat_request, get_request, outcome
from tests.sidecar.conftest import Pod


async def test_a_head_sent_a_byte_at_a_time_is_cut_off(short_pod: Pod) -> None:
    client = await RawClient.open(short_pod.sidecar.listening.address)
    request = chat_request(short_pod.token)
    sent = 0
    for byte in request:  # ~1 byte per 50 ms: the whole head would take seconds
        if not await client.send(bytes([byte])):
            break
        sent += 1
        await asyncio.sleep(0.05)
        if client.reader.at_eof():
            break
    assert await client.closed_by_server()
    assert sent < len(request)
    assert short_pod.upstream.requests_to("openai") == []
    await client.close()


async def test_a_head_over_64_kib_in_small_fields_is_refused(short_pod: Pod) -> None:
    """aiohttp bounds each field (8 KiB) and their count (128), not their sum (1 MiB)."""
    client = await RawClient.open(short_pod.sidecar.listening.address)
    fields = "".join(f"X-Pad-{n}: {'a' * 1000}\r\n" for n in range(100))
    await client.send(f"GET /healthz HTTP/1.1\r\nHost: s\r\n{fields}\r\n".encode())
    seen = await outcome(client, GUARD_S, GUARD_S)
    assert seen.refused and seen.closed
    await client.close()


async def test_a_body_that_stops_arriving_is_cut_off(short_pod: Pod) -> None:
    client = await RawClient.open(short_pod.sidecar.listening.address)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {short_pod.token}\r\n"
        "Content-Length: 100\r\n\r\n"
    ).encode()
    await client.send(head + b'{"model": ')
    assert await client.closed_by_server()
    assert short_pod.upstream.requests_to("openai") == []
    await client.close()


async def test_an_idle_keep_alive_connection_is_closed(short_pod: Pod) -> None:
    client = await RawClient.open(short_pod.sidecar.listening.address)
    await client.send(get_request("/healthz"))
    assert (await client.answer()).status == 200
    assert await client.closed_by_server()
    await client.close()


async def test_a_kept_alive_connection_idles_for_the_keep_alive_time_not_the_head_deadline(
    make_edge_pod: EdgePodFactory,
) -> None:
    """Reading a request's body makes aiohttp call ``data_received(b"")``: no head byte, so the
    next head's deadline must not start there (it did, closing every kept-alive connection
    the head deadline after its last request, long before the keep-alive time)."""
    pod = await make_edge_pod(EdgeLimits(head_timeout_s=0.3, keepalive_timeout_s=5.0))
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(chat_request(pod.token))
    assert (await client.answer()).status == 200
    await asyncio.sleep(0.8)  # past the head deadline, well within the keep-alive time
    await client.send(chat_request(pod.token))
    assert (await client.answer()).status == 200
    await client.close()


async def test_past_the_connection_cap_a_request_gets_503_and_a_close(
    make_edge_pod: EdgePodFactory,
) -> None:
    pod = await make_edge_pod(EdgeLimits(max_connections=2))
    address = pod.sidecar.listening.address
    held = [await RawClient.open(address) for _ in range(2)]
    for client in held:  # authenticated: not closed to make room (test_connection_flood.py)
        await client.send(chat_request(pod.token))
        assert (await client.answer()).status == 200
    extra = await RawClient.open(address)
    await extra.send(
        f"POST /v1/messages HTTP/1.1\r\nHost: s\r\nx-api-key: {pod.token}\r\n"
        "Content-Length: 2\r\n\r\n{}".encode()
    )
    refused = await extra.answer()
    assert refused.status == 503 and refused.headers["connection"] == "close"
    body = refused.json()
    assert body["type"] == "error"  # Anthropic's shape, as the request spoke
    assert "too many connections" in body["error"]["message"]
    assert await extra.closed_by_server()
    await extra.close()
    for client in held:  # the connections within the cap are still served
        await client.send(chat_request(pod.token))
        assert (await client.answer()).status == 200
        await client.close()
    # Once they are gone, a new connection is within the cap again.
    while pod.sidecar.listening.open_connections:
        await asyncio.sleep(0.01)
    again = await RawClient.open(address)
    await again.send(get_request("/healthz"))
    assert (await again.answer()).status == 200
    await again.close()


async def test_an_over_capacity_connection_that_sends_nothing_is_closed(
    make_edge_pod: EdgePodFactory,
) -> None:
    pod = await make_edge_pod(EdgeLimits(max_connections=1, head_timeout_s=0.5))
    address = pod.sidecar.listening.address
    first = await RawClient.open(address)
    await first.send(chat_request(pod.token))
    assert (await first.answer()).status == 200
    silent = await RawClient.open(address)
    assert await silent.closed_by_server()
    await silent.close()
    await first.close()


async def test_missing_host_on_http11_is_refused(pod: Pod) -> None:
    """Issue 13 finding 5."""
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(b"GET /healthz HTTP/1.1\r\n\r\n")
    answer = await client.answer()
    assert answer.status == 400 and answer.json()["error"]["code"] == "bad_request"
    await client.close()


def test_production_limits_are_the_specs() -> None:
    limits = EdgeLimits()
    assert (limits.head_timeout_s, limits.body_idle_timeout_s) == (10, 30)
    assert (limits.keepalive_timeout_s, limits.max_connections) == (75, 4096)
    assert limits.max_connections_per_peer == 1024
    assert (limits.max_head_bytes, limits.max_headers) == (64 * 1024, 128)
    assert SHORT.max_connections == limits.max_connections
