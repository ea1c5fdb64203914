"""Issue 13 findings 3 and 4: pipelined requests whose answers are not read make the sidecar
stop reading (answers still come, in order, once they are read), and a body of tiny chunks
sent after the answer went out is not buffered."""

from __future__ import annotations

import asyncio

from tests.edge.wire import CHAT, GUARD_S, RawClient, held, outcome
from tests.sidecar.conftest import Pod

PIPELINED = 5_000
RSS_SLACK = 48 * 1024 * 1024  # the hand-written front door grew by 181-317 MB on such input


async def test_unread_pipelined_answers_stop_the_reading(pod: Pod) -> None:
    before = held()
    client = await RawClient.open(pod.sidecar.listening.address)
    requests = [
        b"GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n",
        b"GET /nope HTTP/1.1\r\nHost: s\r\n\r\n",
    ]
    client.writer.write(b"".join(requests) * (PIPELINED // 2))  # no drain: it cannot complete
    server = pod.sidecar.listening.runner.server
    assert server is not None
    (connection,) = server.connections
    # aiohttp queues at most 32 parsed requests, then stops reading the socket.
    for _ in range(int(GUARD_S / 0.01)):
        if connection._reading_paused or connection._buffer_paused:
            break
        await asyncio.sleep(0.01)
    assert connection._reading_paused or connection._buffer_paused
    assert held().rss_bytes - before.rss_bytes < RSS_SLACK
    for n in range(PIPELINED):  # every answer, in order
        answer = await client.answer()
        assert answer.status == (200 if n % 2 == 0 else 404), n
    await client.close()


async def test_a_body_of_tiny_chunks_after_a_403_is_not_buffered(short_pod: Pod) -> None:
    """The sidecar reads an unwanted body and drops it (for half a second here), then closes."""
    before = held()
    client = await RawClient.open(short_pod.sidecar.listening.address)
    await client.send(
        f"POST {CHAT} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer claw_wrong\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
    )
    answer = await client.answer()
    assert answer.status == 403
    payload_bytes = 0
    tiny = b"2\r\nab\r\n" * 4096  # 8 KiB of payload in 2-byte chunks
    while payload_bytes < 4 * 1024 * 1024:
        if not await client.send(tiny):
            break
        payload_bytes += 8192
    assert held().rss_bytes - before.rss_bytes < RSS_SLACK
    await client.send(b"0\r\n\r\n")
    seen = await outcome(client, GUARD_S, GUARD_S)
    assert seen.closed or seen.statuses == []
    await client.close()
