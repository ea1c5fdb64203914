"""What a misbehaving server can make the client hold: response heads (64 KiB, 128 fields),
trailers, decompressed bodies and the caller's ``max_body_bytes``. Each server is a scripted
raw socket writing exact bytes (SPEC §10; issue 13, finding 6)."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib

import pytest

from clawpod.sidecar.transport import BodyTooLarge, HttpClient, InvalidResponse
from clawpod.sidecar.transport.http1 import HIGH_WATER, MAX_HEAD_BYTES, MAX_HEADER_FIELDS
from tests.transport.raw_server import RawServer, Script, answer, keep_answering

MiB = 1024 * 1024


def streams_forever(prefix: bytes, filler: bytes) -> Script:
    """Answers with ``prefix`` and then ``filler`` over and over until the client hangs up."""

    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(prefix)
        block = filler * (65536 // len(filler))
        try:
            while True:
                writer.write(block)
                await writer.drain()
        except ConnectionError:
            srv.eofs += 1  # the client hung up

    return script


def sends_in_pieces(reply: bytes) -> Script:
    """Answers ``reply`` 64 KiB at a time, so the server holds no copy of it in its buffers."""

    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        view = memoryview(reply)
        for start in range(0, len(view), 65536):
            writer.write(view[start : start + 65536])
            await writer.drain()

    return script


def _head_with(fields: list[str]) -> bytes:
    return ("HTTP/1.1 200 OK\r\n" + "".join(f"{f}\r\n" for f in fields)).encode()


async def _peak_allocation(work) -> int:
    """The most memory Python objects held at once while ``work`` ran, in bytes."""
    tracemalloc.start()
    try:
        await work
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- response heads ----------------------------------------------------------------------------


async def test_an_endless_header_value_fails_at_the_head_bound(servers, client: HttpClient) -> None:
    server = await servers(streams_forever(b"HTTP/1.1 200 OK\r\nX-Pad: ", b"a"))
    with pytest.raises(InvalidResponse, match="head is larger than 65536 bytes") as raised:
        await client.request("GET", server.url(), timeout_s=10)
    assert raised.value.request_sent is True
    assert await server.hung_up(), "the connection is closed, not pooled"
    assert client.usage() == (0, 0)


async def test_two_million_header_fields_fail_at_the_field_bound(
    servers, client: HttpClient
) -> None:
    reply = _head_with(["a: b"] * 2_000_000) + b"Content-Length: 0\r\n\r\n"
    server = await servers(sends_in_pieces(reply))

    async def request() -> None:
        with pytest.raises(InvalidResponse, match="more than 128 header fields"):
            await client.request("GET", server.url(), timeout_s=10)

    assert await _peak_allocation(request()) < 4 * MiB
    assert client.usage() == (0, 0)


async def test_a_head_at_the_bounds_is_accepted(servers, client: HttpClient) -> None:
    fields = [f"X-F{i}: v" for i in range(MAX_HEADER_FIELDS - 2)]
    head = _head_with([*fields, "Content-Length: 2"])
    pad = MAX_HEAD_BYTES - len(head) - len("X-Pad: \r\n\r\n")
    reply = _head_with([*fields, "Content-Length: 2", "X-Pad: " + "p" * pad]) + b"\r\nok"
    assert reply.index(b"\r\n\r\n") + 4 == MAX_HEAD_BYTES
    server = await servers(keep_answering(reply))
    response = await client.request("GET", server.url(), timeout_s=5)
    assert len(response.headers) == MAX_HEADER_FIELDS
    assert await response.read() == b"ok"
    response.release()


async def test_endless_interim_answers_count_against_the_head_bound(
    servers, client: HttpClient
) -> None:
    server = await servers(streams_forever(b"", b"HTTP/1.1 100 Continue\r\n\r\n"))
    with pytest.raises(InvalidResponse, match="head is larger"):
        await client.request("GET", server.url(), timeout_s=10)


async def test_an_endless_trailer_value_fails(servers, client: HttpClient) -> None:
    prefix = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Pad: "
    server = await servers(streams_forever(prefix, b"a"))
    response = await client.request("GET", server.url(), timeout_s=10)
    with pytest.raises(InvalidResponse, match="without a body byte"):
        await response.read()
    response.release()
    assert client.usage() == (0, 0)


async def test_trailers_are_bounded_and_never_join_the_headers(servers, client: HttpClient) -> None:
    body = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"
    server = await servers(keep_answering(body + b"X-Trailer: t\r\n\r\n"))
    response = await client.request("GET", server.url(), timeout_s=5)
    assert await response.read() == b"ok"
    assert "x-trailer" not in response.headers
    response.release()

    many = "".join(f"T{i}: v\r\n" for i in range(MAX_HEADER_FIELDS + 1)).encode()
    server = await servers(keep_answering(body + many + b"\r\n"))
    response = await client.request("GET", server.url(), timeout_s=5)
    with pytest.raises(InvalidResponse, match="more than 128 trailer fields"):
        await response.read()
    response.release()


async def test_bytes_after_the_answer_are_not_taken_for_it(servers, client: HttpClient) -> None:
    unasked = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra"
    server = await servers(keep_answering(answer(b"one") + unasked))
    for _ in range(2):
        response = await client.request("GET", server.url(), timeout_s=5)
        assert (response.status, await response.read()) == (200, b"one")
        response.release()
    assert server.connections == 2, "a connection that said more than asked is not reused"


# -- decompression -----------------------------------------------------------------------------


def _bomb(decoded_size: int) -> bytes:
    return gzip.compress(b"\0" * decoded_size, 9)


async def test_a_gzip_bomb_is_decoded_no_faster_than_it_is_read(
    servers, client: HttpClient
) -> None:
    decoded = 256 * MiB
    server = await servers(keep_answering(answer(_bomb(decoded), "Content-Encoding: gzip")))

    async def read_through() -> None:
        response = await client.request("GET", server.url(), timeout_s=30)
        received = 0
        while chunk := await response.read_chunk():
            assert response._buffered <= 2 * HIGH_WATER
            received += len(chunk)
        response.release()
        assert received == decoded

    assert await _peak_allocation(read_through()) < 8 * MiB


async def test_a_gzip_bomb_stops_at_max_body_bytes(servers, client: HttpClient) -> None:
    server = await servers(keep_answering(answer(_bomb(64 * MiB), "Content-Encoding: gzip")))

    async def read_whole() -> None:
        response = await client.request("GET", server.url(), timeout_s=30, max_body_bytes=MiB)
        with pytest.raises(BodyTooLarge) as raised:
            await response.read()
        assert raised.value.limit == MiB
        assert raised.value.request_sent is True
        response.release()

    assert await _peak_allocation(read_whole()) < 8 * MiB
    assert client.usage() == (0, 0), "a body cut at the bound closes its connection"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "identity"])
async def test_max_body_bytes_delivers_up_to_the_bound_then_fails(
    servers, client: HttpClient, encoding: str
) -> None:
    plain = bytes(range(256)) * 64  # 16 KiB
    coded = {"gzip": gzip.compress, "deflate": zlib.compress, "identity": bytes}[encoding](plain)
    server = await servers(keep_answering(answer(coded, f"Content-Encoding: {encoding}")))

    response = await client.request("GET", server.url(), timeout_s=5, max_body_bytes=len(plain))
    assert await response.read() == plain  # exactly at the bound
    response.release()

    response = await client.request("GET", server.url(), timeout_s=5, max_body_bytes=1000)
    received = b""
    with pytest.raises(BodyTooLarge):
        while chunk := await response.read_chunk():
            received += chunk
    assert received == plain[:1000]
    response.release()


async def test_a_large_compressed_body_read_slowly_arrives_whole(
    servers, client: HttpClient
) -> None:
    plain = b"".join(b"line %d of a long answer\n" % i for i in range(400_000))  # ~10 MiB
    server = await servers(keep_answering(answer(gzip.compress(plain), "Content-Encoding: gzip")))
    response = await client.request("GET", server.url(), timeout_s=30)
    await asyncio.sleep(0.2)  # let the server send all it can while nothing is read
    assert response._buffered <= 2 * HIGH_WATER
    assert await response.read() == plain
    response.release()
    assert client.connections.created == 1
    response = await client.request("GET", server.url(), timeout_s=30)
    assert await response.read() == plain
    response.release()
    assert client.connections.reused == 1, "a body decoded to its end leaves a reusable connection"
