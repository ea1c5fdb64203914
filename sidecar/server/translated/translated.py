"""The server's side of protocol translation (contract §18, docs/translation.md): which
targets of a request speak another protocol than its caller, the request each of them gets,
and their answers and errors back in the caller's protocol, for pass-through and mediated
requests alike. The translating itself is sans-IO, in ``translation/``."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ...audit.log import usage_record
from ...codecs import CODECS
from ...codecs.base import Codec
from ...mediation.commands import CallModel, Event, ModelFailed, ModelReplied
from ...model.conversation import Conversation, ToolChoice
from ...model.errors import ApiError, upstream_failure
from ...model.token_estimate import reply_tokens, request_tokens
from ...translation import (
    Translated,
    Untranslatable,
    target_protocol,
    translate_reply,
    translate_request,
    untranslatable_error,
    unusable_reply,
)
from ...translation import (
    translate_error as translate_provider_error,
)
from ...transport import Headers, Response, TransportError
from ..accounting.accounting import record_request
from ..accounting.counting import with_managed_tools
from ..failover.failover import open_upstream
from ..providers.upstream import (
    UpstreamError,
    UpstreamResponse,
    UpstreamTarget,
    read_whole,
    translate_error,
)
from ..request.errors import reply_error
from ..request.translation_plan import Translations

if TYPE_CHECKING:
    from ...manifest import Provider
    from ..providers.upstream import Target
    from ..request.exchange import Exchange, RequestContext

_CODECS = {codec.name: codec for codec in CODECS}
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
JSON_HEADERS = {"Content-Type": "application/json"}
# Provider answer headers that keep their meaning whatever the protocol.
_KEPT_HEADERS = frozenset({"retry-after", "retry-after-ms", "x-request-id", "request-id"})


def plan(
    ctx: RequestContext, targets: Sequence[Target], body: dict[str, Any], *, mediated: bool = False
) -> Translations | None:
    """Translate the client's body for every target of another protocol, up front, so what
    cannot be carried is refused before anything goes upstream (``ApiError`` 400, naming the
    provider and what is missing), as is one of too many items to walk (``ApiError`` 413).
    Sets ``ctx.routing.translations`` when any target needs one. ``mediated``: the engine writes the
    body each model call sends (this only checks it)."""
    caller = ctx.caller.codec
    too_many = caller.too_many_items(body)
    if too_many is not None:
        raise too_many
    found: dict[str, Translated] = {}
    by_provider: dict[str, str | None] = {}
    checked = _without_references(body) if mediated else body
    for name, provider, _ in targets:
        protocol = target_protocol(caller.name, provider.served)
        by_provider[name] = None if protocol == caller.name else protocol
        if protocol == caller.name or protocol in found:
            continue
        try:
            found[protocol] = translate_request(checked, caller.name, protocol)
        except Untranslatable as exc:
            raise untranslatable_error(exc, name, caller.name, protocol) from None
    if not found:
        return None
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    translations = Translations(caller, found, include_usage, by_provider)
    if caller.name == "responses":
        # Nothing is stored upstream: the engine must not chain calls by response id.
        body["store"] = False
    record: dict[str, Any] = {"from": caller.name, "to": list(found)}
    dropped = {name for t in found.values() for name in t.dropped}
    if dropped:
        record["dropped"] = sorted(dropped)
    ctx.ledger.audit_extra = {**(ctx.ledger.audit_extra or {}), "translation": record}
    return translations


def _without_references(body: dict[str, Any]) -> dict[str, Any]:
    """A mediated Responses body as the engine will send it: its ``item_reference`` items to
    answers the sidecar gave are resolved from continuity first (a reference it cannot resolve
    is refused at the model call, as untranslatable)."""
    items = body.get("input")
    if not isinstance(items, list) or not any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in items
    ):
        return body
    kept = [i for i in items if not (isinstance(i, dict) and i.get("type") == "item_reference")]
    return {**body, "input": kept}


def retarget(target: UpstreamTarget, protocol: str, *, stream: bool = False) -> UpstreamTarget:
    """``target`` on the route of ``protocol``, with only the client headers it understands;
    ``stream``: its answer is read as a stream (``translated_stream.py``)."""
    codec = _CODECS[protocol]
    forwarded = target.forward_headers
    if forwarded:  # most clients forward none
        understood = codec.forwarded_headers
        forwarded = {k: v for k, v in forwarded.items() if k in understood}
    # Built, not ``dataclasses.replace``d: this runs on every translated call.
    return UpstreamTarget(target.provider, codec.route, forwarded, stream, key=target.key)


def for_provider(body: dict[str, Any], model: str | None, provider: Provider) -> dict[str, Any]:
    """A translated body as its target takes it: the model id it knows the model by, and for
    an OpenAI-compatible server (a provider declared ``chat-completions``) the output limit
    under ``max_tokens``, the field such servers read (OpenAI's own reasoning models refuse
    it, so the OpenAI API gets ``max_completion_tokens``)."""
    if model is not None and model != body.get("model"):
        body = {**body, "model": model}
    if provider.protocols and "max_completion_tokens" in body:
        body = {**body}
        body["max_tokens"] = body.pop("max_completion_tokens")
    return body


# --- pass-through -----------------------------------------------------------------------------


def passthrough_send(
    ctx: RequestContext, target: UpstreamTarget, model: str | None
) -> tuple[UpstreamTarget, bytes] | None:
    """The target and body of a pass-through to a provider of another protocol; None when
    the provider speaks the caller's."""
    translations = ctx.routing.translations
    providers = ctx.state.config.providers
    protocol = translations and translations.protocol_of(target.provider, providers)
    if not protocol:
        return None
    provider = providers[target.provider]
    body = for_provider(translations.by_protocol[protocol].body, model, provider)
    return retarget(target, protocol), orjson.dumps(body)


def answered_in(ctx: RequestContext) -> Translated | None:
    """The translation of the target that answered, if it speaks another protocol."""
    translations = ctx.routing.translations
    if translations is None or ctx.ledger.provider_name is None:
        return None
    name = ctx.ledger.provider_name
    protocol = translations.protocol_of(name, ctx.state.config.providers)
    return translations.by_protocol[protocol] if protocol else None


async def relay_translated(
    exchange: Exchange, ctx: RequestContext, upstream: Response, translated: Translated
) -> None:
    """The provider's whole answer, in the caller's protocol (a streaming caller gets it as
    one stream rendered by its own codec)."""
    provider = ctx.ledger.provider_name or ""
    try:
        data = await upstream.read(ctx.state.upstream.max_response_bytes)
    except TransportError as exc:
        failure = translate_error(exc, provider)
        return await _fail(ctx, exchange, upstream_failure(failure.kind, failure.message))
    streamed = upstream.content_type == "text/event-stream"
    event = _reply_event(
        ctx, upstream.status, upstream.headers, data, translated, ctx.caller.codec, streamed
    )
    if isinstance(event, ApiError):
        return await _fail(ctx, exchange, event)
    body, upstream_usage = event
    usage = _usage(_CODECS[translated.target], translated.body, upstream_usage, body)
    headers = _kept_headers(upstream)
    with contextlib.suppress(ConnectionError):  # a client that left is still audited
        if ctx.routing.stream:
            await exchange.start_stream(200, {**SSE_HEADERS, **headers})
            frames = ctx.caller.codec.render_stream(_stream_conversation(ctx, body), body)
            await exchange.write(b"".join(frames))
            await exchange.end()
        else:
            await exchange.respond(200, orjson.dumps(body), {**JSON_HEADERS, **headers})
    await record_request(ctx, http_status=200, usage=usage)


async def _fail(ctx: RequestContext, exchange: Exchange, err: ApiError) -> None:
    await reply_error(exchange, ctx.caller.codec, err)
    await record_request(
        ctx, http_status=err.status, error_code=err.code, usage=usage_record(rounds=1)
    )


def _kept_headers(upstream: Response) -> dict[str, str]:
    return {k: v for k, v in upstream.headers.items() if k.lower() in _KEPT_HEADERS}


def _usage(
    target: Codec, request: dict[str, Any], usage: Any, answer: dict[str, Any]
) -> dict[str, int]:
    """The call's usage as its provider counted it (prices know each provider's sense of
    input tokens), an estimate marked as such where it counted none (``answer``: the reply
    in the caller's protocol)."""
    tokens = target.usage_counts(usage)
    if not any(tokens):
        estimate = usage_record(
            request_tokens(request, target.name), reply_tokens(answer, target.name), rounds=1
        )
        estimate["estimated"] = True
        return estimate
    read, creation = target.cache_counts(usage)
    return usage_record(*tokens, rounds=1, cache_read=read, cache_creation=creation)


def _stream_conversation(ctx: RequestContext, body: dict[str, Any]) -> Conversation:
    """What the caller codec's stream rendering reads of a request."""
    assert ctx.routing.translations is not None
    return Conversation(
        params={"model": body.get("model")},
        messages=[],
        fingerprints=[],
        roles=[],
        tools=[],
        runner_tool_names=set(),
        tool_choice=ToolChoice(mode=None),
        stream=True,
        include_usage=ctx.routing.translations.include_usage,
    )


# --- model calls (mediated) -------------------------------------------------------------------


async def call_model(ctx: RequestContext, command: CallModel) -> Event:
    """One mediated model call of a request some of whose targets speak another protocol:
    whole, on the targets in turn (``failover.py``), each spoken to in its own protocol, the
    answer or error as the engine's event in the caller's. ``model_call.call_model`` asks it
    (and times it) instead of its own when ``ctx.routing.translations`` is set."""
    translations = ctx.routing.translations
    assert translations is not None
    upstream = ctx.state.upstream
    spoken: dict[str, Translated | None] = {}

    def send(target: UpstreamTarget, model: str | None) -> Awaitable[Response]:
        providers = ctx.state.config.providers
        provider = providers[target.provider]
        protocol = translations.protocol_of(target.provider, providers)
        body, translated = command.body, None
        if protocol is not None:
            translated = translate_request(body, translations.caller.name, protocol)
            target = retarget(target, protocol)
            body = for_provider(translated.body, model, provider)
        elif model is not None and model != body.get("model"):  # a fallback's own id
            body = {**body, "model": model}
        spoken[target.provider] = translated
        data = orjson.dumps(body)
        bounds = {"timeout_s": command.timeout_s, "max_body_bytes": upstream.max_response_bytes}
        return upstream.send(target, data, **bounds)

    try:
        reply = await read_whole(await open_upstream(ctx, send), ctx.ledger.provider_name)
    except CALL_FAILURES as exc:
        return model_failure(exc)
    return reply_event(ctx, reply, spoken.get(ctx.ledger.provider_name or ""))


# What opening a model call raises when no target answered usably.
CALL_FAILURES = (UpstreamError, ApiError, Untranslatable)


def model_failure(exc: Exception) -> ModelFailed:
    """The engine's event for a model call that failed before any answer arrived."""
    if isinstance(exc, UpstreamError):
        return ModelFailed(exc.kind, exc.message)
    if isinstance(exc, ApiError):  # every key rests
        return ModelFailed("status", exc.message, exc.status, exc.headers.get("retry-after"))
    return ModelFailed("status", str(exc), 400)


def reply_event(
    ctx: RequestContext, reply: UpstreamResponse, translated: Translated | None
) -> Event:
    """A model call's answer or error as the engine's event in the caller's protocol
    (``translated`` None: the provider speaks it); live streams use it for an answer that
    came whole or refused (``translated_stream.py``)."""
    assert ctx.routing.translations is not None
    streamed = "text/event-stream" in reply.headers.get("Content-Type", "")
    event = _reply_event(
        ctx,
        reply.status,
        reply.headers,
        reply.body,
        translated,
        ctx.routing.translations.caller,
        streamed,
    )
    if not isinstance(event, ApiError):
        return ModelReplied(event[0])
    if event.code == "upstream_protocol_error":
        return ModelFailed("protocol", event.message)
    return ModelFailed("status", event.message, event.status, event.headers.get("retry-after"))


def _reply_event(
    ctx: RequestContext,
    status: int,
    headers: Headers,
    data: bytes,
    translated: Translated | None,
    caller: Codec,
    streamed: bool,
) -> tuple[dict[str, Any], Any] | ApiError:
    """The provider's answer in the caller's protocol (``translated`` None: it speaks it) and
    the usage the provider reported, or the error to tell the caller. A tuple, not an object:
    this runs on every translated answer."""
    provider = ctx.ledger.provider_name or ""
    protocol = translated.target if translated is not None else caller.name
    if not 200 <= status < 300:
        data = ctx.state.upstream.redact(provider, data)
        err = translate_provider_error(status, data, provider, protocol)
        retry_after = headers.get("Retry-After")
        if retry_after:
            err.headers["retry-after"] = retry_after
        return err
    try:
        answer = _CODECS[protocol].assemble_stream(data) if streamed else orjson.loads(data)
        if translated is None:
            if not isinstance(answer, dict):
                raise Untranslatable("the answer is not a JSON object")
            return answer, answer.get("usage")
        return translate_reply(answer, translated), answer.get("usage")
    except (Untranslatable, ValueError, KeyError, TypeError, IndexError) as exc:
        return unusable_reply(Untranslatable(str(exc)), provider, protocol)


# --- side routes ------------------------------------------------------------------------------


def counts_here(ctx: RequestContext) -> bool:
    """A token count (``count_tokens``, ``input_tokens``) for a provider of another protocol,
    which has no such route: the sidecar estimates it."""
    return ctx.caller.route in ctx.caller.codec.side_routes and ctx.routing.translations is not None


async def answer_count(exchange: Exchange, ctx: RequestContext, body: dict[str, Any]) -> None:
    agent = ctx.caller.agent
    if agent.agent.mode == "mediated" and agent.tools.tools:
        body = with_managed_tools(ctx.caller.codec, agent, body)  # the model will see them too
    tokens = request_tokens(body, ctx.caller.codec.name)
    answer: dict[str, Any] = {"input_tokens": tokens}
    if ctx.caller.codec.name == "responses":
        answer["object"] = "response.input_tokens"
    with contextlib.suppress(ConnectionError):
        await exchange.respond(200, orjson.dumps(answer), JSON_HEADERS)
    usage = usage_record(rounds=0)
    await record_request(ctx, http_status=200, usage=usage, extra={"estimated_count": True})
