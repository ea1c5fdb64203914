"""A translated stream read to its end marker gives its connection back to the pool; one cut
short never does (the pooled-connection rules of docs/architecture.md, transport/)."""

from __future__ import annotations

import asyncio

import anthropic
import pytest

from clawpod.sidecar.manifest import Provider
from tests.sidecar.conftest import PodFactory, make_pod  # noqa: F401 (fixture)
from tests.support.builds import AgentSpec
from tests.translation.streams import chat_events
from tests.transport.raw_server import RawServer

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _streams(*, whole: bool):  # type: ignore[no-untyped-def]
    """A Chat-only server answering every request on a connection with a stream, whole (its
    ``[DONE]`` sent) or cut before it, its HTTP framing intact either way."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer):
        while await srv.read_request(reader) is not None:
            events = chat_events(["AAPL ", "is 1."], [], 40)
            body = b"".join(events if whole else events[:2])
            writer.write(SSE_HEAD + _chunk(body))
            await writer.drain()
            await asyncio.sleep(0.05)  # the body's end after the stream's: read past the end
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return script


def _chat_only(server: RawServer) -> dict[str, Provider]:
    return {
        "local": Provider(
            api="openai",
            protocols=["chat"],
            base_url=f"http://127.0.0.1:{server.port}/v1",
            key_env="OPENAI_API_KEY",
            models=["claude-*"],
        )
    }


@pytest.mark.parametrize("whole", [True, False])
async def test_a_translated_stream_is_pooled_only_when_whole(
    make_pod: PodFactory,  # noqa: F811
    whole: bool,
) -> None:
    server = await RawServer(_streams(whole=whole)).start()
    try:
        pod = await make_pod([AgentSpec("plain", mode="native")], providers=_chat_only(server))
        claude = pod.anthropic(token=pod.tokens["plain"])
        for _ in range(3):
            try:
                async with claude.messages.stream(
                    model="claude-sonnet-4-6",
                    max_tokens=9,
                    messages=[{"role": "user", "content": "hi"}],
                ) as live:
                    text = "".join([t async for t in live.text_stream])
                assert whole and text == "AAPL is 1."
            except anthropic.APIStatusError:
                assert not whole  # a cut stream ends with the caller's error
        assert server.connections == (1 if whole else 3)
    finally:
        await server.close()
