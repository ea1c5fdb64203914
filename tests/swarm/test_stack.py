"""The example pod deployed as a Swarm stack on a single-node swarm (SPEC §13.3): the mediated
call, the native order held for an operator and approved, isolation of the agents, and a
``docker stack rm`` that leaves nothing behind."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from tests.docker.pod import MEDIATED_AGENT, NATIVE_AGENT, SIDECAR, TOOL_SERVICES, UPSTREAM
from tests.docker.test_pod import QUESTION, _tool_data
from tests.swarm.stack import ORDER, ORDERS_MODEL, ORDERS_UPSTREAM, STACK_GUARD_S, Stack

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(600)]
APPROVAL_GUARD_S = 60  # a deadlock guard, not a timing


def test_compile_warns_what_swarm_cannot_enforce(stack: Stack) -> None:
    assert "Swarm has no per-service egress rule" in stack.warnings


def test_mediated_call_through_the_stack(stack: Stack) -> None:
    reply = stack.chat(MEDIATED_AGENT, [QUESTION])
    envelope = _tool_data(reply["content"])
    assert envelope["ok"] is True and envelope["data"]["agent"] == MEDIATED_AGENT, envelope
    records = stack.audit(MEDIATED_AGENT)
    assert records[-1]["outcome"]["status"] == "ok"
    assert records[-1]["instance"]  # the sidecar task's host name


def test_native_order_is_held_then_approved_by_the_operator(stack: Stack) -> None:
    order = {"symbol": "NVDA", "side": "buy", "quantity": 10}
    outcome: dict[str, Any] = {}

    def call() -> None:
        outcome.update(
            stack.probe(
                NATIVE_AGENT, "mcp_native", "/claw/mcp.json", "execute_trade", json.dumps(order)
            )
        )

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + APPROVAL_GUARD_S
    pending: list[dict[str, Any]] = []
    while not pending and time.monotonic() < deadline:
        pending = stack.operator("GET", "/operator/approvals")["approvals"]
        time.sleep(0.5)
    assert len(pending) == 1, pending
    assert pending[0]["agent"] == NATIVE_AGENT and pending[0]["arguments"] == order
    assert caller.is_alive()  # the order waits for the operator
    stack.operator("POST", f"/operator/approvals/{pending[0]['id']}", {"decision": "approve"})
    caller.join(APPROVAL_GUARD_S)
    assert not caller.is_alive()
    result = outcome["result"]
    assert not result.get("isError"), result
    trade = json.loads(result["content"][0]["text"])["data"]
    assert trade["symbol"] == "NVDA" and trade["status"] == "filled"


def test_agent_reaches_neither_tool_services_nor_the_operator_port(stack: Stack) -> None:
    targets = [f"{name}:{port}" for name, port in TOOL_SERVICES.items()]
    targets += [f"{UPSTREAM}:8000", f"{SIDECAR}:9090", "claw-sidecar-admin:9090"]
    targets += [f"{address}:9090" for address in stack.addresses(SIDECAR)]
    from_agent = stack.reach(MEDIATED_AGENT, targets)
    for target in targets:
        assert not from_agent[target]["connected"], from_agent[target]
    assert stack.reach(MEDIATED_AGENT, [f"{SIDECAR}:8080"])[f"{SIDECAR}:8080"]["connected"]
    from_sidecar = stack.reach(SIDECAR, [f"{n}:{p}" for n, p in TOOL_SERVICES.items()])
    assert all(r["connected"] for r in from_sidecar.values()), from_sidecar


def test_a_killed_sidecar_task_resumes_the_identical_retry_and_orders_once(
    stack: Stack,
) -> None:
    messages = [{"role": "user", "content": "Buy one NVDA."}]
    before = stack.container(SIDECAR)
    orders_before = len(stack.trades())  # the native test's order
    failed: dict[str, Any] = {}

    def ask() -> None:
        try:
            stack.probe(MEDIATED_AGENT, "chat", ORDERS_MODEL, json.dumps(messages))
        except AssertionError as exc:  # the sidecar dies under it
            failed["error"] = str(exc)

    first = threading.Thread(target=ask)
    first.start()
    # The order has run and the model's answer is pending: kill the sidecar's task there.
    deadline = time.monotonic() + APPROVAL_GUARD_S
    while time.monotonic() < deadline:
        if any(r["roles"][-1:] == ["tool"] for r in stack.upstream_log(ORDERS_UPSTREAM)):
            break
        time.sleep(0.2)
    assert len(stack.trades()) == orders_before + 1
    before.kill()
    first.join(APPROVAL_GUARD_S)
    assert "error" in failed
    stack.wait_healthy(SIDECAR, STACK_GUARD_S)
    assert stack.container(SIDECAR).id != before.id  # Swarm started a new task
    seen = len(stack.upstream_log(ORDERS_UPSTREAM))

    reply = stack.probe(MEDIATED_AGENT, "chat", ORDERS_MODEL, json.dumps(messages))

    trade = _tool_data(reply["content"])["data"]
    assert trade["symbol"] == ORDER["symbol"] and trade["status"] == "filled"
    # The retry reused the journaled order: the service recorded it once.
    assert len(stack.trades()) == orders_before + 1
    (resumed,) = stack.upstream_log(ORDERS_UPSTREAM)[seen:]
    assert resumed["roles"] == ["user", "assistant", "tool"]  # the model only answered


def test_stack_rm_leaves_nothing_behind(stack: Stack) -> None:
    assert stack.remove() == []
