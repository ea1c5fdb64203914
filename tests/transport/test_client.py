"""The outbound HTTP/1.1 client against real sockets: scripted raw servers for framing and
failure cases, a real aiohttp server for the ordinary ones, a real TLS handshake."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from clawpod.sidecar.transport import (
    ConnectError,
    ConnectionClosed,
    HttpClient,
    InvalidResponse,
    Timeout,
)
from clawpod.sidecar.transport.http1 import HIGH_WATER
from tests.transport.raw_server import RawServer, Script, answer, keep_answering, replies_once

# -- the ordinary exchange ---------------------------------------------------------------------


async def test_requests_reuse_one_keep_alive_connection(servers, client: HttpClient) -> None:
    server = await servers(keep_answering(answer(b'{"ok":true}', "Content-Type: application/json")))
    for n in range(3):
        response = await client.request(
            "POST",
            server.url("/v1/things?x=1"),
            headers={"Authorization": "Bearer k"},
            body=b'{"n":%d}' % n,
            timeout_s=5,
        )
        assert (response.status, response.content_type) == (200, "application/json")
        assert await response.read() == b'{"ok":true}'
        response.release()
    assert server.connections == 1
    assert (client.connections.created, client.connections.reused) == (1, 2)
    assert client.usage() == (1, 0)
    first = server.requests[0]
    assert first.startswith(b"POST /v1/things?x=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}\r\n".encode() in first
    assert b"User-Agent: test-agent\r\n" in first
    assert b"Authorization: Bearer k\r\n" in first
    assert first.endswith(b"Content-Length: 7\r\n\r\n" + b'{"n":0}')


async def test_headers_keep_the_servers_names_and_look_up_in_any_case(
    servers, client: HttpClient
) -> None:
    server = await servers(
        keep_answering(answer(b"", "X-RateLimit-Remaining: 9", "x-ratelimit-remaining: 8"))
    )
    response = await client.request("GET", server.url(), timeout_s=5)
    await response.read()
    response.release()
    names = [name for name, _ in response.headers.items()]
    assert names[:3] == ["Content-Length", "X-RateLimit-Remaining", "x-ratelimit-remaining"]
    assert response.headers["X-RATELIMIT-REMAINING"] == "9, 8"
    assert "content-length" in response.headers and "nope" not in response.headers
    assert response.content_length == 0


async def test_get_sends_no_body_and_no_length(servers, client: HttpClient) -> None:
    server = await servers(keep_answering(answer(b"x")))
    response = await client.request("GET", server.url("/q"), timeout_s=5)
    assert await response.read() == b"x"
    response.release()
    assert b"content-length" not in server.requests[0].lower()
    assert server.requests[0].endswith(b"\r\n\r\n")


async def test_chunks_reach_the_reader_as_they_arrive(servers, client: HttpClient) -> None:
    gate = asyncio.Event()

    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await gate.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()
        await srv.read_request(reader)

    server = await servers(script)
    response = await client.request("POST", server.url(), body=b"{}", read_timeout_s=5)
    assert await response.read_chunk() == b"first"  # before the server sent the rest
    gate.set()
    assert await response.read_chunk() == b"second"
    assert await response.read_chunk() == b""
    assert response.complete
    response.release()
    assert client.usage() == (1, 0)


async def test_interim_100_continue_is_skipped(servers, client: HttpClient) -> None:
    server = await servers(keep_answering(b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"done")))
    response = await client.request("POST", server.url(), body=b"{}", timeout_s=5)
    assert (response.status, await response.read()) == (200, b"done")
    response.release()


async def test_gzip_bodies_are_decoded(servers, client: HttpClient) -> None:
    server = await servers(
        keep_answering(answer(gzip.compress(b"hello " * 100), "Content-Encoding: gzip"))
    )
    response = await client.request("GET", server.url(), timeout_s=5)
    assert await response.read() == b"hello " * 100
    response.release()


# -- connections that must not be reused -------------------------------------------------------


async def test_close_delimited_body_ends_with_the_connection(servers, client: HttpClient) -> None:
    server = await servers(replies_once(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"))
    for _ in range(2):
        response = await client.request("GET", server.url(), timeout_s=5)
        assert await response.read() == b"all of it"
        response.release()
    assert server.connections == 2
    assert client.connections.reused == 0


async def test_connection_close_header_stops_reuse(servers, client: HttpClient) -> None:
    server = await servers(keep_answering(answer(b"ok", "Connection: close")))
    for _ in range(2):
        response = await client.request("GET", server.url(), timeout_s=5)
        assert await response.read() == b"ok"
        response.release()
    assert server.connections == 2


async def test_a_body_left_unread_closes_the_connection(servers, client: HttpClient) -> None:
    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        if srv.connections == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart")
            await writer.drain()
            await srv.read_request(reader)  # the rest never comes
        else:
            writer.write(answer(b"whole"))
            await writer.drain()

    server = await servers(script)
    response = await client.request("GET", server.url(), timeout_s=5)
    response.release()
    response = await client.request("GET", server.url(), timeout_s=5)
    assert await response.read() == b"whole"
    response.release()
    assert server.connections == 2


async def test_idle_connections_expire(servers) -> None:
    server = await servers(keep_answering(answer(b"ok")))
    client = HttpClient(keepalive_s=0.1, connect_timeout_s=5)
    try:
        response = await client.request("GET", server.url(), timeout_s=5)
        await response.read()
        response.release()
        assert await server.hung_up(), "the sweeper closes the idle connection"
        assert client.usage() == (0, 0)
    finally:
        await client.close()


# -- failures ----------------------------------------------------------------------------------


async def test_refused_connection_is_a_connect_error(client: HttpClient) -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(ConnectError) as raised:
        await client.request("GET", f"http://127.0.0.1:{port}/", timeout_s=5)
    assert raised.value.reason == "connection refused"
    assert raised.value.request_sent is False
    assert client.usage() == (0, 0)


async def test_close_before_answering(servers, client: HttpClient) -> None:
    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)

    server = await servers(script)
    with pytest.raises(ConnectionClosed, match="before answering") as raised:
        await client.request("POST", server.url(), body=b"{}", timeout_s=5)
    assert raised.value.request_sent is True


async def test_close_mid_body(servers, client: HttpClient) -> None:
    server = await servers(replies_once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"))
    response = await client.request("GET", server.url(), timeout_s=5)
    with pytest.raises(ConnectionClosed, match="mid-answer"):
        await response.read()
    response.release()
    assert client.usage() == (0, 0)


@pytest.mark.parametrize(
    "reply",
    [b"SMTP ready\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n"],
    ids=["not-http", "bad-length"],
)
async def test_garbage_is_an_invalid_response(servers, client: HttpClient, reply: bytes) -> None:
    server = await servers(keep_answering(reply))
    with pytest.raises(InvalidResponse):
        await client.request("GET", server.url(), timeout_s=5)
    assert client.usage() == (0, 0)


async def test_unsupported_encoding_is_an_invalid_response(servers, client: HttpClient) -> None:
    server = await servers(keep_answering(answer(b"\x00\x01", "Content-Encoding: br")))
    with pytest.raises(InvalidResponse, match="br"):
        await client.request("GET", server.url(), timeout_s=5)


async def test_total_timeout_covers_the_head(servers, client: HttpClient) -> None:
    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        await srv.read_request(reader)  # never answers; returns when the client hangs up

    server = await servers(script)
    started = asyncio.get_running_loop().time()
    with pytest.raises(Timeout) as raised:
        await client.request("GET", server.url(), timeout_s=0.2)
    assert asyncio.get_running_loop().time() - started < 2
    assert raised.value.request_sent is True
    assert await server.hung_up(), "a timed-out connection is closed, not pooled"
    assert client.usage() == (0, 0)


async def test_read_timeout_is_per_gap_between_chunks(servers, client: HttpClient) -> None:
    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4):  # 4 x 0.1 s: longer than the timeout in all, shorter per gap
            writer.write(b"1\r\na\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)  # then silence

    server = await servers(script)
    response = await client.request("GET", server.url(), read_timeout_s=0.3)
    received = b""
    with pytest.raises(Timeout):
        while chunk := await response.read_chunk():
            received += chunk
    assert received == b"aaaa"
    response.release()


async def test_a_slow_reader_is_not_a_server_timeout(servers, client: HttpClient) -> None:
    server = await servers(keep_answering(answer(b"y" * 1000)))
    response = await client.request("GET", server.url(), read_timeout_s=0.1)
    await asyncio.sleep(0.3)  # the reader is busy; the bytes are already here
    assert await response.read() == b"y" * 1000
    response.release()


def _answers_once_then_hangs_up() -> Script:
    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(answer(b"answered"))
        await writer.drain()
        await srv.read_request(reader)  # the next request on this connection: hang up

    return script


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_stale_keep_alive_get_is_retried_post_is_not(
    servers, client: HttpClient, method: str
) -> None:
    server = await servers(_answers_once_then_hangs_up())
    response = await client.request("GET", server.url(), timeout_s=5)
    assert await response.read() == b"answered"
    response.release()
    if method == "GET":
        response = await client.request("GET", server.url(), timeout_s=5)
        assert await response.read() == b"answered"  # sent again on a new connection
        response.release()
        assert server.connections == 2
    else:
        with pytest.raises(ConnectionClosed):  # a POST may have been acted on: never resent
            await client.request("POST", server.url(), body=b"{}", timeout_s=5)
        assert server.connections == 1


async def test_cancelled_request_closes_its_connection(servers, client: HttpClient) -> None:
    async def script(reader, writer, srv: RawServer) -> None:
        await srv.read_request(reader)
        await srv.read_request(reader)

    server = await servers(script)
    task = asyncio.ensure_future(client.request("GET", server.url(), timeout_s=30))
    while not server.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await server.hung_up()
    assert client.usage() == (0, 0)


async def test_slow_reader_pauses_the_socket(servers, client: HttpClient) -> None:
    total = 16 * 1024 * 1024
    sent = 0

    async def script(reader, writer, srv: RawServer) -> None:
        nonlocal sent
        await srv.read_request(reader)
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n".encode())
        block = b"z" * 65536
        while sent < total:
            writer.write(block)
            await writer.drain()
            sent += len(block)

    server = await servers(script)
    response = await client.request("GET", server.url(), read_timeout_s=5)
    await asyncio.sleep(0.3)
    assert sent < total, "the server could send everything: nothing pushed back"
    assert response._buffered <= 2 * HIGH_WATER
    received = 0
    while chunk := await response.read_chunk():
        received += len(chunk)
    assert received == total
    response.release()


async def test_per_origin_limit_queues_and_times_out(servers) -> None:
    release = asyncio.Event()

    async def script(reader, writer, srv: RawServer) -> None:
        while await srv.read_request(reader) is not None:
            await release.wait()
            writer.write(answer(b"ok"))
            await writer.drain()

    server = await servers(script)
    client = HttpClient(keepalive_s=30, connect_timeout_s=5, max_connections_per_origin=1)
    try:
        first = asyncio.ensure_future(client.request("GET", server.url(), timeout_s=5))
        while not server.requests:
            await asyncio.sleep(0.01)
        with pytest.raises(Timeout, match="no connection became free"):
            await client.request("GET", server.url(), timeout_s=0.2)
        second = asyncio.ensure_future(client.request("GET", server.url(), timeout_s=5))
        release.set()
        for task in (first, second):
            response = await task
            assert await response.read() == b"ok"
            response.release()
        assert server.connections == 1
    finally:
        await client.close()


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nInjected: yes"},
        {"Bad:Name": "v"},
        {"X-Nul": "a\0"},
        {"X-Cr": "a\rb"},
        {"X-Lf\nInjected": "v"},
        {"": "v"},
    ],
)
async def test_header_injection_is_refused(client: HttpClient, headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="cannot be sent"):
        client.prepare("GET", "http://127.0.0.1:1/", headers)


@pytest.mark.parametrize("url", ["ftp://host/x", "http:///nohost", "http://h/a b"])
async def test_unusable_urls_are_refused(client: HttpClient, url: str) -> None:
    client.prepare("GET", "http://host/ok")  # an origin's pool is made once and remembered
    with pytest.raises(ValueError):
        client.prepare("GET", url)


# -- TLS ---------------------------------------------------------------------------------------


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_https_verifies_and_reuses(servers, tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    server = await servers(keep_answering(answer(b"secure")), server_side)

    trusting = ssl.create_default_context(cafile=str(cert))
    client = HttpClient(keepalive_s=30, connect_timeout_s=5, ssl_context=trusting)
    try:
        for _ in range(2):
            response = await client.request("GET", server.url(scheme="https"), timeout_s=5)
            assert await response.read() == b"secure"
            response.release()
        assert (client.connections.created, client.connections.reused) == (1, 1)
    finally:
        await client.close()

    default = HttpClient(keepalive_s=30, connect_timeout_s=5)  # system CAs: not trusted
    try:
        with pytest.raises(ConnectError, match="TLS handshake failed"):
            await default.request("GET", server.url(scheme="https"), timeout_s=5)
    finally:
        await default.close()
