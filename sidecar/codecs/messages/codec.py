"""Anthropic Messages <-> the neutral conversation."""

from __future__ import annotations

import functools
import re
from typing import Any

import orjson

from ...model.canonical import (
    canonical_arguments,
    canonical_json,
    digest,
    identifying_text,
    normalise_id,
)
from ...model.conversation import (
    CodecError,
    Conversation,
    Fingerprints,
    ModelTurn,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from ...model.errors import ApiError
from ..base import Codec
from ..sse import event_frame, pieces
from ..streaming import shown_live
from .stream import (
    MessagesAssembler,
    MessagesClientStream,
    goes_before_text,
    has_text,
)

TEXT_PIECE = 256
# Blocks that carry a JSON ``input`` streamed as input_json_delta.
INPUT_BLOCKS = ("tool_use", "server_tool_use")
# Reasoning blocks the runner may or may not echo back; they do not identify a conversation.
REASONING_BLOCKS = ("thinking", "redacted_thinking")
CHOICE_TO_WIRE = {"auto": "auto", "required": "any", "none": "none", "named": "tool"}
WIRE_TO_CHOICE = {wire: mode for mode, wire in CHOICE_TO_WIRE.items()}
# Anthropic's own error types: SDKs map only these to their exception classes.
ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
        "timeout_error",
    }
)


# The type of Claude's tool search tools (``tool_search_tool_bm25_20251119``, ...): the provider
# searches the request's ``defer_loading`` tools and loads those it finds (SPEC §23).
NATIVE_SEARCH_PREFIX = "tool_search_tool_"


class AnthropicCodec(Codec):
    name = "messages"
    written_in_stream = re.compile(
        rb'"(?:text|thinking|partial_json|name)"\s*:\s*"((?:[^"\\]|\\.)*)"'
    )
    call_in_stream = re.compile(rb'"type"\s*:\s*"tool_use"')
    title = "Messages"
    api = "anthropic"
    route = "/v1/messages"
    upstream_path = "/v1/messages"
    side_routes = {"/v1/messages/count_tokens": "/v1/messages/count_tokens"}
    forwarded_headers = ("anthropic-version", "anthropic-beta", "idempotency-key")
    default_headers = {"anthropic-version": "2023-06-01"}
    relayed_headers = frozenset({"request-id"})
    relayed_header_prefixes = ("anthropic-ratelimit-",)
    stream_end = b"message_stop"
    input_key = "input_tokens"
    output_key = "output_tokens"

    # --- pass-through -----------------------------------------------------------------------

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def error_body(self, err: ApiError) -> dict[str, Any]:
        # `code` is an addition to Anthropic's shape so callers can branch on our error codes.
        kind = err.type if err.type in ERROR_TYPES else "api_error"
        error = {"type": kind, "message": err.message, "code": err.code}
        return {"type": "error", "error": error}

    def stream_error(self, err: ApiError) -> bytes:
        return event_frame("error", self.error_body(err))

    def usage_of_event(self, event: dict[str, Any]) -> Any:
        message = event.get("message")  # message_start nests the usage
        return message.get("usage") if isinstance(message, dict) else event.get("usage")

    def models_list(self, models: list[tuple[str, str]]) -> dict[str, Any]:
        data = [self.model_entry(provider, model) for provider, model in models]
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        return {"data": data, "has_more": False, "first_id": first, "last_id": last}

    def model_entry(self, provider: str, model: str) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model,
            "display_name": f"{model} via {provider}",
            "created_at": "1970-01-01T00:00:00Z",
        }

    # --- client request ---------------------------------------------------------------------

    def wants_structured_output(self, body: dict[str, Any]) -> bool:
        # ``output_format`` (the structured-outputs beta) or its successor ``output_config``.
        config = body.get("output_config")
        return isinstance(body.get("output_format"), dict) or (
            isinstance(config, dict) and isinstance(config.get("format"), dict)
        )

    def parse_request(self, body: dict[str, Any]) -> Conversation:
        if body.get("thread") is not None:
            # Each hidden call would extend (or start) the server-held thread on its own.
            raise CodecError(
                "thread: a server-held thread cannot carry this agent's hidden tool rounds; "
                "disable it (send the whole conversation in messages) for a mediated agent"
            )
        params = dict(body)
        messages = self.pop_messages(params)
        tools = params.pop("tools", None) or []
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise CodecError("tools: must be an array of objects")
        return Conversation(
            params=params,
            messages=messages,
            fingerprints=Fingerprints(messages, self.fingerprint),
            roles=[m["role"] for m in messages],
            tools=tools,
            runner_tool_names={t["name"] for t in tools if isinstance(t.get("name"), str)},
            tool_choice=_parse_choice(params.pop("tool_choice", None)),
            stream=bool(params.pop("stream", False)),
            include_usage=True,
            seed_of=functools.partial(_content_fingerprint, params.get("system")),
        )

    def fingerprint(self, message: dict[str, Any]) -> str:
        return digest(message.get("role", ""), _content_fingerprint(message.get("content")))

    # --- upstream request -------------------------------------------------------------------

    @staticmethod
    def tool_definition(spec: ToolSpec) -> dict[str, Any]:
        definition = {
            "name": spec.name,
            "description": spec.description,
            "input_schema": spec.schema,
        }
        if spec.deferred:
            definition["defer_loading"] = True
        return definition

    def searches_natively(self, conversation: Conversation) -> bool:
        """The runner offers Claude's tool search tool (``tool_search_tool_regex_20251119`` or
        ``tool_search_tool_bm25_20251119``), under the beta header it sent with it."""
        return any(
            str(tool.get("type", "")).startswith(NATIVE_SEARCH_PREFIX)
            for tool in conversation.tools
        )

    @staticmethod
    def render_choice(choice: ToolChoice) -> Any:
        if choice.mode is None:
            return None
        if choice.mode == "other":
            return choice.raw
        rendered: dict[str, Any] = {"type": CHOICE_TO_WIRE[choice.mode]}
        if choice.mode == "named":
            rendered["name"] = choice.name
        if choice.mode != "none":
            rendered.update(choice.extra)
        return rendered

    # --- upstream response ------------------------------------------------------------------

    def parse_response(self, body: dict[str, Any]) -> ModelTurn:
        content = body.get("content")
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise CodecError("upstream response has no content array")
        calls = [
            ToolCall(id=str(b.get("id", "")), name=str(b.get("name", "")), arguments=b.get("input"))
            for b in content
            if b.get("type") == "tool_use"
        ]
        usage = body.get("usage")
        return ModelTurn(calls=calls, usage=usage if isinstance(usage, dict) else {}, body=body)

    def assemble_stream(self, data: bytes) -> dict[str, Any]:
        assembler = self.stream_assembler()
        assembler.feed(data)
        return assembler.finish()

    def stream_assembler(self) -> MessagesAssembler:
        return MessagesAssembler()

    def round_messages(self, turn: ModelTurn, results: list[ToolResult]) -> list[dict[str, Any]]:
        # The assistant turn goes back untouched: thinking signatures and server blocks included.
        return [
            {"role": "assistant", "content": turn.body["content"]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": r.call.id,
                        "content": r.outcome.envelope_json(),
                        "is_error": not r.outcome.ok,
                    }
                    for r in results
                ],
            },
        ]

    # --- client response --------------------------------------------------------------------

    def render_stream(self, conversation: Conversation, body: dict[str, Any]) -> list[bytes]:
        usage = body.get("usage") or {}
        start = {k: v for k, v in body.items() if k not in ("content", "stop_reason", "usage")}
        start.update(content=[], stop_reason=None, stop_sequence=None, usage=usage)
        frames = [event_frame("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(body.get("content") or []):
            frames.extend(_block_events(index, block))
        frames.append(
            event_frame(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": body.get("stop_reason"),
                        "stop_sequence": body.get("stop_sequence"),
                    },
                    "usage": usage,
                },
            )
        )
        frames.append(event_frame("message_stop", {"type": "message_stop"}))
        return frames

    def client_stream(self, conversation: Conversation) -> MessagesClientStream:
        return MessagesClientStream(
            lambda body: self.render_stream(conversation, body), _block_events, self.stream_error
        )

    def shown_response(
        self,
        conversation: Conversation,
        earlier: list[ModelTurn],
        turn: ModelTurn,
        usage: dict[str, Any],
    ) -> dict[str, Any]:
        body = self.render_response(conversation, turn, usage)
        # Text blocks (and the reasoning before them) went out as they streamed, the final
        # turn's other blocks at its end.
        content: list[dict[str, Any]] = []
        for shown in (*earlier, turn):
            blocks = shown.body["content"]
            content += [
                _as_shown(blocks[p]) for p in shown_live(blocks, has_text, goes_before_text)
            ]
        final = turn.body["content"]
        live = set(shown_live(final, has_text, goes_before_text))
        content += [b for p, b in enumerate(final) if p not in live and b.get("type") != "text"]
        return {**body, "content": content}

    def echo_fingerprint(self, conversation: Conversation, body: dict[str, Any]) -> str:
        return self.fingerprint({"role": "assistant", "content": body.get("content")})


def _parse_choice(raw: Any) -> ToolChoice:
    if raw is None:
        return ToolChoice(mode=None)
    if not isinstance(raw, dict) or raw.get("type") not in WIRE_TO_CHOICE:
        return ToolChoice(mode="other", raw=raw)
    extra = {k: v for k, v in raw.items() if k not in ("type", "name")}
    mode = WIRE_TO_CHOICE[raw["type"]]
    name = raw.get("name") if mode == "named" else None
    if mode == "named" and not isinstance(name, str):
        raise CodecError("tool_choice: type 'tool' needs a 'name'")
    return ToolChoice(mode=mode, name=name, extra=extra)


def _content_fingerprint(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        # The same as text blocks: runners echo answers either way.
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return canonical_json(content).decode()
    blocks = [b for b in content if _identifies(b)]
    texts = [b for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    text = identifying_text([str(b.get("text", "")) for b in texts])
    others = [_block_fingerprint(b) for b in blocks if b not in texts]
    return "|".join([f"t:{text}"] * bool(text) + others)


def _as_shown(block: dict[str, Any]) -> dict[str, Any]:
    """A block as the client stream carried it: text without its citations."""
    return {"type": "text", "text": block["text"]} if block.get("type") == "text" else block


def _identifies(block: Any) -> bool:
    return not (isinstance(block, dict) and block.get("type") in REASONING_BLOCKS)


def _block_fingerprint(block: Any) -> str:
    if not isinstance(block, dict):
        return canonical_json(block).decode()
    kind = block.get("type")
    if kind == "tool_use":
        call_id = normalise_id(block.get("id"))
        return f"u:{call_id}:{block.get('name')}:" + canonical_arguments(block.get("input"))
    if kind == "tool_result":
        content = _content_fingerprint(block.get("content"))
        return f"r:{normalise_id(block.get('tool_use_id'))}:{bool(block.get('is_error'))}:{content}"
    return canonical_json({k: v for k, v in block.items() if k != "cache_control"}).decode()


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start = {k: v for k, v in block.items() if k != "citations"} | {"text": ""}
        deltas = [
            {"type": "text_delta", "text": p} for p in pieces(block.get("text", ""), TEXT_PIECE)
        ]
        deltas += [{"type": "citations_delta", "citation": c} for c in block.get("citations") or []]
    elif kind in INPUT_BLOCKS:
        start = {**block, "input": {}}
        arguments = orjson.dumps(block.get("input") or {}).decode()
        deltas = [
            {"type": "input_json_delta", "partial_json": p} for p in pieces(arguments, TEXT_PIECE)
        ]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        text = block.get("thinking", "")
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(text, TEXT_PIECE)]
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        # Unknown and opaque blocks (redacted thinking, server tool results, new types) go out
        # whole in their start event, untouched.
        start = block
    frames = [
        event_frame(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    ]
    frames += [
        event_frame(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}
        )
        for d in deltas
    ]
    frames.append(event_frame("content_block_stop", {"type": "content_block_stop", "index": index}))
    return frames
