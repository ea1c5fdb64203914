"""What the mediation engine needs from a provider codec, and what both codecs do alike."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from clawpod.sidecar.mediation.conversation import (
    CodecError,
    Conversation,
    ModelTurn,
    ToolChoice,
    ToolResult,
    ToolSpec,
)


class Codec(ABC):
    api: str
    input_key: str
    output_key: str

    @abstractmethod
    def parse_request(self, body: dict[str, Any]) -> Conversation: ...

    @staticmethod
    def pop_messages(params: dict[str, Any]) -> list[dict[str, Any]]:
        """Take the request's messages out of ``params``; both APIs need a non-empty array of
        objects that each have a role."""
        messages = params.pop("messages", None)
        if not isinstance(messages, list) or not messages:
            raise CodecError("messages: must be a non-empty array")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise CodecError("messages: every message must be an object with a 'role'")
        return messages

    def render_request(
        self,
        conversation: Conversation,
        messages: list[dict[str, Any]],
        tools: list[ToolSpec],
        choice: ToolChoice,
    ) -> dict[str, Any]:
        body = dict(conversation.params)
        body["messages"] = messages
        body["tools"] = [*conversation.tools, *map(self.tool_definition, tools)]
        rendered_choice = self.render_choice(choice)
        if rendered_choice is not None:
            body["tool_choice"] = rendered_choice
        body["stream"] = False
        return body

    @staticmethod
    @abstractmethod
    def tool_definition(spec: ToolSpec) -> dict[str, Any]:
        """A managed tool in the provider's tool shape."""

    @staticmethod
    @abstractmethod
    def render_choice(choice: ToolChoice) -> Any:
        """The wire form of a tool choice, or None to leave ``tool_choice`` out."""

    @abstractmethod
    def parse_response(self, body: dict[str, Any]) -> ModelTurn: ...

    @abstractmethod
    def assemble_stream(self, data: bytes) -> dict[str, Any]:
        """A streamed response (SSE bytes) folded into the equivalent non-streaming body."""

    @abstractmethod
    def round_messages(self, turn: ModelTurn, results: list[ToolResult]) -> list[dict[str, Any]]:
        """The assistant turn and its tool results, as messages to append to the request."""

    def render_response(
        self, conversation: Conversation, turn: ModelTurn, usage: dict[str, Any]
    ) -> dict[str, Any]:
        body = dict(turn.body)
        if usage:
            body["usage"] = usage
        return body

    @abstractmethod
    def render_stream(self, conversation: Conversation, body: dict[str, Any]) -> list[bytes]:
        """The client body (from render_response) as one well-formed SSE lifecycle."""

    @abstractmethod
    def echo_fingerprint(self, conversation: Conversation, body: dict[str, Any]) -> str:
        """Fingerprint of the final answer as the runner will send it back next time."""
