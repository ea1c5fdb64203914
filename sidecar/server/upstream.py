"""The pooled HTTP client to LLM providers: one keep-alive session per provider, keys attached."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import orjson

from sidecar.manifest import Provider, SidecarConfig

if TYPE_CHECKING:
    from sidecar.server.context import RequestContext

log = logging.getLogger("sidecar.upstream")

ANTHROPIC_DEFAULT_VERSION = "2023-06-01"
# Client route -> path under the provider's base URL (OpenAI base URLs already end in /v1).
_ENDPOINT_PATHS = {
    "openai": {"/v1/chat/completions": "/chat/completions"},
    "anthropic": {
        "/v1/messages": "/v1/messages",
        "/v1/messages/count_tokens": "/v1/messages/count_tokens",
    },
}
# Client headers that carry API semantics and are safe to pass on. Never auth headers.
FORWARDED_REQUEST_HEADERS = {
    "openai": ("openai-organization", "openai-project", "openai-beta", "idempotency-key"),
    "anthropic": ("anthropic-version", "anthropic-beta", "idempotency-key"),
}
# Upstream response headers worth returning to the client (SDK retry hints, request ids,
# rate limits). Transport headers (length, encoding, connection) are ours to set.
_RESPONSE_HEADERS = frozenset(
    {
        "content-type",
        "retry-after",
        "retry-after-ms",
        "x-should-retry",
        "request-id",
        "x-request-id",
        "openai-processing-ms",
        "openai-version",
    }
)
_RESPONSE_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


_PROTOCOL_ERRORS = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientResponseError,
)


class UpstreamError(Exception):
    """The provider could not be reached, did not answer in time, or broke the protocol."""

    def __init__(self, kind: Literal["timeout", "unreachable", "protocol"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes


def response_headers(upstream: Mapping[str, str]) -> dict[str, str]:
    """The subset of upstream response headers to hand back to the client."""
    kept = {}
    for name, value in upstream.items():
        lower = name.lower()
        if lower in _RESPONSE_HEADERS or lower.startswith(_RESPONSE_HEADER_PREFIXES):
            kept[name] = value
    return kept


class _ProviderChannel:
    """Pre-computed request parts for one provider, plus its pooled session."""

    def __init__(self, name: str, provider: Provider, key: str | None, timeout_s: float) -> None:
        self.name = name
        base_url = provider.base_url.rstrip("/")
        self.urls = {
            route: base_url + path for route, path in _ENDPOINT_PATHS[provider.api].items()
        }
        self.api = provider.api
        self.key = key.encode() if key else b""
        self.headers: dict[str, str] = {"Content-Type": "application/json"}
        if key and provider.api == "openai":
            self.headers["Authorization"] = f"Bearer {key}"
        elif key:
            self.headers["x-api-key"] = key
        if provider.api == "anthropic":
            self.headers["anthropic-version"] = ANTHROPIC_DEFAULT_VERSION
        connect_s = min(timeout_s, 30.0)
        # A stream may run for long, so its deadline is per chunk; a plain answer has one
        # deadline (cheaper too: no timer rescheduled on every read).
        self.stream_timeout = aiohttp.ClientTimeout(sock_connect=connect_s, sock_read=timeout_s)
        self.answer_timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_s)
        self.session: aiohttp.ClientSession | None = None

    def request_headers(self, forward: Mapping[str, str]) -> Mapping[str, str]:
        if not forward:
            return self.headers  # aiohttp copies it; nothing to merge
        return {**self.headers, **forward}  # a client's anthropic-version replaces the default


class UpstreamClient:
    """Sends requests to providers over pooled keep-alive connections, attaching their keys."""

    def __init__(self, config: SidecarConfig, env: Mapping[str, str]) -> None:
        timeout_s = config.upstream_timeout_ms / 1000
        self._channels: dict[str, _ProviderChannel] = {}
        for name, provider in config.providers.items():
            key = env.get(provider.key_env) or None
            if key is None:
                log.warning(
                    "provider %s: %s is not set; requests go upstream without a key",
                    name,
                    provider.key_env,
                )
            self._channels[name] = _ProviderChannel(name, provider, key, timeout_s)

    async def start(self) -> None:
        for channel in self._channels.values():
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
            # No trace configs: aiohttp then fires several signals per request and per chunk,
            # a measurable share of a pass-through's CPU.
            channel.session = aiohttp.ClientSession(connector=connector)

    async def close(self) -> None:
        for channel in self._channels.values():
            if channel.session is not None:
                await channel.session.close()
                channel.session = None

    def redact(self, provider_name: str, data: bytes) -> bytes:
        """``data`` without the provider's key: some providers repeat a rejected key in their
        error message, and it must not reach an agent."""
        key = self._channels[provider_name].key
        return data.replace(key, b"[redacted]") if key and key in data else data

    @property
    def started(self) -> bool:
        return all(c.session is not None for c in self._channels.values())

    async def send(
        self, ctx: RequestContext, body: bytes, *, timeout: aiohttp.ClientTimeout | None = None
    ) -> aiohttp.ClientResponse:
        """POST raw JSON bytes to the context's provider; the caller must release the response.

        Without ``timeout``, ``upstream_timeout_ms`` bounds each chunk of a streamed request
        and the whole of any other.
        """
        channel = self._channels[ctx.provider_name]
        assert channel.session is not None, "UpstreamClient.start() was not awaited"
        if timeout is None:
            timeout = channel.stream_timeout if ctx.stream else channel.answer_timeout
        try:
            return await channel.session.post(
                channel.urls[ctx.route],
                data=body,
                headers=channel.request_headers(ctx.forward_headers),
                timeout=timeout,
                allow_redirects=False,
            )
        except Exception as exc:
            raise translate_error(exc, ctx.provider_name) from exc

    async def post_json(
        self, ctx: RequestContext, body: dict[str, Any], *, timeout_s: float
    ) -> UpstreamResponse:
        """One non-streaming call with a total deadline; the whole body is read."""
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        response = await self.send(ctx, orjson.dumps(body), timeout=timeout)
        try:
            data = await response.read()
        except Exception as exc:
            raise translate_error(exc, ctx.provider_name) from exc
        finally:
            response.release()
        return UpstreamResponse(status=response.status, headers=response.headers, body=data)


def translate_error(exc: BaseException, provider: str) -> BaseException:
    """Map aiohttp/asyncio failures to :class:`UpstreamError`; leave anything else alone."""
    if isinstance(exc, asyncio.TimeoutError):
        return UpstreamError("timeout", f"provider {provider!r} did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamError("unreachable", f"provider {provider!r} is unreachable")
    if isinstance(exc, _PROTOCOL_ERRORS):
        return UpstreamError("protocol", f"provider {provider!r} broke the connection or protocol")
    if isinstance(exc, aiohttp.ClientError | OSError):
        return UpstreamError("unreachable", f"provider {provider!r} is unreachable")
    return exc
