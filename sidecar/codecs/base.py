"""What the mediation engine needs from a provider codec."""

from __future__ import annotations

from typing import Any, Protocol

from sidecar.codecs.anthropic import AnthropicCodec
from sidecar.codecs.openai import OpenAICodec
from sidecar.mediation.conversation import (
    Conversation,
    ModelTurn,
    ToolChoice,
    ToolResult,
    ToolSpec,
)


class Codec(Protocol):
    api: str
    input_key: str
    output_key: str

    def parse_request(self, body: dict[str, Any]) -> Conversation: ...

    def render_request(
        self,
        conversation: Conversation,
        messages: list[dict[str, Any]],
        tools: list[ToolSpec],
        choice: ToolChoice,
    ) -> dict[str, Any]: ...

    def parse_response(self, body: dict[str, Any]) -> ModelTurn: ...

    def assemble_stream(self, data: bytes) -> dict[str, Any]:
        """A streamed response (SSE bytes) folded into the equivalent non-streaming body."""
        ...

    def round_messages(self, turn: ModelTurn, results: list[ToolResult]) -> list[dict[str, Any]]:
        """The assistant turn and its tool results, as messages to append to the request."""
        ...

    def render_response(
        self, conversation: Conversation, turn: ModelTurn, usage: dict[str, Any]
    ) -> dict[str, Any]: ...

    def render_stream(self, conversation: Conversation, body: dict[str, Any]) -> list[bytes]:
        """The client body (from render_response) as one well-formed SSE lifecycle."""
        ...

    def echo_fingerprint(self, conversation: Conversation, body: dict[str, Any]) -> str:
        """Fingerprint of the final answer as the runner will send it back next time."""
        ...


def codec_for(api: str) -> Codec:
    """The codec of an API; codecs hold no state, so one instance serves every request."""
    return _CODECS[api]


_CODECS: dict[str, Codec] = {"openai": OpenAICodec(), "anthropic": AnthropicCodec()}
