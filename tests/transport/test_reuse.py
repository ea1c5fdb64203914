"""When a pooled connection may carry the next request (issue 13, finding 7): never after an
abnormal end, and a kept-alive connection the server has already closed is not written to."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from clawpod.sidecar.transport import ConnectionClosed, HttpClient
from tests.transport.raw_server import RawServer, Script, answer, keep_answering

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
EVENT = b'data: {"delta": "hi"}\n\n'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a crashing server process does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def first_connection_then(first: bytes, *, then_reset: bool) -> Script:
    """The first connection answers ``first`` and is closed (reset or FIN) at once; later ones
    answer every request with ``fresh``."""

    async def script(reader, writer, srv: RawServer) -> None:
        if srv.connections == 1:
            await srv.read_request(reader)
            writer.write(first)
            if then_reset:
                _reset(writer)
            return
        while await srv.read_request(reader) is not None:
            writer.write(answer(b"fresh"))
            await writer.drain()

    return script


async def _post_succeeds_on_a_fresh_connection(client: HttpClient, server: RawServer) -> None:
    response = await client.request("POST", server.url(), body=b"{}", timeout_s=5)
    assert (response.status, await response.read()) == (200, b"fresh")
    response.release()
    assert server.connections == 2


@pytest.mark.parametrize("then_reset", [True, False], ids=["reset", "closed"])
async def test_a_stream_complete_in_http_but_then_closed_is_not_reused(
    servers, client: HttpClient, then_reset: bool
) -> None:
    # llama-cpp-python's server: the stream's framing ends, its events do not, and the
    # connection is dropped; the next request (of any agent) must not land on it.
    stream = SSE_HEAD + _chunk(EVENT) + b"0\r\n\r\n"
    server = await servers(first_connection_then(stream, then_reset=then_reset))
    response = await client.request("POST", server.url(), body=b"{}", read_timeout_s=5)
    assert await response.read() == EVENT
    response.release()
    await _post_succeeds_on_a_fresh_connection(client, server)


async def test_a_stream_cut_by_a_reset_is_not_reused(servers, client: HttpClient) -> None:
    server = await servers(first_connection_then(SSE_HEAD + _chunk(EVENT), then_reset=True))
    response = await client.request("POST", server.url(), body=b"{}", read_timeout_s=5)
    with pytest.raises(ConnectionClosed):
        while await response.read_chunk():
            pass
    response.release()
    await _post_succeeds_on_a_fresh_connection(client, server)


async def test_an_answer_then_a_keep_alive_hang_up_is_not_written_to(
    servers, client: HttpClient
) -> None:
    server = await servers(first_connection_then(answer(b"first"), then_reset=False))
    response = await client.request("GET", server.url(), timeout_s=5)
    assert await response.read() == b"first"
    response.release()
    await _post_succeeds_on_a_fresh_connection(client, server)
    assert len(server.requests) == 2, "the POST was sent once"


def _answers_then_resets_the_next_request() -> Script:
    """Each connection answers one request, then resets when the next one arrives (unread);
    the third connection resets without answering."""

    async def script(reader, writer, srv: RawServer) -> None:
        number = srv.connections
        await srv.read_request(reader)
        if number < 3:
            writer.write(answer(b"answered"))
            await writer.drain()
            await reader.read(1)
        _reset(writer)

    return script


async def test_a_get_reset_on_a_reused_connection_is_retried_once_on_a_fresh_one(
    servers, client: HttpClient
) -> None:
    server = await servers(_answers_then_resets_the_next_request())
    for _ in range(2):
        response = await client.request("GET", server.url(), timeout_s=5)
        assert await response.read() == b"answered"
        response.release()
    assert server.connections == 2
    with pytest.raises(ConnectionClosed):  # the retry's own failure is not retried
        await client.request("GET", server.url(), timeout_s=5)
    assert server.connections == 3


async def test_a_post_reset_after_it_was_written_is_not_retried(
    servers, client: HttpClient
) -> None:
    server = await servers(_answers_then_resets_the_next_request())
    response = await client.request("POST", server.url(), body=b"{}", timeout_s=5)
    await response.read()
    response.release()
    with pytest.raises(ConnectionClosed) as raised:  # it may have reached a handler
        await client.request("POST", server.url(), body=b"{}", timeout_s=5)
    assert raised.value.request_sent is True
    assert server.connections == 1


async def test_a_post_marked_retry_unanswered_is_sent_again_on_a_fresh_connection(
    servers, client: HttpClient
) -> None:
    """A model call (no side effect a repeat could double) on a reused connection that ends
    before any answer byte: once more on a new connection."""
    server = await servers(_answers_then_resets_the_next_request())
    response = await client.request("POST", server.url(), body=b"{}", timeout_s=5)
    await response.read()
    response.release()
    response = await client.request(
        "POST", server.url(), body=b"{}", timeout_s=5, retry_unanswered=True
    )
    assert (response.status, await response.read()) == (200, b"answered")
    response.release()
    assert server.connections == 2


async def test_a_response_released_without_reuse_closes_its_connection(
    servers, client: HttpClient
) -> None:
    """The caller saw the protocol inside the body end abnormally (a stream without its end
    marker): complete in HTTP, the connection is still not pooled."""
    stream = SSE_HEAD + _chunk(EVENT) + b"0\r\n\r\n"
    server = await servers(keep_answering(stream))
    response = await client.request("POST", server.url(), body=b"{}", read_timeout_s=5)
    assert await response.read() == EVENT
    response.release(reuse=False)
    assert client.usage() == (0, 0)
    assert await server.hung_up()
