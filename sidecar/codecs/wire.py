"""What the server needs of a wire protocol to pass it through: its routes and upstream paths,
the provider's auth and default headers, the client and response headers to carry, its error
shapes (whole and in-stream), usage in bodies and streams, its stream end, the objects the
provider stores, and the model list. :class:`clawpod.sidecar.codecs.base.Codec` builds the
mediation part on this one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Protocol

import orjson

from clawpod.sidecar.codecs.streaming import EndMarkerWatch
from clawpod.sidecar.model.errors import ApiError

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
        return _int(usage.get(self.input_key)), _int(usage.get(self.output_key))

    def cache_counts(self, usage: Any) -> tuple[int, int]:
        """(cache read, cache creation) input tokens of a usage object: Anthropic's two fields,
        or OpenAI's ``cached_tokens`` in the prompt/input token details."""
        if not isinstance(usage, dict):
            return 0, 0
        read = _int(usage.get("cache_read_input_tokens"))
        for details_key in ("prompt_tokens_details", "input_tokens_details"):
            details = usage.get(details_key)
            if isinstance(details, dict):
                read += _int(details.get("cached_tokens"))
        return read, _int(usage.get("cache_creation_input_tokens"))

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


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
