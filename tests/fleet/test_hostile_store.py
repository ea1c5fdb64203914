"""A shared store that answers out of bounds, out of shape or not at all (SPEC §24): every
call is bounded, and the answer costs the sidecar a refusal (fail-closed) or a local decision
(fail-local), never its memory or its requests. The "store" is a local TCP server speaking
just enough RESP to lie."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from clawpod.sidecar.manifest import Rate
from clawpod.sidecar.state.counters import Claim, Hold, LocalCounters, SharedLimitsUnavailable
from clawpod.sidecar.state.shared_counters import MAX_REPLY_BYTES, SharedCounters, connect

CLAIMS = [Claim("a", 1000, None)]
HUGE = 1 << 30
LATE_S = 0.8  # past the calls' bound of 0.5 s


class LyingStore:
    """Answers every command with ``answer(writer)``; counts the bytes it got out."""

    def __init__(self, answer: Callable[[asyncio.StreamWriter], object]) -> None:
        self.answer = answer
        self.sent = 0
        self.commands = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):
                self.commands += 1
                result = self.answer(writer)
                if asyncio.iscoroutine(result):
                    await result
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def url(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"


async def _endless(store: LyingStore, writer: asyncio.StreamWriter) -> None:
    """A bulk string announced at 1 GiB, then bytes for as long as anyone reads them."""
    writer.write(f"${HUGE}\r\n".encode())
    chunk = b"x" * 65536
    while store.sent < HUGE:
        writer.write(chunk)
        await writer.drain()
        store.sent += len(chunk)


@pytest.fixture
async def counters_on(tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    made: list[tuple[SharedCounters, LyingStore]] = []

    async def make(
        store: LyingStore,
        on_unreachable: str = "fail-closed",
        clock: Callable[[], float] = time.monotonic,
    ) -> SharedCounters:
        counters = SharedCounters(
            connect(await store.url(), timeout_s=0.5),
            pod="desk",
            on_unreachable=on_unreachable,  # type: ignore[arg-type]
            local=LocalCounters(tmp_path, ["a"], []),
            timeout_s=0.5,
            clock=clock,
        )
        made.append((counters, store))
        return counters

    yield make
    for counters, store in made:
        await counters.close()
        if store.server is not None:
            store.server.close()


async def test_an_answer_announced_huge_is_refused_before_it_is_read(counters_on) -> None:  # type: ignore[no-untyped-def]
    store = LyingStore(lambda writer: None)
    store.answer = lambda writer: _endless(store, writer)
    counters = await counters_on(store)
    with pytest.raises(SharedLimitsUnavailable):
        await counters.reserve(CLAIMS, 10, 0.0)
    await asyncio.sleep(0.05)
    # The parser dropped the connection at the header: the store got out what the socket
    # buffers held, not the gigabyte it announced.
    assert store.sent < 64 * MAX_REPLY_BYTES


@pytest.mark.parametrize(
    "answer",
    [b":99\r\n", b"+OK\r\n", b"*2\r\n:1\r\n:1\r\n", b"-ERR no\r\n", b"$3\r\nabc\r\n"],
    ids=["out-of-range", "status", "array", "error", "string"],
)
async def test_an_answer_out_of_shape_is_a_store_away(counters_on, answer: bytes) -> None:  # type: ignore[no-untyped-def]
    counters = await counters_on(LyingStore(lambda writer: writer.write(answer)), "fail-local")
    hold = await counters.reserve(CLAIMS, 10, 0.0)
    assert hold is not None and not hold.shared  # decided by this sidecar, and said so
    assert not counters.up
    assert await counters.take(("a", "t", 0), Rate(count=1, per="minute"))


async def test_a_store_that_never_answers_costs_one_bounded_wait(counters_on) -> None:  # type: ignore[no-untyped-def]
    store = LyingStore(lambda writer: None)
    counters = await counters_on(store, clock=lambda: 0.0)  # the pause never ends
    with pytest.raises(SharedLimitsUnavailable):
        await counters.reserve(CLAIMS, 10, 0.0)
    # Marked away: the next checks do not ask (nor wait for) it again until the pause is over.
    for _ in range(20):
        with pytest.raises(SharedLimitsUnavailable):
            await counters.reserve(CLAIMS, 10, 0.0)
    assert store.commands == 1


async def test_an_answer_that_comes_late_is_never_taken_for_the_next_one(counters_on) -> None:  # type: ignore[no-untyped-def]
    """The first reservation's answer ("refused") comes after the call gave up on it: the
    connection it would arrive on is dropped, so the next reservation reads its own ("held")."""

    async def answer(writer: asyncio.StreamWriter) -> None:
        if store.commands == 1:
            await asyncio.sleep(LATE_S)
            writer.write(b":1\r\n")
        else:
            writer.write(b":0\r\n")

    store = LyingStore(answer)
    counters = await counters_on(store)
    with pytest.raises(SharedLimitsUnavailable):
        await counters.reserve(CLAIMS, 10, 0.0)
    await asyncio.sleep(LATE_S + 0.5)  # the late answer was sent; the pause after it is over

    hold = await counters.reserve(CLAIMS, 10, 0.0)

    assert isinstance(hold, Hold) and hold.shared
    assert store.commands == 2
