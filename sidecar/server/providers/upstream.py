"""Where a request for a model goes and how it is sent there: the routes to providers and the
pooled HTTP client to them (one keep-alive session per provider, keys attached).

Model routing: ``provider/model``, else the first fallback route (``routes``) whose glob
matches, else the first provider whose globs match, those of the route's API first (SPEC §4.1,
§14). A target of another protocol than the caller's gets the request translated (§18).

A caller's route to a model is planned once (``RoutePlan``, memoised): besides its targets, it
says whether the request can need the failover walk or a translation at all, so the request
path of a plain route (one provider, one key, the caller's protocol) calls neither."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from ...codecs import CODECS
from ...codecs.base import ProviderApi
from ...manifest import MODEL_GLOB_CHARACTERS, Provider, SidecarConfig, is_model_glob
from ...model.errors import ApiError
from ...model.known_models import KNOWN_MODELS
from ...model.redaction import StreamRedactor, redactor_for
from ...observability.metrics import Metrics, connection_counts
from ...translation import target_protocol
from ...transport import (
    BodyTooLarge,
    ConnectError,
    Headers,
    HttpClient,
    PreparedRequest,
    Response,
    Timeout,
    TransportError,
)
from .key_pool import KeyPool

Api = ProviderApi
_CACHE_LIMIT = 4096
# A request's upstream candidates in order: (provider name, provider, upstream model).
Target = tuple[str, Provider, str]


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """What a request of one protocol for one model needs, decided once."""

    targets: list[Target]
    walks: bool
    """More than one target, a key pool or a first-byte bound: the failover walk decides
    (``failover.py``); else the one target is sent to directly."""
    crosses: bool
    """Some target speaks another protocol than the caller: the request is translated for it
    (``translated.py``)."""


def plan_route(protocol: str, targets: list[Target]) -> RoutePlan:
    """The plan of a request in ``protocol`` to ``targets``."""
    provider = targets[0][1]
    walks = (
        len(targets) > 1
        or len(provider.key_envs) > 1  # a key pool (``KeyPool.pooled``)
        or provider.first_byte_timeout_ms is not None
    )
    crosses = any(target_protocol(protocol, p.served) != protocol for _, p, _ in targets)
    return RoutePlan(targets, walks, crosses)


class ModelRouter:
    """Resolves a requested model to its targets (provider name, provider, upstream model),
    memoised."""

    def __init__(self, config: SidecarConfig) -> None:
        self._providers = config.providers
        self._by_api: dict[str, list[tuple[str, Provider]]] = {"openai": [], "anthropic": []}
        for name, provider in config.providers.items():
            self._by_api[provider.api].append((name, provider))
        # Routes of every API: a target of another protocol gets the request translated.
        self._routes = [
            (glob, [(t.provider, t.model) for t in targets])
            for glob, targets in (config.routes or {}).items()
        ]
        self._cache: dict[tuple[str, str], list[Target]] = {}
        self._plans: dict[tuple[str, str], RoutePlan] = {}

    def resolve(self, api: Api, model: object) -> tuple[str, Provider, str]:
        """The first target of ``model``."""
        return self.route(api, model)[0]

    def route(self, api: Api, model: object) -> list[Target]:
        """Every target of ``model`` in failover order (one, unless a fallback route matches)."""
        if not isinstance(model, str) or not model:
            raise ApiError(400, "model_required", "the request must name a model")
        key = (api, model)
        found = self._cache.get(key)  # (a pattern is refused below, never cached)
        if found is None:
            if is_model_glob(model):
                # A pattern from a model list would be forwarded verbatim and fail upstream.
                raise ApiError(
                    400,
                    "model_is_a_pattern",
                    f"model {model!r} is a pattern, not a model id; name one model "
                    "(GET /v1/models lists them)",
                )
            found = self._resolve(api, model)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found

    def plan(self, api: Api, protocol: str, model: object) -> RoutePlan:
        """The plan of a request in ``protocol`` (of ``api``) for ``model``, memoised."""
        found = self._plans.get((protocol, model)) if isinstance(model, str) else None
        if found is None:
            found = plan_route(protocol, self.route(api, model))  # refuses what is no model id
            if len(self._plans) >= _CACHE_LIMIT:
                self._plans.clear()
            self._plans[protocol, model] = found  # type: ignore[index]
        return found

    def _resolve(self, api: Api, model: str) -> list[Target]:
        prefix, slash, _ = model.partition("/")
        if not (slash and prefix in self._providers):
            for glob, targets in self._routes:
                if fnmatchcase(model, glob):
                    return [(name, self._providers[name], own or model) for name, own in targets]
        return [self._resolve_provider(api, model)]

    def _resolve_provider(self, api: Api, model: str) -> Target:
        prefix, slash, rest = model.partition("/")
        if slash and prefix in self._providers:
            provider = self._providers[prefix]
            if _matches(provider, rest):
                return prefix, provider, rest
            raise self._not_allowed(api, model)
        # The caller's own API first; a provider of another protocol gets a translation.
        other = "anthropic" if api == "openai" else "openai"
        for name, provider in (*self._by_api[api], *self._by_api[other]):
            if _matches(provider, model):
                return name, provider, model
        raise self._not_allowed(api, model)

    def first_provider(self, api: Api, protocol: str | None = None) -> str:
        """The provider that takes a request of ``api`` that names no model: the first that
        serves ``protocol`` (a stored response is read where responses are stored)."""
        for name, provider in self._by_api[api]:
            if protocol is None or protocol in provider.served:
                return name
        what = f"the {api} API" if protocol is None else f"the {protocol} protocol"
        raise ApiError(400, "no_provider", f"no provider of this pod serves {what}")

    def allows(self, api: Api, model: str) -> bool:
        """Whether a request of ``api`` may name ``model``."""
        try:
            self.resolve(api, model)
        except ApiError:
            return False
        return True

    def exact_models(self, api: Api) -> list[tuple[str, str]]:
        """(provider name, model id) of every exact id the providers of ``api`` list, then of
        every known id (``model/known_models.py``) their globs route, each under the provider
        a request for it would reach. A glob that matches anything (``*``) adds none: it names
        no family, so the table cannot say what the server behind it serves."""
        seen: set[str] = set()
        listed = []
        for name, provider in self._by_api[api]:
            for model in provider.exact_models:
                if model not in seen:
                    seen.add(model)
                    listed.append((name, model))
        for model in KNOWN_MODELS:
            if model in seen or not any(
                _names_a_family(glob) and fnmatchcase(model, glob)
                for _, provider in self._by_api[api]
                for glob in provider.models
            ):
                continue
            seen.add(model)
            listed.append((self.resolve(api, model)[0], model))
        return listed

    def allowed(self, api: Api) -> list[str]:
        """Human-readable allowed models for ``api``: ``provider: glob, glob``."""
        return [f"{name}: {', '.join(p.models)}" for name, p in self._by_api[api]]

    def _not_allowed(self, api: Api, model: str) -> ApiError:
        other = "anthropic" if api == "openai" else "openai"
        allowed = "; ".join(self.allowed(api) + self.allowed(other)) or "none"
        return ApiError(
            400, "model_not_allowed", f"model {model!r} is not allowed here; allowed: {allowed}"
        )


def _matches(provider: Provider, model: str) -> bool:
    return any(fnmatchcase(model, glob) for glob in provider.models)


def _names_a_family(glob: str) -> bool:
    """A glob with a literal prefix (``gpt-*``, ``o3*``), not one that matches anything."""
    return is_model_glob(glob) and glob[0] not in MODEL_GLOB_CHARACTERS


log = logging.getLogger(__name__)

# Upstream response headers worth returning to the client: the SDKs' retry hints, and each
# protocol's own (request ids, rate limits). Transport headers (length, encoding, connection)
# are ours to set.
_RESPONSE_HEADERS = frozenset(
    {"content-type", "retry-after", "retry-after-ms", "x-should-retry"}.union(
        *(codec.relayed_headers for codec in CODECS)
    )
)
_RESPONSE_HEADER_PREFIXES = tuple(
    dict.fromkeys(prefix for codec in CODECS for prefix in codec.relayed_header_prefixes)
)


class UpstreamError(Exception):
    """The provider could not be reached, did not answer in time, or broke the protocol."""

    def __init__(self, kind: Literal["timeout", "unreachable", "protocol"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(slots=True)
class UpstreamTarget:
    """Where one client request goes: the provider, the client route, and the client headers
    passed on with it."""

    provider: str
    route: str
    forward_headers: dict[str, str]
    stream: bool
    method: str = "POST"
    path: str | None = None
    """The concrete upstream path (and query) of a resource route; None for the route's own."""
    key: str | None = None
    """The label of the pooled key to send with; None: the provider's first key."""


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: Headers
    body: bytes


def response_headers(upstream: Headers) -> dict[str, str]:
    """The subset of upstream response headers to hand back to the client."""
    return {name: value for name, value in upstream.items() if _passed_on(name)}


@functools.lru_cache(maxsize=1024)
def _passed_on(name: str) -> bool:
    # Cached: a provider sends the same few header names on every answer.
    lower = name.lower()
    return lower in _RESPONSE_HEADERS or lower.startswith(_RESPONSE_HEADER_PREFIXES)


class _ProviderChannel:
    """One provider's requests, rendered once per route: URL, key and default headers."""

    def __init__(
        self, provider: Provider, key: str | None, client: HttpClient, every_key: tuple[bytes, ...]
    ) -> None:
        base_url = provider.base_url.rstrip("/")
        # Any of the provider's keys may come back in an answer of this one's.
        self.redact = redactor_for(every_key)
        self._base_url = base_url
        self._client = client
        # The pod's billing headers (``BILLING_HEADERS``), added to what the agent may forward.
        self.pod_headers = provider.headers or {}
        # Keyed by (route, client sent its own of the protocol's default headers, as Anthropic
        # clients send anthropic-version): the client's replace ours.
        self.requests: dict[tuple[str, bool], PreparedRequest] = {}
        self._default_names: frozenset[str] = frozenset()
        for codec in CODECS:
            if codec.api != provider.api:
                continue
            headers = {
                "Content-Type": "application/json",
                **(codec.auth_headers(key) if key else {}),
            }
            with_defaults = {**headers, **codec.default_headers}
            self._default_names = frozenset(codec.default_headers)
            self._headers = {False: with_defaults, True: headers}
            routes = {codec.route: codec.upstream_path, **codec.side_routes}
            for route, path in routes.items():
                url = base_url + path
                self.requests[route, False] = client.prepare("POST", url, with_defaults)
                self.requests[route, True] = client.prepare("POST", url, headers)

    def request_for(self, target: UpstreamTarget) -> PreparedRequest:
        """The prepared request of a fixed route, or one rendered now for a resource path."""
        client_defaults = not self._default_names.isdisjoint(target.forward_headers)
        if target.path is None:
            return self.requests[target.route, client_defaults]
        url = self._base_url + target.path
        return self._client.prepare(target.method, url, self._headers[client_defaults])


class UpstreamClient:
    """Sends requests to providers over pooled keep-alive connections, attaching their keys."""

    def __init__(
        self, config: SidecarConfig, env: Mapping[str, str], metrics: Metrics | None = None
    ) -> None:
        self.timeout_s = config.upstream_timeout_ms / 1000
        # A provider's whole answer, read for mediation, is held to the request-body limit.
        self.max_response_bytes = config.max_body_bytes
        self._client = HttpClient(
            keepalive_s=60,
            connect_timeout_s=min(self.timeout_s, 30.0),
            counts=connection_counts(metrics, "upstream"),
        )
        self._channels: dict[str, _ProviderChannel] = {}
        self._key_channels: dict[tuple[str, str], _ProviderChannel] = {}
        self.pools: dict[str, KeyPool] = {}
        for name, provider in config.providers.items():
            pool = self.pools[name] = KeyPool(provider.key_envs, env)
            every_key = tuple(k.value.encode() for k in pool.keys if k.value)
            for key in pool.keys:
                if key.value is None:
                    log.warning(
                        "provider %s: %s is not set; requests go upstream without a key",
                        name,
                        key.label,
                    )
                channel = _ProviderChannel(provider, key.value, self._client, every_key)
                self._key_channels[name, key.label] = channel
                self._channels.setdefault(name, channel)

    async def close(self) -> None:
        await self._client.close()

    def _channel(self, target: UpstreamTarget) -> _ProviderChannel:
        if target.key is None:
            return self._channels[target.provider]
        return self._key_channels[target.provider, target.key]

    @property
    def http(self) -> HttpClient:
        return self._client

    def redact(self, provider_name: str, data: bytes) -> bytes:
        """``data`` without the provider's key, in any encoding: some providers repeat a
        rejected key in their error message, and it must not reach an agent."""
        return self._channels[provider_name].redact(data)

    def relayed_headers(self, provider_name: str, headers: Headers) -> dict[str, str]:
        """The response headers handed back to the client, without the provider's key (a
        provider or a proxy in front of it may echo the request's key in a header)."""
        relayed = response_headers(headers)
        redact = self._channels[provider_name].redact
        # One scan of all values (an echo in one is an echo in their join), not one per value:
        # a provider sends a dozen, and echoes a key in none of them almost always.
        joined = "\n".join(relayed.values()).encode("utf-8", "surrogatepass")
        if not redact.found_in(joined):
            return relayed
        return {name: redact.text(value) for name, value in relayed.items()}

    def stream_redactor(self, provider_name: str) -> StreamRedactor:
        """Removes the provider's key from a relayed stream's error events."""
        return StreamRedactor(self._channels[provider_name].redact)

    def redact_text(self, provider_name: str | None, text: str) -> str:
        """A message built from provider text, without the provider's key."""
        if provider_name is None:
            return text
        return self._channels[provider_name].redact.text(text)

    async def send(
        self,
        target: UpstreamTarget,
        body: bytes | bytearray | None,
        *,
        timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        max_body_bytes: int | None = None,
    ) -> Response:
        """Send raw JSON bytes (None: no body) to the target's provider; the caller must
        release the response.

        ``read_timeout_s`` bounds each wait for bytes of a streamed answer, ``timeout_s`` the
        whole of any other; without either, ``upstream_timeout_ms`` bounds one or the other as
        the client asked for a stream or not.
        """
        channel = self._channel(target)
        forward = target.forward_headers
        if channel.pod_headers:
            forward = with_pod_headers(channel.pod_headers, forward)
        prepared = channel.request_for(target)
        streamed = read_timeout_s is not None or (timeout_s is None and target.stream)
        try:
            return await self._client.send(
                prepared,
                body,
                extra_headers=forward,
                # A stream is bounded between its chunks, any other answer as a whole.
                read_timeout_s=(read_timeout_s or self.timeout_s) if streamed else None,
                timeout_s=None if streamed else (timeout_s or self.timeout_s),
                max_body_bytes=max_body_bytes,
                retry_unanswered=True,  # a provider call, never a tool call (SPEC 8.2)
            )
        except TransportError as exc:
            raise translate_error(exc, target.provider) from exc


def with_pod_headers(pod: Mapping[str, str], forward: Mapping[str, str]) -> dict[str, str]:
    """The agent's forwarded headers with the pod's billing headers: an ``anthropic-beta`` of
    both is one list (one header line: a second line may be dropped on the way), the pod's
    first; any other billing header is the pod's alone (agents' are never forwarded)."""
    merged = dict(forward)
    for name, value in pod.items():
        lower = name.lower()
        theirs = merged.pop(lower, None)
        merged[lower] = f"{value},{theirs}" if theirs and lower == "anthropic-beta" else value
    return merged


async def read_whole(response: Response, provider: str | None) -> UpstreamResponse:
    """The whole answer; the response is released."""
    try:
        data = await response.read()
    except TransportError as exc:
        raise translate_error(exc, provider) from exc
    finally:
        response.release()
    return UpstreamResponse(status=response.status, headers=response.headers, body=data)


def translate_error(exc: TransportError, provider: str | None) -> UpstreamError:
    if isinstance(exc, Timeout):
        return UpstreamError("timeout", f"provider {provider!r} did not answer in time")
    if isinstance(exc, ConnectError):
        return UpstreamError("unreachable", f"provider {provider!r} is unreachable")
    if isinstance(exc, BodyTooLarge):
        message = f"provider {provider!r} answered with more than {exc.limit} bytes"
        return UpstreamError("protocol", message)
    return UpstreamError("protocol", f"provider {provider!r} broke the connection or protocol")
