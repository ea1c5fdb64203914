"""Run a codec's client stream over whole turns, as the driver does over streamed ones."""

from __future__ import annotations

from typing import Any

from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.model.conversation import Conversation


def client_bytes(
    codec: Codec, conversation: Conversation, turns: list[dict[str, Any]], answer: dict[str, Any]
) -> bytes:
    """What a streaming client receives when the upstream answers ``turns`` (bodies, each
    streamed as the codec renders it) and the engine's shown response is ``answer``."""
    live = codec.client_stream(conversation)
    sent = b""
    for turn in turns:
        assembler = codec.stream_assembler()
        for frame in codec.render_stream(conversation, turn):
            deltas = assembler.feed(frame)
            if deltas:
                sent += live.text(assembler.head, deltas)
        sent += live.end_turn(assembler.finish())
    return sent + live.finish(answer)
