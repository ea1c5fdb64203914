"""Connections that ask nothing cannot starve the agents (issue 30, "no token needed"): the head
deadline runs from the connection's start, each peer address has its own cap, and at the cap
the stranger idle longest is closed to make room before a new connection is refused. Caps are
scaled down (50 connections, not 4,096); the bounds are settable in the pod file."""

from __future__ import annotations

import asyncio

from clawpod.sidecar.server.front.edge import EdgeLimits
from tests.edge.conftest import EdgePodFactory
from tests.edge.wire import RawClient, chat_request, get_request

CAP = 50
FLOOD = 60


async def _open_silent(address: tuple[str, int], count: int) -> list[RawClient]:
    return [await RawClient.open(address) for _ in range(count)]


async def _close_all(clients: list[RawClient]) -> None:
    await asyncio.gather(*(client.close() for client in clients))


async def test_an_idle_socket_flood_does_not_keep_an_agent_out(
    make_edge_pod: EdgePodFactory,
) -> None:
    pod = await make_edge_pod(EdgeLimits(max_connections=CAP, max_connections_per_peer=CAP * 2))
    address = pod.sidecar.listening.address
    flood = await _open_silent(address, FLOOD)
    agent = await RawClient.open(address)
    await agent.send(chat_request(pod.token))
    assert (await agent.answer()).status == 200
    assert pod.sidecar.listening.open_connections <= CAP
    await agent.close()
    await _close_all(flood)


async def test_a_socket_that_never_sends_a_byte_is_closed_at_the_head_deadline(
    make_edge_pod: EdgePodFactory,
) -> None:
    # The keep-alive idle time (75 s) is not what frees a slot nobody used.
    pod = await make_edge_pod(EdgeLimits(head_timeout_s=0.5))
    silent = await RawClient.open(pod.sidecar.listening.address)
    assert await silent.closed_by_server(timeout=5)
    await silent.close()


async def test_authenticated_connections_are_not_closed_to_make_room(
    make_edge_pod: EdgePodFactory,
) -> None:
    pod = await make_edge_pod(EdgeLimits(max_connections=2))
    address = pod.sidecar.listening.address
    agents = [await RawClient.open(address) for _ in range(2)]
    for client in agents:
        await client.send(chat_request(pod.token))
        assert (await client.answer()).status == 200
    stranger = await RawClient.open(address)
    await stranger.send(get_request("/healthz"))
    refused = await stranger.answer()
    assert refused.status == 503 and refused.headers["connection"] == "close"
    for client in agents:  # kept alive, still served
        await client.send(chat_request(pod.token))
        assert (await client.answer()).status == 200
        await client.close()
    await stranger.close()


async def test_one_peer_cannot_take_more_than_its_share(make_edge_pod: EdgePodFactory) -> None:
    pod = await make_edge_pod(EdgeLimits(max_connections=CAP, max_connections_per_peer=3))
    address = pod.sidecar.listening.address
    mine = [await RawClient.open(address) for _ in range(3)]
    for client in mine:
        await client.send(chat_request(pod.token))
        assert (await client.answer()).status == 200
    fourth = await RawClient.open(address)
    await fourth.send(chat_request(pod.token))
    assert (await fourth.answer()).status == 503
    await _close_all([*mine, fourth])


async def test_one_agent_cannot_hold_more_than_two_body_limits_at_once(
    make_edge_pod: EdgePodFactory,
) -> None:
    """Issue 30: four large bodies of one agent in parallel reached 1.55 GB."""
    limit = 100_000
    pod = await make_edge_pod(max_body_bytes=limit)
    address = pod.sidecar.listening.address
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer {pod.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {limit}\r\n\r\n"
    ).encode()
    arriving = [await RawClient.open(address) for _ in range(2)]
    for client in arriving:  # two bodies of the limit, still arriving
        await client.send(head + b'{"model": "gpt-4o-mini", "messages": [')
    third = await RawClient.open(address)
    await third.send(head)
    refused = await third.answer()
    assert refused.status == 429
    assert refused.json()["error"]["code"] == "too_many_request_bytes"
    await _close_all([*arriving, third])
    # Once they are gone, the agent's bytes are given back.
    for _ in range(500):
        if not pod.sidecar.state.body_bytes.held("agent"):
            break
        await asyncio.sleep(0.01)
    again = await RawClient.open(address)
    await again.send(chat_request(pod.token))
    assert (await again.answer()).status == 200
    await again.close()
