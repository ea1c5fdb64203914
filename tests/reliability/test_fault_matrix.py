"""Upstream fault matrix: every fault x client kind x phase x protocol is one test.

In every cell the client gets a protocol-shaped error (the SDK understands it) with the right
status and code, the sidecar answers the next request correctly, no task or connection is
left behind, and every tool call that reached the service is in the audit.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from aiohttp import web

from tests.reliability.harness import Pod, Stall, assert_no_leaks, snapshot, start_pod, stop_pod
from tests.reliability.wire import Api, Seen, ask, sse_error_event, sse_events, text, tool_call
from tests.support.upstream import RESET, Reply

pytestmark = pytest.mark.asyncio(loop_scope="module")

FAULTS = (
    "refused",
    "reset",
    "stall",
    "rate_limited",
    "server_error",
    "overloaded",
    "non_json",
    "truncated_sse",
    "sse_error",
)
PHASES = ("pass-through", "first-round", "later-round")
CLIENTS = ("json", "stream")
APIS: tuple[Api, ...] = ("openai", "anthropic")
_prompts = itertools.count()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pod(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pod]:
    running = await start_pod(tmp_path_factory.mktemp("faults"))
    try:
        for api in APIS:  # warm the pools and the audit writer before counting tasks
            running.upstream.enqueue(api, Reply.json(text(api, "warm")))
            assert (await ask(running, api, "plain", "warm up", stream=False)).answer == "warm"
        await assert_no_leaks(running, snapshot(running).tasks)
        yield running
    finally:
        await stop_pod(running)


@dataclass(frozen=True)
class Expected:
    status: int | None  # None: an in-band stream error after a 200
    code: str | None  # our error code; None when the provider's own error is relayed


def expected(fault: str, phase: str, client: str) -> Expected:
    streaming = client == "stream"
    if phase == "pass-through":
        relayed = {"rate_limited": 429, "server_error": 500, "overloaded": 529}
        if fault in relayed:
            return Expected(relayed[fault], None)
        if fault == "refused":
            return Expected(502, "upstream_unreachable")
        if fault == "non_json":
            return Expected(502, "upstream_protocol_error")
        if fault == "stall":
            return (
                Expected(None, "upstream_timeout")
                if streaming
                else Expected(504, "upstream_timeout")
            )
        if fault == "sse_error":
            return Expected(None, None) if streaming else Expected(502, "upstream_protocol_error")
        return (
            Expected(None, "upstream_protocol_error")
            if streaming
            else Expected(502, "upstream_protocol_error")
        )
    codes = {
        "refused": (502, "upstream_unreachable"),
        "reset": (502, "upstream_protocol_error"),
        "stall": (504, "upstream_timeout"),
        "rate_limited": (429, "upstream_error"),
        "server_error": (502, "upstream_error"),
        "overloaded": (502, "upstream_error"),
        "non_json": (502, "upstream_protocol_error"),
        "truncated_sse": (502, "upstream_protocol_error"),
        "sse_error": (502, "upstream_protocol_error"),
    }
    status, code = codes[fault]
    # Mediated streaming clients get 200 + SSE headers at once; errors come in-band.
    return Expected(None if streaming else status, code)


def faulty_reply(pod: Pod, api: Api, fault: str, upstream_streams: bool) -> Reply | None:
    """The upstream's faulty answer (None: the fault is a refused connection)."""
    events = sse_events(api, "never complete")
    if fault == "refused":
        return None
    if fault == "reset":
        if upstream_streams:
            return Reply.sse([events[0], RESET])
        return Reply(chunks=[b'{"id": "chatcmpl-x", "choi', RESET])
    if fault == "stall":
        if upstream_streams:
            return Reply.sse([events[0], pod.upstream.release])
        return Stall()
    if fault == "rate_limited":
        reply = Reply.error(api, 429, "Rate limit reached", type="rate_limit_error")
        reply.headers["retry-after"] = "7"
        return reply
    if fault == "server_error":
        return Reply.error(api, 500, "The server had an error")
    if fault == "overloaded":
        return Reply.error(api, 529, "Overloaded", type="overloaded_error")
    if fault == "non_json":
        return Reply.garbage()
    if fault == "truncated_sse":
        return Reply.sse(events[:2])
    return Reply.sse([events[0], sse_error_event(api)])


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("fault", FAULTS)
async def test_upstream_fault(pod: Pod, fault: str, phase: str, client: str, api: Api) -> None:
    baseline = snapshot(pod).tasks
    agent = "plain" if phase == "pass-through" else "analyst"
    streaming = client == "stream"
    audit_before = len(pod.audit(agent))
    calls_before = len(pod.service.requests)
    symbol = f"S{next(_prompts)}"
    if phase == "later-round":
        pod.upstream.enqueue(api, Reply.json(tool_call(api, "desk_quote", {"symbol": symbol})))
    reply = faulty_reply(pod, api, fault, upstream_streams=streaming and phase == "pass-through")
    if reply is not None:
        pod.upstream.enqueue(api, reply)
    elif phase == "later-round":

        async def refuse_before_answering(_request: web.Request) -> None:
            await pod.upstream.refuse()

        pod.service.before = refuse_before_answering
    else:
        await pod.upstream.refuse()

    seen = await ask(pod, api, agent, f"quote {symbol}", stream=streaming)

    want = expected(fault, phase, client)
    assert seen.answer is None, f"a fault became an answer: {seen}"
    assert (seen.status, seen.code) == (want.status, want.code), seen
    assert seen.message, "the error says nothing"
    if fault == "rate_limited" and not streaming:
        assert seen.retry_after == "7"  # the provider's back-off reaches the client
    await assert_no_leaks(pod, baseline)
    if fault == "refused":
        await pod.upstream.resume()

    # The audit has the failed request, with the tool call that reached the service.
    records = await pod.wait_for_audit(agent, audit_before + 1)
    failed = records[audit_before]
    assert failed["outcome"]["status"] == "error"
    executed = [c for r in failed.get("tool_trace") or [] for c in r["calls"] if c["executed"]]
    reached = pod.service.requests[calls_before:]
    assert len(executed) == len(reached) == (1 if phase == "later-round" else 0)
    if reached:
        assert reached[0].path == f"/quotes/{symbol}"
        assert executed[0]["name"] == "desk.quote"

    await assert_healthy(pod, api, agent, streaming, baseline)


async def assert_healthy(pod: Pod, api: Api, agent: str, streaming: bool, baseline: int) -> None:
    """The next request of the same kind gets the right answer."""
    assert (await pod.get("/healthz"))[0] == 200
    assert (await pod.get("/metrics"))[0] == 200
    answer = f"recovered {next(_prompts)}"
    if agent == "plain":
        upstream = (
            Reply.sse(sse_events(api, answer)) if streaming else Reply.json(text(api, answer))
        )
        pod.upstream.enqueue(api, upstream)
    else:
        call = tool_call(api, "desk_quote", {"symbol": "OK"})
        pod.upstream.enqueue(api, Reply.json(call), Reply.json(text(api, answer)))
    seen: Seen = await ask(pod, api, agent, f"again {answer}", stream=streaming)
    assert seen.answer == answer, seen
    assert pod.upstream.pending(api) == 0
    await assert_no_leaks(pod, baseline)
