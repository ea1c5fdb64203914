"""A tool call's path through execution and governance (issue 23): one argument check makes a
CheckedCall that the engine, the gate and the executor share; quarantine is filtered at offer
and refused once at call time; the gate and the executor are both ToolRunners."""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from clawpod.sidecar.execution.executor import ArgumentCheck, ToolExecutor, ToolRunner
from clawpod.sidecar.governance.gate import GovernedExecutor
from clawpod.sidecar.server.request.context import STATE_KEY
from tests.execution.test_governance import TRADE, Desk, ask_analyst, desk, trade

__all__ = ["desk"]  # the fixture, shared with the governance tests

# Longer than the check remembers, so each call is validated anew rather than recalled.
LONG_SYMBOL = "N" * 2000


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often arguments are checked and how often a schema validates them."""
    counts: Counter[str] = Counter()
    check, validate = ArgumentCheck.__call__, Draft202012Validator.iter_errors

    def counting_check(self: ArgumentCheck, *args: Any, **kwargs: Any) -> Any:
        counts["checks"] += 1
        return check(self, *args, **kwargs)

    def counting_validate(self: Draft202012Validator, *args: Any, **kwargs: Any) -> Any:
        counts["validations"] += 1
        return validate(self, *args, **kwargs)

    monkeypatch.setattr(ArgumentCheck, "__call__", counting_check)
    monkeypatch.setattr(Draft202012Validator, "iter_errors", counting_validate)
    return counts


async def test_a_mediated_call_checks_its_arguments_once(desk: Desk, counted: Counter) -> None:
    results = await ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": LONG_SYMBOL}))
    assert results[0]["ok"] is True
    assert counted == {"checks": 1, "validations": 1}


async def test_a_native_call_checks_its_arguments_once(desk: Desk, counted: Counter) -> None:
    quote = await trade(desk, {"symbol": LONG_SYMBOL}, tool="desk_get_quote")
    assert quote["ok"] is True
    assert counted == {"checks": 1, "validations": 1}


async def test_a_call_of_a_tool_quarantined_since_the_offer_asks_no_operator(desk: Desk) -> None:
    """The trader was offered execute_trade; its definition drifts before the call. The call is
    refused at once: no approval is created for a call that could not be made."""
    state = desk.sidecar.app[STATE_KEY]
    state.executor.quarantine.hold("desk.execute_trade", "definition changed")
    result = await asyncio.wait_for(trade(desk, TRADE), timeout=30)
    assert result["error"]["code"] == "tool_definition_changed"
    assert state.governed.approvals.listing(include_finished=True) == []
    assert desk.service.requests == []


async def test_a_tool_quarantined_while_its_call_waits_for_an_operator_is_refused(
    desk: Desk,
) -> None:
    asking = asyncio.ensure_future(ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "GME"})))
    [approval] = await desk.pending()
    desk.sidecar.app[STATE_KEY].executor.quarantine.hold("desk.get_quote", "definition changed")
    status, _ = await desk.operator(
        "POST", f"/operator/approvals/{approval['id']}", decision="approve", reason="ok"
    )
    assert status == 200
    results = await asking
    assert results[0]["error"]["code"] == "tool_definition_changed"
    assert desk.service.requests == []


def test_the_gate_and_the_executor_run_calls_with_one_signature() -> None:
    protocol = inspect.signature(ToolRunner.execute)
    for runner in (ToolExecutor, GovernedExecutor):
        assert ToolRunner in runner.__mro__
        parameters = list(inspect.signature(runner.execute).parameters.values())
        # The gate adds only keyword-only options (taint, deadline, before_send).
        shared = [p for p in parameters if p.kind is not p.KEYWORD_ONLY]
        positional = [p for p in protocol.parameters.values() if p.kind is not p.KEYWORD_ONLY]
        assert [p.name for p in shared] == [p.name for p in positional]
        # Both take the verified end user the same way (SPEC §21).
        assert "end_user" in inspect.signature(runner.execute).parameters
        assert all(p.default is not p.empty for p in parameters if p.kind is p.KEYWORD_ONLY)
