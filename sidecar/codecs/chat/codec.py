"""OpenAI Chat Completions <-> the neutral conversation."""

from __future__ import annotations

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
from ..openai_shapes import STRUCTURED_FORMATS, OpenAIShapes
from ..sse import DONE, data_frame, pieces
from .stream import (
    ChatAssembler,
    ChatClientStream,
    UsageChunkStripper,
)

TEXT_PIECE = 256
SIMPLE_CHOICES = ("auto", "none", "required")


class OpenAICodec(OpenAIShapes, Codec):
    name = "chat"
    written_in_stream = re.compile(
        rb'"(?:content|reasoning_content|refusal|name|arguments)"\s*:\s*"((?:[^"\\]|\\.)*)"'
    )
    call_in_stream = re.compile(rb'"function"\s*:\s*\{\s*"name"')
    title = "Chat Completions"
    api = "openai"
    route = "/v1/chat/completions"
    upstream_path = "/chat/completions"  # OpenAI base URLs already end in /v1
    stream_end = b"[DONE]"
    input_key = "prompt_tokens"
    output_key = "completion_tokens"

    # --- pass-through -----------------------------------------------------------------------

    def stream_error(self, err: ApiError) -> bytes:
        return data_frame(self.error_body(err))

    def asking_stream_usage(self, body: dict[str, Any]) -> dict[str, Any] | None:
        # A Chat Completions stream reports usage only with stream_options.include_usage.
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return None
        extended = options if isinstance(options, dict) else {}
        return {**body, "stream_options": {**extended, "include_usage": True}}

    def usage_stripper(self) -> UsageChunkStripper:
        return UsageChunkStripper()

    # --- client request ---------------------------------------------------------------------

    def data_only(self, body: dict[str, Any]) -> bool:
        return not body.get("functions") and super().data_only(body)

    def wants_structured_output(self, body: dict[str, Any]) -> bool:
        response_format = body.get("response_format")
        return isinstance(response_format, dict) and (
            response_format.get("type") in STRUCTURED_FORMATS
        )

    def parse_request(self, body: dict[str, Any]) -> Conversation:
        params = dict(body)
        messages = self.pop_messages(params)
        tools = params.pop("tools", None) or []
        functions = params.pop("functions", None)
        function_call = params.pop("function_call", None)
        legacy = functions is not None or function_call is not None
        if not isinstance(tools, list) or not isinstance(functions or [], list):
            raise CodecError("'tools' and 'functions' must be arrays")
        tools = [*tools, *({"type": "function", "function": f} for f in functions or [])]
        raw_choice = params.pop("tool_choice", None)
        if raw_choice is None and function_call is not None:
            raw_choice = _choice_from_function_call(function_call)
        messages = convert_legacy_messages(messages)
        stream_options = params.pop("stream_options", None)
        return Conversation(
            params=params,
            messages=messages,
            fingerprints=Fingerprints(messages, self.fingerprint),
            roles=[m["role"] for m in messages],
            tools=tools,
            runner_tool_names={n for n in map(_tool_name, tools) if n},
            tool_choice=_parse_choice(raw_choice),
            stream=bool(params.pop("stream", False)),
            include_usage=bool(
                isinstance(stream_options, dict) and stream_options.get("include_usage")
            ),
            legacy_functions=legacy,
        )

    def fingerprint(self, message: dict[str, Any]) -> str:
        parts = [message.get("role", ""), _content_fingerprint(message.get("content"))]
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(
                f"call:{normalise_id(call.get('id'))}:{function.get('name')}:"
                + canonical_arguments(function.get("arguments"))
            )
        if message.get("tool_call_id"):
            parts.append(f"result:{normalise_id(message['tool_call_id'])}")
        if message.get("name"):
            parts.append(f"name:{message['name']}")
        return digest(*parts)

    # --- upstream request -------------------------------------------------------------------

    @staticmethod
    def tool_definition(spec: ToolSpec) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.schema,
            },
        }

    @staticmethod
    def render_choice(choice: ToolChoice) -> Any:
        if choice.mode is None:
            return None
        if choice.mode == "named":
            return {"type": "function", "function": {"name": choice.name}}
        if choice.mode == "other":
            return choice.raw
        return choice.mode

    # --- upstream response ------------------------------------------------------------------

    def parse_response(self, body: dict[str, Any]) -> ModelTurn:
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise CodecError("upstream response has no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise CodecError("upstream response choice has no message")
        calls = [_call_from_wire(c) for c in message.get("tool_calls") or []]
        legacy = message.get("function_call")
        # Local servers (llama-cpp-python) mirror the first tool call there: not a second call.
        if not calls and isinstance(legacy, dict):
            calls.append(ToolCall("call_legacy_0", legacy.get("name", ""), legacy.get("arguments")))
        usage = body.get("usage")
        return ModelTurn(calls=calls, usage=usage if isinstance(usage, dict) else {}, body=body)

    def assemble_stream(self, data: bytes) -> dict[str, Any]:
        assembler = self.stream_assembler()
        assembler.feed(data)
        return assembler.finish()

    def stream_assembler(self) -> ChatAssembler:
        return ChatAssembler()

    def streaming_request(self, body: dict[str, Any]) -> dict[str, Any]:
        # Usage arrives in a last chunk only when asked for.
        return {**body, "stream": True, "stream_options": {"include_usage": True}}

    def round_messages(self, turn: ModelTurn, results: list[ToolResult]) -> list[dict[str, Any]]:
        message = turn.body["choices"][0]["message"]
        assistant = {
            "role": "assistant",
            # Some local servers answer 500 to a null content.
            "content": message.get("content") or "",
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments_text(call.arguments)},
                }
                for call in turn.calls
            ],
        }
        return [
            assistant,
            *(
                {"role": "tool", "tool_call_id": r.call.id, "content": r.outcome.envelope_json()}
                for r in results
            ),
        ]

    # --- client response --------------------------------------------------------------------

    def render_response(
        self, conversation: Conversation, turn: ModelTurn, usage: dict[str, Any]
    ) -> dict[str, Any]:
        body = super().render_response(conversation, turn, usage)
        if conversation.legacy_functions:
            body["choices"] = [_legacy_choice(c) for c in body.get("choices") or []]
        return body

    def render_stream(self, conversation: Conversation, body: dict[str, Any]) -> list[bytes]:
        base = {
            "id": body.get("id"),
            "object": "chat.completion.chunk",
            "created": body.get("created"),
            "model": body.get("model"),
        }
        for optional in ("system_fingerprint", "service_tier"):
            if body.get(optional) is not None:
                base[optional] = body[optional]
        frames: list[bytes] = []
        for choice in body.get("choices") or []:
            index = choice.get("index", 0)

            def chunk(delta: dict[str, Any], finish: str | None = None, index: int = index) -> None:
                frames.append(
                    data_frame(
                        {
                            **base,
                            "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
                        }
                    )
                )

            message = choice.get("message") or {}
            chunk({"role": "assistant", "content": ""})
            if message.get("content"):
                for piece in pieces(message["content"], TEXT_PIECE):
                    chunk({"content": piece})
            if message.get("refusal"):
                chunk({"refusal": message["refusal"]})
            function_call = message.get("function_call")
            if isinstance(function_call, dict):
                chunk({"function_call": {"name": function_call.get("name"), "arguments": ""}})
                for piece in pieces(function_call.get("arguments") or "", TEXT_PIECE):
                    chunk({"function_call": {"arguments": piece}})
            for position, call in enumerate(message.get("tool_calls") or []):
                function = call.get("function") or {}
                first = {"name": function.get("name"), "arguments": ""}
                chunk({"tool_calls": [_fragment(position, first, call.get("id"))]})
                arguments = function.get("arguments") or ""
                if arguments:
                    for piece in pieces(arguments, TEXT_PIECE):
                        chunk({"tool_calls": [_fragment(position, {"arguments": piece})]})
            chunk({}, choice.get("finish_reason") or "stop")
        if conversation.include_usage and body.get("usage"):
            frames.append(data_frame({**base, "choices": [], "usage": body["usage"]}))
        frames.append(DONE)
        return frames

    def client_stream(self, conversation: Conversation) -> ChatClientStream:
        return ChatClientStream(
            lambda body: self.render_stream(conversation, body), self.stream_error
        )

    def shown_response(
        self,
        conversation: Conversation,
        earlier: list[ModelTurn],
        turn: ModelTurn,
        usage: dict[str, Any],
    ) -> dict[str, Any]:
        body = self.render_response(conversation, turn, usage)
        shown = "".join(_answer_text(t.body) for t in earlier)
        if not shown:
            return body
        choices = list(body["choices"])
        message = choices[0].get("message") or {}
        choices[0] = {**choices[0], "message": {**message, "content": shown + _answer_text(body)}}
        return {**body, "choices": choices}

    def answer_message(self, turn: ModelTurn) -> dict[str, Any]:
        message = self.round_messages(turn, [])[0]
        if not message["tool_calls"]:
            del message["tool_calls"]  # the API refuses an empty list
        return message

    def echo_fingerprint(self, conversation: Conversation, body: dict[str, Any]) -> str:
        message = body["choices"][0].get("message") or {}
        echo = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        if message.get("function_call"):
            echo["function_call"] = message["function_call"]
        echo.setdefault("role", "assistant")
        converted = convert_legacy_messages([echo], start=len(conversation.messages))
        return self.fingerprint(converted[0])


def convert_legacy_messages(
    messages: list[dict[str, Any]], *, start: int = 0
) -> list[dict[str, Any]]:
    """Legacy assistant ``function_call`` / ``role: function`` turns as tool calls / results.

    Call ids are a deterministic function of the message position, so the same history always
    converts (and fingerprints) the same way.
    """
    if not any(m.get("function_call") or m.get("role") == "function" for m in messages):
        return messages
    converted: list[dict[str, Any]] = []
    last_call_id: str | None = None
    for position, message in enumerate(messages, start):
        function_call = message.get("function_call")
        if message.get("role") == "assistant" and isinstance(function_call, dict):
            last_call_id = f"call_legacy_{position}"
            turn = {k: v for k, v in message.items() if k != "function_call"}
            turn["tool_calls"] = [
                {
                    "id": last_call_id,
                    "type": "function",
                    "function": {
                        "name": function_call.get("name", ""),
                        "arguments": function_call.get("arguments") or "",
                    },
                }
            ]
            converted.append(turn)
        elif message.get("role") == "function":
            converted.append(
                {
                    "role": "tool",
                    "tool_call_id": last_call_id or f"call_legacy_{position}",
                    "content": message.get("content") or "",
                }
            )
        else:
            converted.append(message)
    return converted


def _choice_from_function_call(function_call: Any) -> Any:
    if isinstance(function_call, dict) and "name" in function_call:
        return {"type": "function", "function": {"name": function_call["name"]}}
    return function_call


def _parse_choice(raw: Any) -> ToolChoice:
    if raw is None:
        return ToolChoice(mode=None)
    if raw in SIMPLE_CHOICES:
        return ToolChoice(mode=raw)
    if isinstance(raw, dict) and raw.get("type") == "function":
        name = (raw.get("function") or {}).get("name")
        if isinstance(name, str):
            return ToolChoice(mode="named", name=name)
    return ToolChoice(mode="other", raw=raw)


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        raise CodecError("every tool must be an object")
    kind = tool.get("type", "function")
    spec = tool.get(kind) if isinstance(tool.get(kind), dict) else tool.get("function")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else None


def _content_fingerprint(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return identifying_text([content])
    if isinstance(content, list):
        # A string and the same text as a list of parts are one turn (runners re-serialise).
        texts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
        others = [canonical_json(p).decode() for p in content if p not in texts]
        return "|".join([identifying_text([str(p.get("text", "")) for p in texts]), *others])
    return canonical_json(content).decode()


def _call_from_wire(call: Any) -> ToolCall:
    if not isinstance(call, dict):
        raise CodecError("upstream tool call is not an object")
    kind = call.get("type", "function")
    spec = call.get(kind) if isinstance(call.get(kind), dict) else {}
    arguments = spec.get("arguments", spec.get("input"))
    return ToolCall(id=str(call.get("id", "")), name=str(spec.get("name", "")), arguments=arguments)


def _arguments_text(arguments: str | dict[str, Any] | None) -> str:
    if isinstance(arguments, str):
        return arguments
    return orjson.dumps(arguments or {}).decode()


def _answer_text(body: dict[str, Any]) -> str:
    choices = body.get("choices") or [{}]
    return (choices[0].get("message") or {}).get("content") or ""


def _legacy_choice(choice: dict[str, Any]) -> dict[str, Any]:
    message = dict(choice.get("message") or {})
    calls = message.pop("tool_calls", None)
    if not calls:
        return choice
    function = calls[0].get("function") or {}
    message["function_call"] = {
        "name": function.get("name"),
        "arguments": function.get("arguments", ""),
    }
    finish = choice.get("finish_reason")
    return {
        **choice,
        "message": message,
        "finish_reason": "function_call" if finish in ("tool_calls", None) else finish,
    }


def _fragment(position: int, function: dict[str, Any], call_id: str | None = None) -> dict:
    fragment: dict[str, Any] = {"index": position}
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    fragment["function"] = function
    return fragment
