"""What the model sees for each kind of call result (docs/contract.md §4.2 points 3, 8 and 16)."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest

from clawpod.sidecar.execution.executor import CallLimits, ToolExecutor
from clawpod.sidecar.manifest import ToolAuth
from clawpod.sidecar.model.conversation import CheckedCall, ToolOutcome, refused
from clawpod.sidecar.observability.metrics import Metrics
from tests.support.builds import http_tool
from tests.support.services import ToolService
from tests.support.tool_calls import run_tool

TRADE_SCHEMA = {
    "type": "object",
    "properties": {
        "symbol": {"type": "string", "minLength": 1},
        "side": {"enum": ["buy", "sell"]},
        "quantity": {"type": "number", "exclusiveMinimum": 0},
        "legs": {"type": "array", "items": {"type": "object", "required": ["price"]}},
    },
    "required": ["symbol", "side", "quantity"],
    "additionalProperties": False,
}


async def call(executor: ToolExecutor, tool, arguments=None, *, timeout_s=5.0, limit=65536):
    return await run_tool(
        executor, "analyst", tool, arguments, timeout_s=timeout_s, max_result_bytes=limit
    )


async def test_success_envelope_carries_parsed_json(
    executor: ToolExecutor, service: ToolService
) -> None:
    service.reply(json={"positions": [{"symbol": "AAPL", "qty": 3}]})
    outcome = await call(executor, http_tool("svc", "positions", service.url))
    assert outcome.envelope == {
        "ok": True,
        "status": 200,
        "data": {"positions": [{"symbol": "AAPL", "qty": 3}]},
    }
    assert (outcome.ok, outcome.error_code, outcome.status, outcome.executed) == (
        True,
        None,
        200,
        True,
    )
    assert orjson.loads(outcome.envelope_json()) == outcome.envelope
    assert outcome.latency_ms > 0


async def test_invalid_json_arguments_are_not_executed(
    executor: ToolExecutor, service: ToolService
) -> None:
    tool = http_tool("svc", "trade", service.url, method="POST", schema=TRADE_SCHEMA)
    outcome = await call(executor, tool, '{"symbol": "AAPL", "side": "buy", quantity: 1}')
    assert outcome.error_code == "invalid_arguments"
    assert "not valid JSON" in outcome.envelope["error"]["message"]
    assert "line 1 column" in outcome.envelope["error"]["message"]
    assert not outcome.executed and outcome.status is None
    assert service.requests == []


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "42", "null"])
async def test_arguments_must_be_an_object(
    executor: ToolExecutor, service: ToolService, arguments: str
) -> None:
    tool = http_tool("svc", "trade", service.url, method="POST", schema=TRADE_SCHEMA)
    outcome = await call(executor, tool, arguments)
    assert outcome.error_code == "invalid_arguments"
    assert "must be a JSON object" in outcome.envelope["error"]["message"]
    assert service.requests == []


async def test_schema_violations_are_all_reported_with_their_paths(
    executor: ToolExecutor, service: ToolService
) -> None:
    tool = http_tool("svc", "trade", service.url, method="POST", schema=TRADE_SCHEMA)
    arguments = '{"symbol": "", "side": "hold", "quantity": -1, "legs": [{}], "extra": 1}'
    outcome = await call(executor, tool, arguments)
    message = outcome.envelope["error"]["message"]
    assert outcome.error_code == "invalid_arguments"
    for fragment in (
        "$.symbol",
        "$.side",
        "$.quantity",
        "$.legs[0]",
        "'price'",
        "'extra'",
        "svc_trade",
    ):
        assert fragment in message, message
    assert service.requests == []


def arguments_of(checked: CheckedCall | ToolOutcome) -> dict:
    assert isinstance(checked, CheckedCall), checked
    return checked.arguments


def test_the_check_returns_the_parsed_dict(executor: ToolExecutor) -> None:
    tool = http_tool("svc", "trade", "http://svc", method="POST", schema=TRADE_SCHEMA)
    checked = executor.check(tool, '{"quantity": 2, "symbol": "A", "side": "buy"}', "call_1")
    assert arguments_of(checked) == {"symbol": "A", "side": "buy", "quantity": 2}
    assert isinstance(checked, CheckedCall)
    assert (checked.tool, checked.call_id) == (tool, "call_1")
    assert checked.canonical == b'{"quantity":2,"side":"buy","symbol":"A"}'
    assert arguments_of(executor.check(http_tool("svc", "ctx", "http://svc"), None)) == {}
    assert arguments_of(executor.check(http_tool("svc", "ctx", "http://svc"), "  ")) == {}


async def test_format_keywords_are_checked(executor: ToolExecutor) -> None:
    schema = {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}}
    tool = http_tool("svc", "report", "http://svc", schema=schema)
    outcome = executor.check(tool, {"day": "yesterday"})
    assert isinstance(outcome, ToolOutcome) and outcome.error_code == "invalid_arguments"
    assert arguments_of(executor.check(tool, {"day": "2026-11-22"})) == {"day": "2026-11-22"}


@pytest.mark.parametrize("status", [400, 404, 409, 500, 503])
async def test_service_errors_become_http_codes_with_the_body(
    executor: ToolExecutor, service: ToolService, status: int
) -> None:
    service.reply(status=status, json={"detail": "insufficient buying power"})
    outcome = await call(executor, http_tool("svc", "trade", service.url, method="POST"), {})
    assert outcome.error_code == f"http_{status}"
    assert outcome.envelope["ok"] is False
    assert outcome.envelope["status"] == status == outcome.status
    assert outcome.envelope["error"]["code"] == f"http_{status}"
    assert outcome.envelope["data"] == {"detail": "insufficient buying power"}
    assert outcome.executed


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirects_are_not_followed(
    executor: ToolExecutor, service: ToolService, status: int
) -> None:
    async with ToolService() as elsewhere:
        service.reply(status=status, redirect_to=f"{elsewhere.url}/steal")
        outcome = await call(executor, http_tool("svc", "trade", service.url, method="POST"), {})
        assert outcome.error_code == f"http_{status}"
        assert "redirect" in outcome.envelope["error"]["message"]
        assert elsewhere.url not in outcome.envelope_json()
        assert elsewhere.requests == []
    assert len(service.requests) == 1


async def test_text_body_is_returned_as_text(executor: ToolExecutor, service: ToolService) -> None:
    service.reply(text="market closed", content_type="text/plain")
    outcome = await call(executor, http_tool("svc", "status", service.url))
    assert outcome.envelope == {"ok": True, "status": 200, "data": "market closed"}


async def test_empty_body_is_null_data(executor: ToolExecutor, service: ToolService) -> None:
    service.reply(status=204, body=b"")
    outcome = await call(executor, http_tool("svc", "cancel", service.url, method="DELETE"))
    assert outcome.envelope == {"ok": True, "status": 204, "data": None}


async def test_broken_json_and_binary_bodies_are_invalid_responses(
    executor: ToolExecutor, service: ToolService
) -> None:
    service.reply("/broken", text='{"a": ', content_type="application/json")
    service.reply("/binary", body=b"\x89PNG\r\n\x1a\n\xff\xfe", content_type="image/png")
    broken = await call(executor, http_tool("svc", "broken", service.url))
    binary = await call(executor, http_tool("svc", "binary", service.url))
    assert broken.error_code == binary.error_code == "invalid_response"
    assert broken.status == binary.status == 200
    assert "invalid JSON" in broken.envelope["error"]["message"]
    assert "binary" in binary.envelope["error"]["message"]


async def test_large_bodies_are_cut_and_report_their_real_size(
    executor: ToolExecutor, service: ToolService
) -> None:
    service.reply(size=1_000_003)
    outcome = await call(executor, http_tool("svc", "dump", service.url), limit=4096)
    assert outcome.ok
    assert outcome.truncated and outcome.original_bytes == 1_000_003
    assert outcome.envelope["truncated"] is True
    assert outcome.envelope["original_bytes"] == 1_000_003
    data = outcome.envelope["data"]
    assert isinstance(data, str) and len(data.encode()) == 4096 and data.startswith('"xxx')


async def test_cut_never_splits_a_character(executor: ToolExecutor, service: ToolService) -> None:
    service.reply(text="é" * 100, content_type="text/plain")
    outcome = await call(executor, http_tool("svc", "dump", service.url), limit=51)
    assert outcome.truncated and outcome.original_bytes == 200
    assert outcome.envelope["data"] == "é" * 25


async def test_body_at_the_limit_is_whole(executor: ToolExecutor, service: ToolService) -> None:
    service.reply(text="x" * 64, content_type="text/plain")
    outcome = await call(executor, http_tool("svc", "dump", service.url), limit=64)
    assert not outcome.truncated and outcome.original_bytes is None
    assert outcome.envelope == {"ok": True, "status": 200, "data": "x" * 64}


async def test_slow_service_times_out(executor: ToolExecutor, service: ToolService) -> None:
    service.reply(delay_s=1)  # past the 0.2 s timeout; teardown waits for it
    outcome = await call(executor, http_tool("svc", "slow", service.url), timeout_s=0.2)
    assert outcome.error_code == "timeout"
    assert outcome.executed  # the request went out; the service may have acted on it
    assert outcome.status is None
    assert "0.2 s" in outcome.envelope["error"]["message"]


async def test_unreachable_service_does_not_leak_its_address(executor: ToolExecutor) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = await call(executor, http_tool("svc", "gone", f"http://127.0.0.1:{port}"))
    assert outcome.error_code == "unreachable"
    assert not outcome.executed and outcome.status is None
    assert str(port) not in outcome.envelope_json()
    assert "127.0.0.1" not in outcome.envelope_json()


async def test_a_sent_call_completes_when_the_caller_is_cancelled(
    executor: ToolExecutor, service: ToolService
) -> None:
    service.reply(delay_s=0.3)
    tool = http_tool("svc", "trade", service.url, method="POST")
    caller = asyncio.create_task(call(executor, tool, {"symbol": "AAPL"}))
    while not service.requests:
        await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert service.completed == 0
    await executor.close()  # waits for calls already sent
    assert service.completed == 1


def test_metrics_count_calls_by_outcome_and_time_only_executed_ones() -> None:
    metrics = Metrics()
    metrics.count_tool_call("svc.trade", refused("invalid_arguments", "bad"))
    executed = ToolOutcome(
        envelope={"ok": True}, error_code=None, status=200, executed=True, latency_ms=5.0
    )
    metrics.count_tool_call("svc.trade", executed)
    metrics.count_tool_call("svc.trade", executed)

    def sample(name: str, labels: dict[str, str]) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    calls = "claw_tool_calls_total"
    assert sample(calls, {"tool": "svc.trade", "outcome": "invalid_arguments"}) == 1
    assert sample(calls, {"tool": "svc.trade", "outcome": "ok"}) == 2
    assert sample("claw_tool_latency_seconds_count", {"tool": "svc.trade"}) == 2
    body, content_type = metrics.render()
    assert b"claw_tool_latency_seconds_bucket" in body and content_type.startswith("text/plain")


def test_refused_outcome_is_an_unexecuted_error() -> None:
    outcome = refused("duplicate_call", "identical call already made in this request")
    assert outcome.envelope == {
        "ok": False,
        "error": {
            "code": "duplicate_call",
            "message": "identical call already made in this request",
        },
        "status": None,
    }
    assert (outcome.ok, outcome.executed, outcome.status) == (False, False, None)


async def test_a_checked_call_runs_the_tool_it_was_checked_for(
    executor: ToolExecutor, service: ToolService
) -> None:
    trade = http_tool("svc", "trade", service.url, method="POST", schema=TRADE_SCHEMA)
    checked = executor.check(trade, '{"symbol": "A", "side": "buy", "quantity": 1}', "c1")
    assert isinstance(checked, CheckedCall) and checked.tool is trade
    assert (await executor.execute("analyst", checked, CallLimits(5.0, 65536))).ok
    assert service.requests[0].path == "/trade"
    assert service.requests[0].json() == {"symbol": "A", "side": "buy", "quantity": 1}


def test_repeated_argument_text_gives_independent_results(executor: ToolExecutor) -> None:
    tool = http_tool("svc", "trade", "http://svc", method="POST", schema=TRADE_SCHEMA)
    text = '{"symbol": "A", "side": "buy", "quantity": 1}'
    first = arguments_of(executor.check(tool, text, "a"))
    first["quantity"] = 99  # a caller changing its copy does not change what is remembered
    again = executor.check(tool, text, "b")
    assert arguments_of(again) == {"symbol": "A", "side": "buy", "quantity": 1}
    assert isinstance(again, CheckedCall) and again.arguments is not first
    assert again.call_id == "b"  # remembered work, this call's own id
    other = http_tool(
        "svc", "other", "http://svc", method="POST", schema={"type": "object", "maxProperties": 1}
    )
    refusal = executor.check(other, text)
    assert isinstance(refusal, ToolOutcome) and refusal.error_code == "invalid_arguments"


def test_one_callers_change_to_nested_arguments_never_reaches_the_next_caller(
    executor: ToolExecutor,
) -> None:
    """The check remembers valid texts; a caller (another agent's request) that changes what it
    got, nested values too, must not change what the next identical call is given."""
    tool = http_tool("svc", "trade", "http://svc", method="POST", schema=TRADE_SCHEMA)
    text = '{"symbol": "A", "side": "buy", "quantity": 1, "legs": [{"price": 1}]}'
    first = arguments_of(executor.check(tool, text, "a"))
    first["legs"][0]["price"] = 1_000_000
    first["legs"].append({"price": 2})
    again = arguments_of(executor.check(tool, text, "b"))
    assert again["legs"] == [{"price": 1}]


async def test_a_dropped_connection_after_sending_counts_as_executed(
    executor: ToolExecutor, service: ToolService
) -> None:
    service.reply(drop=True)
    outcome = await call(executor, http_tool("svc", "trade", service.url, method="POST"), {})
    assert outcome.error_code == "unreachable"
    assert outcome.executed  # the service got the request and may have acted on it
    assert len(service.requests) == 1


async def test_unresolvable_service_host_is_unreachable_without_naming_it(
    executor: ToolExecutor,
) -> None:
    tool = http_tool("svc", "gone", "http://no-such-service.invalid:4000")
    outcome = await call(executor, tool)
    assert outcome.error_code == "unreachable" and not outcome.executed
    assert "no-such-service" not in outcome.envelope_json()


async def test_a_credential_cut_by_truncation_shows_no_part_of_itself(
    executor: ToolExecutor, service: ToolService, env: dict[str, str]
) -> None:
    secret = env["SVC_TOKEN"]
    service.reply(text="x" * 60 + secret + " and more", content_type="text/plain")
    tool = http_tool("svc", "echo", service.url, auth=ToolAuth(type="bearer", env="SVC_TOKEN"))
    outcome = await call(executor, tool, limit=64)
    assert outcome.truncated
    assert outcome.envelope["data"].startswith("x" * 60)
    assert secret[:4] not in outcome.envelope_json()
