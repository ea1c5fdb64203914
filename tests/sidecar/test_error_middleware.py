"""Protocol-shaped errors on their own: the middleware turns unexpected failures into shaped
500s without internals, and an error after a stream started ends it with the in-band error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from clawpod.sidecar.model.errors import internal_error
from clawpod.sidecar.server.front.edge import protocol_errors
from clawpod.sidecar.server.request.errors import reply_error
from clawpod.sidecar.server.request.exchange import AiohttpExchange
from tests.support.codecs import codec_of

SECRET_DETAIL = "db password is hunter2"


async def _fail(request: web.Request) -> web.StreamResponse:
    raise RuntimeError(SECRET_DETAIL)


async def _fail_mid_stream(request: web.Request) -> web.StreamResponse:
    exchange = AiohttpExchange(request)
    await exchange.start_stream(200, {"Content-Type": "text/event-stream"})
    await exchange.write(b"data: {}\n\n")
    await reply_error(exchange, codec_of("anthropic"), internal_error())
    assert exchange.response is not None
    return exchange.response


@pytest.fixture
async def url() -> AsyncIterator[str]:
    # The production middleware around handlers that fail.
    app = web.Application(middlewares=[protocol_errors])
    app.router.add_post("/v1/chat/completions", _fail)
    app.router.add_post("/v1/messages", _fail_mid_stream)
    app.router.add_post("/mcp", _fail)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_unexpected_failure_is_a_shaped_500(url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json={}) as response,
    ):
        text = await response.text()
        assert response.status == 500
    body = orjson.loads(text)
    assert body["error"]["code"] == "internal_error"
    assert SECRET_DETAIL not in text and "Traceback" not in text


async def test_failure_after_stream_start_ends_with_stream_error(url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/messages", json={}) as response,
    ):
        raw = await response.read()
        assert response.status == 200
    assert raw.startswith(b"data: {}\n\n")
    assert raw.endswith(b"\n\n")
    error = raw.split(b"\n\n")[-2]
    assert error.startswith(b"event: error\ndata: ")
    assert orjson.loads(error.split(b"data: ", 1)[1])["error"]["code"] == "internal_error"
    assert SECRET_DETAIL.encode() not in raw


async def test_mcp_failures_are_json_rpc(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.post(url + "/mcp", json={}) as response:
        body = await response.json()
        assert response.status == 500
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32603


def test_the_internal_error_answer_is_built_in_one_place() -> None:
    """Every route, the edge and the mediated driver answer a failure of the sidecar itself
    with model/errors.py's internal_error (four copies of it drifted apart before)."""
    sidecar = Path(__file__).resolve().parents[2] / "sidecar"
    built = [
        path.relative_to(sidecar).as_posix()
        for path in sidecar.rglob("*.py")
        if "the sidecar failed on this request" in path.read_text()
    ]
    assert built == ["model/errors.py"]
