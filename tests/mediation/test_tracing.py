"""OpenTelemetry traces (contract §12): one invoke_agent span per client request continuing the
client's traceparent, a chat span per model call, an execute_tool span per tool call whose
context reaches the tool service, and the trace id in the audit record."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clawpod.sidecar.observability import tracing
from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.upstream import Reply

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


async def test_a_mediated_request_is_one_trace_from_client_to_tool(
    pod: MediatedPod, spans: InMemorySpanExporter
) -> None:
    pod.service.reply("/slow")
    pod.upstream.enqueue(
        "openai", Reply.json(oa_calls(("c1", "desk_slow", {}))), Reply.json(oa_text("done"))
    )
    client = pod.openai(default_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    (record,) = await pod.wait_for_audit(1)

    finished = spans.get_finished_spans()
    names = sorted(span.name for span in finished)
    assert names == ["chat gpt-4o", "chat gpt-4o", "execute_tool desk.slow", "invoke_agent"]
    assert {format(span.context.trace_id, "032x") for span in finished} == {CLIENT_TRACE}
    (agent,) = [span for span in finished if span.name == "invoke_agent"]
    assert agent.parent is not None and format(agent.parent.span_id, "016x") == CLIENT_SPAN
    assert agent.attributes["gen_ai.agent.id"] == "analyst"
    (tool,) = [span for span in finished if span.name.startswith("execute_tool")]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    chats = [span for span in finished if span.name.startswith("chat")]
    assert all(span.attributes["gen_ai.provider.name"] == "openai" for span in chats)
    assert chats[0].attributes["gen_ai.usage.input_tokens"] == 10

    (sent,) = pod.service.requests
    traceparent = sent.headers["traceparent"]
    assert traceparent.split("-")[1] == CLIENT_TRACE
    assert traceparent.split("-")[2] == format(tool.context.span_id, "016x")
    assert record["trace_id"] == CLIENT_TRACE


async def test_without_a_provider_nothing_is_traced_or_propagated(pod: MediatedPod) -> None:
    pod.service.reply("/slow")
    pod.upstream.enqueue(
        "openai", Reply.json(oa_calls(("c1", "desk_slow", {}))), Reply.json(oa_text("done"))
    )
    client = pod.openai(default_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    (record,) = await pod.wait_for_audit(1)
    assert "traceparent" not in pod.service.requests[0].headers
    assert "trace_id" not in record


def test_export_is_configured_only_when_the_endpoint_is_set() -> None:
    assert tracing.configure_tracing({}) is False
    try:
        assert tracing.configure_tracing({tracing.ENDPOINT_ENV: "http://127.0.0.1:4318"}) is True
    finally:
        tracing.use_provider(None)
