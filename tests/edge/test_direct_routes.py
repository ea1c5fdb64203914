"""The LLM routes the edge serves directly (``edge.DIRECT_ROUTES``: no router, middlewares or
response signal): every request the edge or the router would refuse is still refused as
before, in the caller's protocol, and only the exact paths are served."""

from __future__ import annotations

import pytest

from clawpod.sidecar.server.front.edge import EdgeLimits
from tests.edge.conftest import EdgePodFactory
from tests.edge.wire import BODY, RawClient, chat_request
from tests.sidecar.conftest import Pod


def post(path: str, token: str, *, extra: str = "") -> bytes:
    return chat_request(token, extra=extra).replace(b"/v1/chat/completions", path.encode(), 1)


async def test_a_head_over_the_edge_bound_is_refused_with_431_and_a_close(
    make_edge_pod: EdgePodFactory,
) -> None:
    """The fields together exceed ``max_head_bytes`` though each is within aiohttp's own
    bounds: the direct route leaves the request to the edge's refusal."""
    pod = await make_edge_pod(EdgeLimits(max_head_bytes=2048))
    client = await RawClient.open(pod.sidecar.listening.address)
    padding = "".join(f"X-Pad-{n}: {'p' * 900}\r\n" for n in range(3))
    await client.send(chat_request(pod.token, extra=padding))
    answer = await client.answer()
    assert answer.status == 431
    assert answer.json()["error"]["code"] == "request_header_fields_too_large"
    assert answer.headers["connection"] == "close"
    assert await client.closed_by_server()
    assert pod.upstream.received == []
    await client.close()


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/chat/completions", 200),
        ("/chat/completions", 200),  # the alias without /v1
        ("/v1/chat/completions?trace=1", 200),  # a query string is not part of the route
        ("/v1/chat%2Fcompletions", 404),  # an encoded slash is not a separator
        ("/v1/chat/completions/", 404),
        ("/V1/chat/completions", 404),
        ("/v1//chat/completions", 404),
    ],
)
async def test_only_the_routes_exact_paths_are_served(pod: Pod, path: str, status: int) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(post(path, pod.token))
    answer = await client.answer()
    assert answer.status == status
    if status != 200:
        assert answer.json()["error"]["code"] == "not_found"
    await client.close()


async def test_another_method_on_an_llm_route_is_a_405(pod: Pod) -> None:
    client = await RawClient.open(pod.sidecar.listening.address)
    await client.send(post("/v1/chat/completions", pod.token).replace(b"POST ", b"PUT ", 1))
    answer = await client.answer()
    assert answer.status == 405 and answer.json()["error"]["code"] == "method_not_allowed"
    await client.close()


async def test_a_direct_route_keeps_the_connection_for_the_next_request(pod: Pod) -> None:
    """Served without the application, a request still leaves its connection reusable."""
    client = await RawClient.open(pod.sidecar.listening.address)
    for _ in range(3):
        await client.send(chat_request(pod.token))
        answer = await client.answer()
        assert answer.status == 200 and "connection" not in answer.headers
    assert len(pod.audit_lines()) == 3
    assert pod.upstream.received[-1].body == BODY
    await client.close()
