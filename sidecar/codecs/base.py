"""A codec owns one wire protocol, in two parts, each user depending only on the one it uses:

- :class:`WireCodec`, what the server needs to pass the protocol through: its routes and
  upstream paths, the provider's auth and default headers, the client and response headers to
  carry, its error shapes (whole and in-stream), usage in bodies and streams, its stream end,
  the objects the provider stores, and the model list;
- :class:`Codec`, built on it, what the mediation engine and its driver add: request, response
  and stream parse and render, tool definitions and choices, continuation, the fingerprints
  and ids that continuity keys on, and the bound on a request's items (translation's too).

They share this module: every request uses the first part and a mediated one both, so a
request's trip through the sidecar enters one codec base module, not two.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Protocol

import orjson

from ..model.conversation import (
    CodecError,
    Conversation,
    ModelTurn,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from ..model.errors import ApiError
from .streaming import ClientStream, EndMarkerWatch, TurnAssembler

ProviderApi = Literal["openai", "anthropic"]


class StreamFilter(Protocol):
    """Rewrites a passing stream: each chunk as it comes, then what it still holds."""

    def feed(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


class WireCodec(ABC):
    name: ClassVar[str]
    """The protocol's short name."""
    title: ClassVar[str]
    """The protocol's name in messages to people."""
    api: ClassVar[ProviderApi]
    """Which providers speak it (a provider's ``api`` in sidecar.json)."""
    route: ClassVar[str]
    """The client route that the sidecar mediates."""
    upstream_path: ClassVar[str]
    """Where ``route`` goes under the provider's base URL."""
    side_routes: ClassVar[dict[str, str]] = {}
    """Further client routes of the protocol (always passed through) -> upstream path."""
    resource_routes: ClassVar[dict[tuple[str, str], str]] = {}
    """(method, client route with ``{parameters}``) -> upstream path with the same parameters:
    provider-held objects (a stored response), passed through to the API's first provider
    unless the body names a model."""
    forwarded_headers: ClassVar[tuple[str, ...]]
    """Client headers with API meaning that go upstream; never authentication."""
    default_headers: ClassVar[dict[str, str]] = {}
    """Headers every upstream request carries unless the client sent its own (a version)."""
    relayed_headers: ClassVar[frozenset[str]] = frozenset()
    """Provider response headers (lower case) worth handing back: request ids, API versions."""
    relayed_header_prefixes: ClassVar[tuple[str, ...]] = ()
    """Prefixes of further such headers (rate limits)."""
    stream_end: ClassVar[bytes]
    """What a complete stream carries last; its absence means the stream was cut."""
    input_key: ClassVar[str]
    output_key: ClassVar[str]
    written_in_stream: ClassVar[re.Pattern[bytes]]
    """A JSON string a stream event carries that the model wrote (text, thinking, a tool's
    name or arguments): what an answer is estimated by when its provider counts none."""
    call_in_stream: ClassVar[re.Pattern[bytes]]
    """The start of a tool call in a stream's events."""

    @property
    def stream_ends(self) -> tuple[bytes, ...]:
        """Every marker a complete stream may end with (a protocol may end in several ways)."""
        return (self.stream_end,)

    def end_watch(self) -> EndMarkerWatch:
        """A watch for this protocol's stream end, fed the stream as it passes."""
        return EndMarkerWatch(self.stream_ends)

    @abstractmethod
    def auth_headers(self, key: str) -> dict[str, str]:
        """The provider key attached the way the provider's API expects it."""

    @abstractmethod
    def error_body(self, err: ApiError) -> dict[str, Any]:
        """An error in the protocol's JSON shape."""

    def error_json(self, err: ApiError) -> bytes:
        return orjson.dumps(self.error_body(err))

    @abstractmethod
    def stream_error(self, err: ApiError) -> bytes:
        """The in-band SSE event that ends a stream whose response head is already sent."""

    def usage_counts(self, usage: Any) -> tuple[int, int]:
        """(input, output) tokens of a usage object; zeros when absent."""
        if not isinstance(usage, dict):
            return 0, 0
        return as_int(usage.get(self.input_key)), as_int(usage.get(self.output_key))

    def cache_counts(self, usage: Any) -> tuple[int, int]:
        """(cache read, cache creation) input tokens of a usage object: Anthropic's two fields,
        or OpenAI's ``cached_tokens`` in the prompt/input token details."""
        if not isinstance(usage, dict):
            return 0, 0
        read = as_int(usage.get("cache_read_input_tokens"))
        for details_key in ("prompt_tokens_details", "input_tokens_details"):
            details = usage.get(details_key)
            if isinstance(details, dict):
                read += as_int(details.get("cached_tokens"))
        return read, as_int(usage.get("cache_creation_input_tokens"))

    def usage_of_body(self, body: Any) -> tuple[int, int]:
        """(input, output) tokens of a non-streaming response body."""
        return self.usage_counts(body.get("usage") if isinstance(body, dict) else None)

    def usage_of_event(self, event: dict[str, Any]) -> Any:
        """The usage object a stream event carries, if any."""
        return event.get("usage")

    stores_objects: ClassVar[bool] = False
    """Whether the provider keeps objects (responses) that later requests name by id."""

    def stored_ids(self, body: Any) -> list[tuple[str, str]]:
        """(kind, id) of every object the provider stored for this answer and may be asked
        about later; none for protocols without stored objects."""
        return []

    def stored_references(
        self, path_params: Mapping[str, str], body: dict[str, Any]
    ) -> list[tuple[str, str]]:
        """(kind, id) of every stored object a request reads, continues, cancels or deletes."""
        return []

    def asking_stream_usage(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """A streamed request to pass through, rewritten to ask the provider for the usage
        that charges budgets (#32), where the protocol reports it only when asked and the
        client did not ask; None where it goes as it is. The client's stream then passes
        through :meth:`usage_stripper`."""
        return None

    def usage_stripper(self) -> StreamFilter:
        """Takes the usage the client did not ask for out of its stream (see above)."""
        raise NotImplementedError(f"{self.title} streams are never asked for their usage")

    @abstractmethod
    def models_list(self, models: list[tuple[str, str]]) -> dict[str, Any]:
        """(provider name, model id) pairs in the protocol's model-list shape."""

    @abstractmethod
    def model_entry(self, provider: str, model: str) -> dict[str, Any]:
        """One model in the protocol's shape (an entry of the list, ``GET /v1/models/{id}``)."""


def as_int(value: Any) -> int:
    """A count from a provider's JSON: an integer, anything else (booleans too) 0."""
    # ``type`` is: JSON gives no int subclass but bool, and it is one check, not two.
    return value if type(value) is int else 0


# A title, a summary or a compaction of the conversation itself, in either order ("a thread
# title", "summarize this conversation", "compact the session").
_META = r"(?:title|summary|summari[sz]e|compact(?:ion)?)"
_SUBJECT = r"(?:conversation|thread|session|chat|discussion)"
AUXILIARY = re.compile(
    rf"\b{_META}\b[^.\n]{{0,80}}\b{_SUBJECT}\b|\b{_SUBJECT}\b[^.\n]{{0,80}}\b{_META}\b",
    re.IGNORECASE,
)
SYSTEM = ("system", "developer")
MAX_PROVIDER_MESSAGE = 500
MAX_INPUT_ITEMS = 10_000
"""Messages (Responses: input items) of one request the sidecar reads item by item, on the event
loop: a mediated one (each item's continuity fingerprint and keys, its journal identity) or a
translated one (each item carried into its provider's protocol). Past this, a request is refused
before any of that work is done. A runner compacts long before: 10,000 items are 5,000 tool
calls of one conversation."""


class Codec(WireCodec):
    messages_field: ClassVar[str] = "messages"
    """The request field that carries the conversation."""
    client_approvals: ClassVar[bool] = False
    """The protocol carries approval requests and answers, so the client can approve a call
    itself (SPEC §16)."""

    def too_many_items(self, body: dict[str, Any]) -> ApiError | None:
        """The refusal (413 ``request_too_complex``) of a request with more than
        ``MAX_INPUT_ITEMS`` items to mediate or translate, or None: the one check both ask
        before any per-item work."""
        items = body.get(self.messages_field)
        if not isinstance(items, list) or len(items) <= MAX_INPUT_ITEMS:
            return None
        return ApiError(
            413,
            "request_too_complex",
            f"the request holds {len(items)} items in {self.messages_field}; a request the "
            f"sidecar mediates or translates may hold at most {MAX_INPUT_ITEMS}: compact the "
            "conversation (summarise its earlier turns) and send it again",
        )

    def stream_failure(self, conversation: Conversation, err: ApiError) -> bytes:
        """How a mediated stream that sent nothing but its head yet ends in failure."""
        return self.stream_error(err)

    def provider_error_message(self, body: bytes) -> str:
        """The provider's own message in an error body (both families nest it under
        ``error.message``), else the start of the body."""
        try:
            error = orjson.loads(body).get("error")
            message = error.get("message") if isinstance(error, dict) else None
        except (ValueError, AttributeError):
            message = None
        text = str(message) if message else body[:200].decode("utf-8", "replace") or "no body"
        # A provider's dump (stack traces, file paths) is not the client's to read whole.
        if len(text) > MAX_PROVIDER_MESSAGE:
            return text[:MAX_PROVIDER_MESSAGE] + "… (cut)"
        return text

    # --- mediation --------------------------------------------------------------------------

    def data_only(self, body: dict[str, Any]) -> bool:
        """A request that declares no tools of its own and asks for structured output (a title,
        a classification): it wants data, not actions, so nothing is injected (SPEC §7.3)."""
        return not body.get("tools") and self.wants_structured_output(body)

    def auxiliary(self, body: dict[str, Any]) -> bool:
        """A request that declares no tools and no ``tool_choice`` and whose system text asks
        for something about the conversation itself (a title, a summary, a compaction:
        opencode's title request, Claude Code's summaries): it wants text, not actions."""
        if body.get("tools") or body.get("functions") or body.get("tool_choice") is not None:
            return False
        return any(map(_asks_about_conversation, _system_texts(body)))

    def wants_structured_output(self, body: dict[str, Any]) -> bool:
        """Whether the request asks for structured output in the protocol's own way."""
        return False

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
        body[self.messages_field] = messages
        body["tools"] = [*conversation.tools, *map(self.tool_definition, tools)]
        rendered_choice = self.render_choice(choice)
        if rendered_choice is not None:
            body["tool_choice"] = rendered_choice
        body["stream"] = False
        return body

    def continue_request(
        self,
        conversation: Conversation,
        previous: ModelTurn,
        since: list[dict[str, Any]],
        tools: list[ToolSpec],
        choice: ToolChoice,
    ) -> dict[str, Any] | None:
        """The next call as a continuation of ``previous`` when the provider holds it (only
        ``since``, the messages added after it was asked for, its own turn first, go up); None
        when it does not and the whole conversation must be sent again."""
        return None

    @staticmethod
    @abstractmethod
    def tool_definition(spec: ToolSpec) -> dict[str, Any]:
        """A managed tool in the provider's tool shape."""

    def searches_natively(self, conversation: Conversation) -> bool:
        """Whether the runner's own tools include the provider's tool search (SPEC §23): then
        its provider loads deferred tools itself, and the sidecar's deferred tools go with it
        (``ToolSpec.deferred``) rather than behind ``claw_tool_search``."""
        return False

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
    def stream_assembler(self) -> TurnAssembler:
        """A reader of one streamed upstream turn (``assemble_stream``, piece by piece)."""

    def streaming_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """An upstream request body (from render_request) asking for a streamed answer."""
        return {**body, "stream": True}

    @abstractmethod
    def round_messages(self, turn: ModelTurn, results: list[ToolResult]) -> list[dict[str, Any]]:
        """The assistant turn and its tool results, as messages to append to the request."""

    def answer_message(self, turn: ModelTurn) -> dict[str, Any]:
        """The final turn as the provider gave it, as a message of the next request."""
        return self.round_messages(turn, [])[0]

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
    def client_stream(self, conversation: Conversation) -> ClientStream:
        """The one stream lifecycle of a streaming client across every turn of its request."""

    @abstractmethod
    def shown_response(
        self,
        conversation: Conversation,
        earlier: list[ModelTurn],
        turn: ModelTurn,
        usage: dict[str, Any],
    ) -> dict[str, Any]:
        """The response a streaming client saw: the text of the ``earlier`` turns (streamed
        live, their calls hidden) before the final ``turn`` as render_response gives it."""

    @abstractmethod
    def echo_fingerprint(self, conversation: Conversation, body: dict[str, Any]) -> str:
        """Fingerprint of the final answer as the runner will send it back next time."""

    def chain_ids(self, conversation: Conversation) -> list[str]:
        """Ids of provider-held state this request continues from, which the runner does not
        send back (none in protocols whose clients send the whole conversation)."""
        return []

    def answer_ids(self, conversation: Conversation, body: dict[str, Any]) -> list[str]:
        """Ids by which a later request may continue from this answer's provider-held state."""
        return []

    def reference_fingerprint(self, body: dict[str, Any]) -> str | None:
        """Fingerprint of the final answer sent back by reference (its recorded item ids) where
        the protocol has such echoes; None where it has not."""
        return None

    def resolve_references(
        self, echo: dict[str, Any], stored: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The runner's echo of an answer with its references to items of ``stored`` (the
        rounds and answer continuity kept) resolved, where the protocol has references."""
        return echo


def _system_texts(body: dict[str, Any]) -> list[str]:
    """The system text of a request of any of the three protocols: Messages' ``system``,
    Responses' ``instructions``, and system or developer turns (Chat ``messages``, Responses
    ``input``); each key means the same wherever it appears."""
    turns = [*_as_list(body.get("messages")), *_as_list(body.get("input"))]
    texts = [body.get("system"), body.get("instructions")]
    texts += [t.get("content") for t in turns if isinstance(t, dict) and t.get("role") in SYSTEM]
    return [text for value in texts for text in _strings(value)]


@functools.lru_cache(maxsize=64)
def _asks_about_conversation(system_text: str) -> bool:
    """Remembered: an agent sends the same system text with every request, and the search
    costs tens of microseconds a kilobyte."""
    return AUXILIARY.search(system_text) is not None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    parts = [p for p in _as_list(value) if isinstance(p, dict)]
    return [p["text"] for p in parts if isinstance(p.get("text"), str)]
