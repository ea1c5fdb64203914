"""OpenAI Responses <-> the neutral conversation.

A Responses request's ``input`` is a flat list of items. The engine thinks in turns, so the
codec groups them: every run of consecutive model-produced items (reasoning, assistant message,
calls of any kind) is one ``{"role": "assistant", "items": [...]}`` turn, every other item (a
user message, a call output) a turn of its own. Groups never leave the codec: each request
flattens them back into ``input`` with every item untouched.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Mapping
from typing import Any

from ...model.canonical import (
    canonical_arguments,
    canonical_json,
    digest,
    identifying_text,
    normalise_text,
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
from ..sse import event_frame, pieces
from ..streaming import shown_live
from .approval_items import check_answers, is_sidecar_tool
from .stream import (
    TERMINAL_EVENTS,
    ResponsesAssembler,
    ResponsesClientStream,
    goes_before_text,
    has_text,
    text_parts,
)

TEXT_PIECE = 256
SIMPLE_CHOICES = ("auto", "none", "required")
TEXT_PARTS = ("input_text", "output_text", "text")
# Input items the model did not produce: everything else in ``input`` is an echoed output.
_CLIENT_ROLES = ("user", "system", "developer")
# Calls the client executes, and the item type that answers each (Responses names them so).
_RUNNER_CALLS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}
# Reasoning is replayed but does not identify a turn: runners echo it or not, with or without
# its encrypted content. Ids and statuses are dropped or rewritten by runners too.
_VOLATILE_FIELDS = ("id", "status")


class ResponsesCodec(OpenAIShapes, Codec):
    name = "responses"
    # Only deltas: a Responses stream repeats what was written in its ``.done`` events.
    written_in_stream = re.compile(rb'"delta"\s*:\s*"((?:[^"\\]|\\.)*)"')
    call_in_stream = re.compile(rb'"response\.output_item\.added".*"type"\s*:\s*"function_call"')
    title = "Responses"
    api = "openai"
    route = "/v1/responses"
    messages_field = "input"
    upstream_path = "/responses"  # OpenAI base URLs already end in /v1
    side_routes = {"/v1/responses/input_tokens": "/responses/input_tokens"}
    resource_routes = {
        ("GET", "/v1/responses/{response_id}"): "/responses/{response_id}",
        ("DELETE", "/v1/responses/{response_id}"): "/responses/{response_id}",
        ("GET", "/v1/responses/{response_id}/input_items"): "/responses/{response_id}/input_items",
        ("POST", "/v1/responses/{response_id}/cancel"): "/responses/{response_id}/cancel",
        # The Conversations API: an agent creates its conversations through the sidecar, which
        # binds each to it (state/stored_objects.py).
        ("POST", "/v1/conversations"): "/conversations",
        **{
            (method, f"/v1{path}"): path
            for path, methods in (
                ("/conversations/{conversation_id}", ("GET", "POST", "DELETE")),
                ("/conversations/{conversation_id}/items", ("GET", "POST")),
                ("/conversations/{conversation_id}/items/{item_id}", ("GET", "DELETE")),
            )
            for method in methods
        },
    }
    stream_end = b"response.completed"
    input_key = "input_tokens"
    output_key = "output_tokens"
    client_approvals = True  # approval items (approval_items.py, SPEC §16)

    @property
    def stream_ends(self) -> tuple[bytes, ...]:
        # A failed or cut-short (max_output_tokens) response is still a complete stream.
        return tuple(event.encode() for event in TERMINAL_EVENTS)

    # --- pass-through -----------------------------------------------------------------------

    def stream_error(self, err: ApiError) -> bytes:
        # The documented stream ``error`` event; its sequence number is unknown to a relay.
        payload = {"type": "error", "code": err.code, "message": err.message, "param": None}
        return event_frame("error", payload)

    def stream_failure(self, conversation: Conversation, err: ApiError) -> bytes:
        """A lifecycle of its own: ``response.created`` then ``response.failed``."""
        response: dict[str, Any] = {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response",
            "created_at": 0,
            "status": "in_progress",
            "model": conversation.params.get("model"),
            "output": [],
            "error": None,
            "usage": None,
        }
        failed = {**response, "status": "failed"}
        failed["error"] = {"code": err.code, "message": err.message}
        lifecycle = _Lifecycle()
        return b"".join(
            lifecycle.event(name, {"response": body})
            for name, body in (("response.created", response), ("response.failed", failed))
        )

    def usage_of_event(self, event: dict[str, Any]) -> Any:
        response = event.get("response")  # the terminal events nest the usage
        return response.get("usage") if isinstance(response, dict) else event.get("usage")

    # --- stored objects ---------------------------------------------------------------------

    stores_objects = True

    def stored_ids(self, body: Any) -> list[tuple[str, str]]:
        if not isinstance(body, dict):
            return []
        if body.get("object") == "conversation" and isinstance(body.get("id"), str):
            return [("conversation", body["id"])]  # made by POST /v1/conversations
        if body.get("object") != "response":
            return []
        if body.get("store") is False and body.get("conversation") is None:
            return []  # not stored: no later request can name it (a translated answer is not)
        found = [("response", body["id"])] if isinstance(body.get("id"), str) else []
        conversation = _conversation_id(body.get("conversation"))
        return found + ([("conversation", conversation)] if conversation else [])

    def stored_references(
        self, path_params: Mapping[str, str], body: dict[str, Any]
    ) -> list[tuple[str, str]]:
        found = []
        if "response_id" in path_params:
            found.append(("response", path_params["response_id"]))
        if "conversation_id" in path_params:
            found.append(("conversation", path_params["conversation_id"]))
        previous = body.get("previous_response_id")
        if isinstance(previous, str):  # another type is the provider's to refuse
            found.append(("response", previous))
        conversation = _conversation_id(body.get("conversation"))
        if conversation:
            found.append(("conversation", conversation))
        return found

    # --- client request ---------------------------------------------------------------------

    def wants_structured_output(self, body: dict[str, Any]) -> bool:
        text = body.get("text")
        text_format = text.get("format") if isinstance(text, dict) else None
        return isinstance(text_format, dict) and text_format.get("type") in STRUCTURED_FORMATS

    def parse_request(self, body: dict[str, Any]) -> Conversation:
        params = dict(body)
        items = _input_items(params.pop("input", None))
        check_answers(items)
        tools = params.pop("tools", None) or []
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise CodecError("tools: must be an array of objects")
        tools = [t for t in tools if not is_sidecar_tool(t)]  # stands for the sidecar's own
        groups = group_items(items)
        params.pop("stream_options", None)  # upstream calls do not stream
        instructions = params.get("instructions")
        return Conversation(
            params=params,
            messages=groups,
            fingerprints=Fingerprints(groups, self.fingerprint),
            roles=[g["role"] for g in groups],
            tools=tools,
            runner_tool_names={t["name"] for t in tools if isinstance(t.get("name"), str)},
            tool_choice=_parse_choice(params.pop("tool_choice", None)),
            stream=bool(params.pop("stream", False)),
            include_usage=True,
            seed_of=functools.partial(_instructions_seed, instructions),
        )

    def fingerprint(self, group: dict[str, Any]) -> str:
        items = _identifying(group["items"])
        references = [item for item in items if item.get("type") == "item_reference"]
        if references:
            # Echoed by reference: whether reasoning items are referenced too varies, the
            # answer's message always is (last); its calls may come whole beside it (the
            # Vercel AI SDK's openai() in a tool loop, when the call turn had text).
            return _reference_fingerprint(str(references[-1].get("id")))
        return digest(group["role"], *map(_item_fingerprint, items))

    # --- upstream request -------------------------------------------------------------------

    def render_request(
        self,
        conversation: Conversation,
        messages: list[dict[str, Any]],
        tools: list[ToolSpec],
        choice: ToolChoice,
    ) -> dict[str, Any]:
        return super().render_request(conversation, _flatten(messages), tools, choice)

    def continue_request(
        self,
        conversation: Conversation,
        previous: ModelTurn,
        since: list[dict[str, Any]],
        tools: list[ToolSpec],
        choice: ToolChoice,
    ) -> dict[str, Any] | None:
        params = conversation.params
        new_items = _flatten([g for g in since if g["role"] != "assistant"])
        if params.get("conversation") is not None:
            # A server-held conversation appends every call's items itself.
            return super().render_request(conversation, new_items, tools, choice)
        if not _provider_holds_responses(params) or not previous.body.get("id"):
            return None
        body = super().render_request(conversation, new_items, tools, choice)
        body["previous_response_id"] = previous.body["id"]
        return body

    @staticmethod
    def tool_definition(spec: ToolSpec) -> dict[str, Any]:
        return {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.schema,
        }

    @staticmethod
    def render_choice(choice: ToolChoice) -> Any:
        if choice.mode is None:
            return None
        if choice.allowed is not None and choice.mode != "none":
            return _allowed_tools(choice)
        if choice.mode == "named":
            return {"type": "function", "name": choice.name}
        if choice.mode == "other":
            return choice.raw
        return choice.mode

    # --- upstream response ------------------------------------------------------------------

    def parse_response(self, body: dict[str, Any]) -> ModelTurn:
        output = body.get("output")
        if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
            raise CodecError("upstream response has no output array")
        if body.get("status") == "failed":
            raise CodecError(f"upstream response failed: {body.get('error')}")
        calls = [_call_of(item) for item in output if item.get("type") in _RUNNER_CALLS]
        usage = body.get("usage")
        return ModelTurn(calls=calls, usage=usage if isinstance(usage, dict) else {}, body=body)

    def assemble_stream(self, data: bytes) -> dict[str, Any]:
        assembler = self.stream_assembler()
        assembler.feed(data)
        return assembler.finish()

    def stream_assembler(self) -> ResponsesAssembler:
        return ResponsesAssembler()

    def round_messages(self, turn: ModelTurn, results: list[ToolResult]) -> list[dict[str, Any]]:
        # The model's output goes back untouched and in order: reasoning (with its encrypted
        # content), messages, provider-run tool calls, items of types unknown today.
        outputs = [
            {
                "type": _RUNNER_CALLS.get(_kind_of(turn.body, r.call), "function_call_output"),
                "call_id": r.call.id,
                "output": r.outcome.envelope_json(),
            }
            for r in results
        ]
        return [
            {"role": "assistant", "items": list(turn.body["output"])},
            {"role": "tool", "items": outputs},
        ]

    # --- client response --------------------------------------------------------------------

    def render_response(
        self, conversation: Conversation, turn: ModelTurn, usage: dict[str, Any]
    ) -> dict[str, Any]:
        body = super().render_response(conversation, turn, usage)
        # The object echoes the request that made it: the runner's own, not the sidecar's.
        if "tools" in body:
            body["tools"] = conversation.tools
        if "tool_choice" in body and conversation.tool_choice.mode is not None:
            body["tool_choice"] = self.render_choice(conversation.tool_choice)
        if "previous_response_id" in body:
            body["previous_response_id"] = conversation.params.get("previous_response_id")
        return body

    def render_stream(self, conversation: Conversation, body: dict[str, Any]) -> list[bytes]:
        lifecycle = _Lifecycle()
        started = {**body, "status": "in_progress", "output": [], "usage": None}
        frames = [
            lifecycle.event("response.created", {"response": started}),
            lifecycle.event("response.in_progress", {"response": started}),
        ]
        for index, item in enumerate(body.get("output") or []):
            frames.extend(lifecycle.item(index, item))
        terminal = "response.incomplete" if body.get("status") == "incomplete" else None
        frames.append(lifecycle.event(terminal or "response.completed", {"response": body}))
        return frames

    def client_stream(self, conversation: Conversation) -> ResponsesClientStream:
        def as_client_sees(response: dict[str, Any]) -> dict[str, Any]:
            return self.render_response(conversation, ModelTurn([], {}, response), {})

        return ResponsesClientStream(
            _Lifecycle(),
            lambda body: self.render_stream(conversation, body),
            as_client_sees,
            lambda err: self.stream_failure(conversation, err),
            live=not _chained_by_provider(conversation.params),
        )

    def shown_response(
        self,
        conversation: Conversation,
        earlier: list[ModelTurn],
        turn: ModelTurn,
        usage: dict[str, Any],
    ) -> dict[str, Any]:
        body = self.render_response(conversation, turn, usage)
        # Messages with text (and the reasoning before them) went out as they streamed, the
        # final call's other items at its end.
        output: list[dict[str, Any]] = []
        for shown in (*earlier, turn):
            items = shown.body["output"]
            output += [_as_shown(items[p]) for p in shown_live(items, has_text, goes_before_text)]
        final = turn.body["output"]
        live = set(shown_live(final, has_text, goes_before_text))
        output += [item for p, item in enumerate(final) if p not in live]
        return {**body, "output": output}

    def echo_fingerprint(self, conversation: Conversation, body: dict[str, Any]) -> str:
        return self.fingerprint({"role": "assistant", "items": body.get("output") or []})

    def chain_ids(self, conversation: Conversation) -> list[str]:
        params = conversation.params
        return _ids(
            params.get("previous_response_id"), _conversation_id(params.get("conversation"))
        )

    def answer_ids(self, conversation: Conversation, body: dict[str, Any]) -> list[str]:
        return _ids(body.get("id"), _conversation_id(conversation.params.get("conversation")))

    def resolve_references(
        self, echo: dict[str, Any], stored: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """A reference to the stored answer's item becomes the item (a provider of another
        protocol, or one that stored nothing, cannot resolve the ids the sidecar issued); one
        to an item of the hidden rounds, restored before the echo, goes."""
        items = echo.get("items") or []
        if not any(item.get("type") == "item_reference" for item in items):
            return echo
        answer = {item.get("id"): item for item in stored[-1].get("items") or []} if stored else {}
        hidden = {item.get("id") for group in stored[:-1] for item in group.get("items") or []}
        resolved = []
        for item in items:
            if item.get("type") == "item_reference" and item.get("id") in answer:
                resolved.append(answer[item["id"]])
            elif item.get("type") != "item_reference" or item.get("id") not in hidden:
                resolved.append(item)
        return {**echo, "items": resolved}

    def reference_fingerprint(self, body: dict[str, Any]) -> str | None:
        """The answer echoed as ``item_reference`` items (the Vercel AI SDK's default with a
        stored response): known by the id of its last message (or last item)."""
        output = [i for i in body.get("output") or [] if isinstance(i, dict) and i.get("id")]
        messages = [i for i in output if i.get("type", "message") == "message"]
        last = (messages or output or [None])[-1]
        return _reference_fingerprint(str(last["id"])) if last is not None else None


# --- request items ----------------------------------------------------------------------------


def _input_items(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise CodecError("input: must be a string or a non-empty array of items")
    if not all(isinstance(item, dict) for item in raw):
        raise CodecError("input: every item must be an object")
    return raw


def _is_model_output(item: dict[str, Any]) -> bool:
    """Items the model produced; an ``item_reference`` stands for such an item (clients refer
    to the model's stored output items by id)."""
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") not in _CLIENT_ROLES
    return not (kind.endswith("_output") or kind == "mcp_approval_response")


def _reference_fingerprint(item_id: str) -> str:
    return digest("assistant", "ref:" + item_id)


def group_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of model output as one assistant turn; every other item a turn of its own."""
    groups: list[dict[str, Any]] = []
    for item in items:
        if not _is_model_output(item):
            groups.append({"role": str(item.get("role") or item.get("type")), "items": [item]})
        elif groups and groups[-1]["role"] == "assistant":
            groups[-1]["items"].append(item)
        else:
            groups.append({"role": "assistant", "items": [item]})
    return groups


def _flatten(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for group in groups for item in group["items"]]


def _identifying(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in items if item.get("type") != "reasoning"]


def _item_fingerprint(item: dict[str, Any]) -> str:
    kind = item.get("type", "message")
    if kind == "message":
        return f"m:{item.get('role')}:" + _content_fingerprint(item.get("content"))
    if kind == "function_call":
        arguments = canonical_arguments(item.get("arguments"))
        return f"c:{item.get('call_id')}:{item.get('name')}:{arguments}"
    if kind.endswith("_output") and "call_id" in item:
        return f"r:{item.get('call_id')}:" + _content_fingerprint(item.get("output"))
    stable = {k: v for k, v in item.items() if k not in _VOLATILE_FIELDS}
    return canonical_json(stable).decode()


def _content_fingerprint(content: Any) -> str:
    """Text parts by their text alone: a string, input_text and output_text parts are one
    content however the text is split among them."""
    if isinstance(content, str):
        return identifying_text([content])
    if not isinstance(content, list):
        return canonical_json(content).decode()
    texts = [p for p in content if isinstance(p, dict) and p.get("type") in TEXT_PARTS]
    others = [canonical_json(p).decode() for p in content if p not in texts]
    return "|".join([identifying_text([str(p.get("text", "")) for p in texts]), *others])


def _conversation_id(value: Any) -> str | None:
    """A ``conversation`` field: the id, or an object holding it (``{"id": "conv_…"}``)."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


def _ids(*candidates: Any) -> list[str]:
    return [c for c in candidates if isinstance(c, str) and c]


def _chained_by_provider(params: dict[str, Any]) -> bool:
    """The client continues from the response id it gets (a stored chain, a conversation)."""
    return params.get("conversation") is not None or _provider_holds_responses(params)


def _provider_holds_responses(params: dict[str, Any]) -> bool:
    """The provider keeps this request's responses: ``store: true``, or (``store`` unset, which
    the API takes as true) a request already chained with ``previous_response_id``."""
    store = params.get("store")
    return store is True or (store is None and bool(params.get("previous_response_id")))


# --- tool choice ------------------------------------------------------------------------------


def _instructions_seed(instructions: Any) -> str:
    return normalise_text(instructions) if isinstance(instructions, str) else ""


def _parse_choice(raw: Any) -> ToolChoice:
    if raw is None:
        return ToolChoice(mode=None)
    if raw in SIMPLE_CHOICES:
        return ToolChoice(mode=raw)
    if not isinstance(raw, dict):
        return ToolChoice(mode="other", raw=raw)
    if raw.get("type") == "function":
        name = raw.get("name")
        if not isinstance(name, str):
            raise CodecError("tool_choice: type 'function' needs a 'name'")
        return ToolChoice(mode="named", name=name)
    if raw.get("type") == "allowed_tools":
        tools = raw.get("tools")
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise CodecError("tool_choice: allowed_tools needs a 'tools' array of objects")
        mode = raw.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise CodecError("tool_choice: allowed_tools mode must be 'auto' or 'required'")
        names = [t.get("name") for t in tools if t.get("type") == "function"]
        if not all(isinstance(n, str) for n in names):
            raise CodecError("tool_choice: every allowed function needs a 'name'")
        return ToolChoice(mode=mode, raw=raw, allowed=names)
    return ToolChoice(mode="other", raw=raw)


def _allowed_tools(choice: ToolChoice) -> dict[str, Any]:
    """The client's allowed_tools with each function named as presented in this request."""
    names = iter(choice.allowed or ())
    tools = [
        {**tool, "name": next(names)} if tool.get("type") == "function" else tool
        for tool in choice.raw["tools"]
    ]
    return {**choice.raw, "mode": choice.mode, "tools": tools}


# --- response items ---------------------------------------------------------------------------


def _call_of(item: dict[str, Any]) -> ToolCall:
    arguments = item.get("arguments") if item.get("type") == "function_call" else item.get("input")
    return ToolCall(
        id=str(item.get("call_id") or item.get("id") or ""),
        name=str(item.get("name", "")),
        arguments=arguments,
    )


def _as_shown(item: dict[str, Any]) -> dict[str, Any]:
    """An item as the client stream carried it: a message with its text parts only."""
    return {**item, "content": text_parts(item)} if item.get("type") == "message" else item


def _kind_of(body: dict[str, Any], call: ToolCall) -> str:
    for item in body.get("output") or ():
        if item.get("call_id") == call.id:
            return str(item.get("type"))
    return "function_call"


class _Lifecycle:
    """Numbers the events of one stream: ``sequence_number`` strictly increases."""

    def __init__(self) -> None:
        self.sequence = 0

    def event(self, kind: str, fields: dict[str, Any]) -> bytes:
        frame = event_frame(kind, {"type": kind, **fields, "sequence_number": self.sequence})
        self.sequence += 1
        return frame

    def item(self, index: int, item: dict[str, Any]) -> list[bytes]:
        """One output item: added, its deltas, done."""
        kind = item.get("type")
        where = {"item_id": item.get("id") or f"item_{index}", "output_index": index}
        frames: list[bytes] = []
        if kind == "message":
            added = {**item, "status": "in_progress", "content": []}
            frames.append(self.event("response.output_item.added", _at(index, added)))
            for position, part in enumerate(item.get("content") or []):
                frames.extend(self._part(where, position, part))
        elif kind == "function_call":
            added = {**item, "status": "in_progress", "arguments": ""}
            frames.append(self.event("response.output_item.added", _at(index, added)))
            arguments = item.get("arguments") or ""
            for piece in pieces(arguments, TEXT_PIECE):
                frames.append(
                    self.event("response.function_call_arguments.delta", {**where, "delta": piece})
                )
            done = {**where, "name": item.get("name"), "arguments": arguments}
            frames.append(self.event("response.function_call_arguments.done", done))
        elif kind == "reasoning":
            added = {**item, "summary": []}
            frames.append(self.event("response.output_item.added", _at(index, added)))
            for position, part in enumerate(item.get("summary") or []):
                frames.extend(self._summary(where, position, part))
        else:
            # Provider-run calls, items of new types: whole, untouched, in their added event.
            frames.append(self.event("response.output_item.added", _at(index, item)))
        frames.append(self.event("response.output_item.done", _at(index, item)))
        return frames

    def _part(self, where: dict[str, Any], position: int, part: dict[str, Any]) -> list[bytes]:
        at = {**where, "content_index": position}
        kind = part.get("type")
        if kind == "output_text":
            text = part.get("text", "")
            frames = [
                self.event("response.content_part.added", {**at, "part": {**part, "text": ""}})
            ]
            logprobs = {"logprobs": []}
            frames += [
                self.event("response.output_text.delta", {**at, "delta": p, **logprobs})
                for p in pieces(text, TEXT_PIECE)
            ]
            frames.append(self.event("response.output_text.done", {**at, "text": text, **logprobs}))
        elif kind == "refusal":
            refusal = part.get("refusal", "")
            empty = {**part, "refusal": ""}
            frames = [self.event("response.content_part.added", {**at, "part": empty})]
            frames.append(self.event("response.refusal.delta", {**at, "delta": refusal}))
            frames.append(self.event("response.refusal.done", {**at, "refusal": refusal}))
        else:
            frames = [self.event("response.content_part.added", {**at, "part": part})]
        frames.append(self.event("response.content_part.done", {**at, "part": part}))
        return frames

    def _summary(self, where: dict[str, Any], position: int, part: dict[str, Any]) -> list[bytes]:
        at = {**where, "summary_index": position}
        text = part.get("text", "")
        return [
            self.event(
                "response.reasoning_summary_part.added", {**at, "part": {**part, "text": ""}}
            ),
            self.event("response.reasoning_summary_text.delta", {**at, "delta": text}),
            self.event("response.reasoning_summary_text.done", {**at, "text": text}),
            self.event("response.reasoning_summary_part.done", {**at, "part": part}),
        ]


def _at(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"output_index": index, "item": item}
