"""OpenTelemetry traces with the GenAI semantic conventions (docs/contract.md §12).

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (or a test installs a provider): then every
client request is an ``invoke_agent`` span continuing the client's W3C ``traceparent``, every
model call a ``chat {model}`` span and every tool call an ``execute_tool {tool}`` span whose
context goes to the tool service in ``traceparent``. While off, the helpers cost one check,
and every request's own path tests ``tracer`` instead of calling them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

log = logging.getLogger(__name__)

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVICE_NAME = "clawpod-sidecar"
tracer: trace.Tracer | None = None
"""None while tracing is off (read it as ``tracing.tracer``: it changes)."""
# What every span helper returns while tracing is off: reusable, no generator per request.
_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()


def configure_tracing(env: Mapping[str, str]) -> bool:
    """Export spans over OTLP/HTTP when the standard endpoint variable is set."""
    if not env.get(ENDPOINT_ENV):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("%s is set but the OpenTelemetry SDK is not installed: no traces", ENDPOINT_ENV)
        return False
    provider = SdkTracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    use_provider(provider)
    return True


def use_provider(provider: TracerProvider | None) -> None:
    """Trace through ``provider`` from now on; None turns tracing off."""
    global tracer
    tracer = None if provider is None else provider.get_tracer("clawpod.sidecar")


def agent_span(route: str, headers: Mapping[str, str]) -> AbstractContextManager[Span | None]:
    """One client request, continuing the client's trace when it sent ``traceparent``; the
    agent is named once it is authenticated (:func:`name_agent`)."""
    if tracer is None:
        return _NO_SPAN
    attributes = {"gen_ai.operation.name": "invoke_agent", "url.path": route}
    return tracer.start_as_current_span(
        "invoke_agent",
        context=propagate.extract(headers),
        kind=SpanKind.SERVER,
        attributes=attributes,
    )


def name_agent(agent: str) -> None:
    if tracer is not None:
        span = trace.get_current_span()
        span.set_attribute("gen_ai.agent.id", agent)
        span.set_attribute("gen_ai.agent.name", agent)


def model_span(provider_api: str, model: str | None) -> AbstractContextManager[Span | None]:
    if tracer is None:
        return _NO_SPAN
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider_api,
    }
    if model:
        attributes["gen_ai.request.model"] = model
    return tracer.start_as_current_span(
        f"chat {model or ''}".rstrip(), kind=SpanKind.CLIENT, attributes=attributes
    )


def tool_span(tool: str, call_id: str | None = None) -> AbstractContextManager[Span | None]:
    if tracer is None:
        return _NO_SPAN
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    return tracer.start_as_current_span(
        f"execute_tool {tool}", kind=SpanKind.CLIENT, attributes=attributes
    )


def record_usage(span: Span | None, input_tokens: int, output_tokens: int) -> None:
    if span is not None:
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)


def record_error(span: Span | None, code: str) -> None:
    if span is not None:
        span.set_attribute("error.type", code)
        span.set_status(Status(StatusCode.ERROR, code))


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's ``traceparent`` (and ``tracestate``) to outgoing headers."""
    if tracer is not None:
        propagate.inject(headers)


def current_trace_id() -> str | None:
    """The trace id the audit record carries, when a span is being recorded."""
    if tracer is None:
        return None
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
