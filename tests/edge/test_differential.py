"""The differential raw-wire suite: each malformed, smuggling or limit case goes byte for byte
to the sidecar and to a plain aiohttp server. Wherever plain aiohttp refuses (a 4xx or a close)
the sidecar refuses too, never answers more requests than aiohttp did (no smuggled request),
and after each case holds no more sockets or tasks than before it (its connection gone within
its deadlines, here half a second) and no runaway memory."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.edge.wire import (
    BODY,
    CHAT,
    GUARD_S,
    Outcome,
    RawClient,
    chat_request,
    held,
    outcome,
)
from tests.sidecar.conftest import Pod

Case = Callable[[str], list[bytes]]  # token -> the pieces to send, in order
QUIET_S = 0.3  # how long plain aiohttp's silence means "nothing more"; never an assertion
RSS_SLACK = 64 * 1024 * 1024  # generous: catches hundreds of MB, not allocator noise
OVERSIZED = 200_000


def head(token: str, *fields: str, path: str = CHAT, version: str = "1.1") -> bytes:
    lines = [f"POST {path} HTTP/{version}", "Host: sidecar", f"Authorization: Bearer {token}"]
    return ("\r\n".join([*lines, *fields]) + "\r\n\r\n").encode()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


CASES: dict[str, Case] = {
    # issue 13 finding 1: one header value without bound while it arrives
    "huge header value": lambda t: [head(t, "X-Pad: " + "a" * OVERSIZED)],
    "huge request line": lambda t: [head(t, path="/" + "a" * OVERSIZED)],
    "129 header fields": lambda t: [head(t, *(f"X-{n}: v" for n in range(129)))],
    # finding 2: a valid head whose body then fails to parse
    "TE gzip": lambda t: [head(t, "Transfer-Encoding: gzip") + BODY],
    "TE xchunked": lambda t: [head(t, "Transfer-Encoding: xchunked") + chunked(BODY)],
    "TE chunked, identity": lambda t: [
        head(t, "Transfer-Encoding: chunked, identity") + chunked(BODY)
    ],
    "TE with a space before the colon": lambda t: [
        head(t, "Transfer-Encoding : chunked") + chunked(BODY)
    ],
    "bad chunk size": lambda t: [head(t, "Transfer-Encoding: chunked") + b"zz\r\n" + BODY],
    "huge chunk size": lambda t: [
        head(t, "Transfer-Encoding: chunked") + b"ffffffffffffffffffff\r\n" + BODY
    ],
    "chunk without its CRLF": lambda t: [
        head(t, "Transfer-Encoding: chunked") + b"%x\r\n%bXX0\r\n\r\n" % (len(BODY), BODY)
    ],
    "Content-Length in a trailer": lambda t: [
        head(t, "Transfer-Encoding: chunked")
        + b"%x\r\n%b\r\n0\r\nContent-Length: 5\r\n\r\n" % (len(BODY), BODY)
    ],
    "129 trailers": lambda t: [
        head(t, "Transfer-Encoding: chunked")
        + b"%x\r\n%b\r\n0\r\n" % (len(BODY), BODY)
        + b"".join(b"X-%d: v\r\n" % n for n in range(129))
        + b"\r\n"
    ],
    # the CL/TE matrix
    "CL and TE": lambda t: [
        head(t, f"Content-Length: {len(BODY)}", "Transfer-Encoding: chunked") + chunked(BODY)
    ],
    "duplicate CL, different": lambda t: [
        head(t, f"Content-Length: {len(BODY)}", "Content-Length: 3") + BODY
    ],
    "duplicate CL, same": lambda t: [
        head(t, f"Content-Length: {len(BODY)}", f"Content-Length: {len(BODY)}") + BODY
    ],
    "CL with a plus sign": lambda t: [head(t, f"Content-Length: +{len(BODY)}") + BODY],
    "negative CL": lambda t: [head(t, "Content-Length: -1") + BODY],
    "CL then a smuggled request": lambda t: [
        head(t, "Content-Length: 0")
        + b"GET /v1/models HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer "
        + t.encode()
        + b"\r\n\r\n"
    ],
    "TE chunked then a smuggled request in the body": lambda t: [
        head(t, "Transfer-Encoding: chunked", "Content-Length: 4")
        + b"0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: s\r\n\r\n"
    ],
    "obs-fold": lambda t: [head(t, f"Content-Length: {len(BODY)}", "X-A: b", " c") + BODY],
    "obs-fold in TE": lambda t: [
        head(t, "Transfer-Encoding: identity", " chunked") + chunked(BODY)
    ],
    "NUL in a header value": lambda t: [
        head(t, f"Content-Length: {len(BODY)}", "X-A: b\x00c") + BODY
    ],
    "NUL in a header name": lambda t: [head(t, f"Content-Length: {len(BODY)}", "X\x00A: b") + BODY],
    "bare LF line ends": lambda t: [
        head(t, f"Content-Length: {len(BODY)}").replace(b"\r\n", b"\n") + BODY
    ],
    "missing CRLF after the head": lambda t: [head(t, f"Content-Length: {len(BODY)}")[:-2]],
    "space in the header name": lambda t: [
        head(t, f"Content-Length: {len(BODY)}", "X A: b") + BODY
    ],
    "doubled Host": lambda t: [head(t, "Host: elsewhere", f"Content-Length: {len(BODY)}") + BODY],
    "missing Host": lambda t: [
        head(t, f"Content-Length: {len(BODY)}").replace(b"Host: sidecar\r\n", b"") + BODY
    ],
    "HTTP/1.0 keep-alive then pipelined after a close": lambda t: [
        head(t, f"Content-Length: {len(BODY)}", "Connection: keep-alive", version="1.0")
        + BODY
        + head(t, f"Content-Length: {len(BODY)}", "Connection: close")
        + BODY
        + head(t, f"Content-Length: {len(BODY)}")
        + BODY
    ],
    "HTTP/1.0 with Expect: 100-continue": lambda t: [
        head(t, f"Content-Length: {len(BODY)}", "Expect: 100-continue", version="1.0") + BODY
    ],
    "unknown HTTP version": lambda t: [head(t, f"Content-Length: {len(BODY)}", version="1.7")],
    "bad method": lambda t: [b"P\x01ST " + CHAT.encode() + b" HTTP/1.1\r\nHost: s\r\n\r\n"],
    "TLS hello on the plain port": lambda t: [bytes.fromhex("160301020001") + b"\x00" * 64],
    "non-UTF-8 token": lambda t: [
        b"POST /v1/messages HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer claw_\xff\xfe\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(BODY), BODY)
    ],
    "non-UTF-8 forwarded header": lambda t: [
        head(
            t, "anthropic-version: 2023-06-01", f"Content-Length: {len(BODY)}", path="/v1/messages"
        ).replace(b"2023-06-01", b"2023-\xff")
        + BODY
    ],
    "a body that never arrives": lambda t: [head(t, "Content-Length: 100") + b'{"model"'],
    "a chunked body that never ends": lambda t: [
        head(t, "Transfer-Encoding: chunked") + b"5\r\nhello\r\n"
    ],
    "a head that never ends": lambda t: [head(t)[:-4]],
    # issue 30: a connection that asks nothing holds its slot only until the head deadline
    "a connection that never sends a byte": lambda t: [],
    "one byte, then silence": lambda t: [b"P"],
    "a head a byte at a time": lambda t: [bytes([b]) for b in head(t)[:30]],
}


async def run_case(address: tuple[str, int], pieces: list[bytes], first_s: float) -> Outcome:
    """Send the case; read answers until the server closes or (plain aiohttp) goes quiet."""
    client = await RawClient.open(address)
    try:
        for piece in pieces:
            if not await client.send(piece):
                return Outcome(closed=True)
            await asyncio.sleep(0.05 if len(pieces) > 1 else 0)  # arrive in pieces
        return await outcome(client, first_s, first_s)
    finally:
        await client.close()


@pytest.mark.parametrize("name", list(CASES))
async def test_the_sidecar_refuses_whatever_aiohttp_refuses(
    name: str, short_pod: Pod, plain_aiohttp: tuple[str, int]
) -> None:
    listening = short_pod.sidecar.listening
    pieces = CASES[name](short_pod.token)
    plain = await run_case(plain_aiohttp, pieces, QUIET_S)
    # One good request first: the pooled connection to the provider is not the case's.
    warm = await RawClient.open(listening.address)
    await warm.send(chat_request(short_pod.token))
    assert (await warm.answer()).status == 200
    await warm.close()
    before = held()
    # The sidecar ends every connection within its deadlines: read until it does.
    sidecar = await run_case(listening.address, pieces, GUARD_S)
    assert sidecar.closed, f"{name}: the sidecar kept the connection ({sidecar})"
    if plain.refused:
        assert sidecar.refused, (
            f"{name}: aiohttp refused ({plain}), the sidecar did not ({sidecar})"
        )
    assert len(sidecar.statuses) <= max(len(plain.statuses), 1), (name, plain, sidecar)
    assert all(status != 500 for status in sidecar.statuses), (name, sidecar)
    # Nothing left behind: the server's side of the connection, its tasks, its memory.
    for _ in range(int(GUARD_S / 0.01)):
        now = held()
        if not listening.open_connections and now.fds <= before.fds and now.tasks <= before.tasks:
            break
        await asyncio.sleep(0.01)
    after = held()
    assert listening.open_connections == 0, name
    assert after.fds <= before.fds, (name, before, after)
    assert after.tasks <= before.tasks, (name, before, after)
    assert after.rss_bytes - before.rss_bytes < RSS_SLACK, (name, before, after)
