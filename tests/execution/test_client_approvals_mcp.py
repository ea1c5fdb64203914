"""Approvals the native agent's user answers in MCP itself (SPEC §16), through the official MCP
Python client: ``elicitation/create`` in the 2025-11-25 session era, ``input_required`` in the
2026-07-28 stateless era, the operator's approval for clients that can do neither."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.execution.client_desk import TRADE, ClientDesk, desk
from tests.execution.test_client_approvals_responses import (
    PROMPT,
    approval_request,
    ask,
    script_trade,
)
from tests.execution.test_governance import OPERATOR_TOKEN
from tests.operators.console_client import ConsoleClient

Answer = types.ElicitResult | types.ErrorData
MODES = ["legacy", "auto"]  # the session era, the stateless era (found by server/discover)


__all__ = ["desk"]  # the fixture


class User:
    """The person behind the client's elicitation callback."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> Answer:
        self.asked.append(params)
        return self.answer


@asynccontextmanager
async def trader(desk: ClientDesk, mode: str, user: User | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {desk.tokens['trader']}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(
            streamable_http_client(desk.sidecar.url + "/mcp", http_client=http),
            mode=mode,
            elicitation_callback=user,
        ) as client,
    ):
        yield client


def accept(approve: bool = True) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"approve": approve})


@pytest.mark.parametrize("mode", MODES)
async def test_the_user_approves_in_the_client_and_the_call_runs(
    desk: ClientDesk, mode: str
) -> None:
    user = User(accept())
    async with trader(desk, mode, user) as client:
        result = await client.call_tool("desk_execute_trade", TRADE)
    assert result.is_error is False
    assert [(q.method, q.path) for q in desk.service.requests] == [("POST", "/trades")]
    [question] = user.asked
    assert "desk_execute_trade" in question.message and '"quantity":10' in question.message
    schema = question.requested_schema
    assert schema["properties"]["approve"]["type"] == "boolean"
    assert schema["required"] == ["approve"]
    [decided] = desk.events("approval_decided", "trader")
    assert (decided["decision"], decided["who"]) == ("approved", "client")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "answer",
    [accept(False), types.ElicitResult(action="decline"), types.ElicitResult(action="cancel")],
    ids=["approve-false", "decline", "cancel"],
)
async def test_anything_but_an_approval_rejects_the_call(
    desk: ClientDesk, mode: str, answer: types.ElicitResult
) -> None:
    async with trader(desk, mode, User(answer)) as client:
        result = await client.call_tool("desk_execute_trade", TRADE)
    assert result.is_error is True
    error = result.structured_content["error"]
    assert error["code"] == "approval_denied" and "rejected by the user" in error["message"]
    # The model is told what the user did: accepting the form without approving is no
    # "the user answered accept".
    assert "answered accept" not in error["message"]
    assert desk.service.requests == []


async def test_the_stateless_retry_shape(desk: ClientDesk) -> None:
    """What a 2026-07-28 client gets and sends back, driven by hand."""
    async with trader(desk, "auto", User(accept())) as client:
        asking = await client.session.call_tool(
            "desk_execute_trade", TRADE, allow_input_required=True
        )
        assert isinstance(asking, types.InputRequiredResult)
        [(key, request)] = asking.input_requests.items()
        assert key == asking.request_state and key.startswith("apr_")
        assert request.method == "elicitation/create"
        assert desk.service.requests == []
        done = await client.session.call_tool(
            "desk_execute_trade",
            TRADE,
            input_responses={key: accept()},
            request_state=asking.request_state,
        )
    assert done.is_error is False
    assert len(desk.service.requests) == 1


# --- the attacker's answers: refused, not executed, audited ----------------------------------


async def ask_stateless(desk: ClientDesk, arguments: dict[str, Any] = TRADE) -> str:
    async with trader(desk, "auto", User(accept())) as client:
        asking = await client.session.call_tool(
            "desk_execute_trade", arguments, allow_input_required=True
        )
    assert isinstance(asking, types.InputRequiredResult) and asking.request_state
    return asking.request_state


async def retry(
    desk: ClientDesk, state: str, arguments: dict[str, Any] = TRADE
) -> types.CallToolResult:
    async with trader(desk, "auto", User(accept())) as client:
        return await client.session.call_tool(
            "desk_execute_trade", arguments, input_responses={state: accept()}, request_state=state
        )


def refused(result: types.CallToolResult, code: str = "approval_invalid") -> str:
    assert result.is_error is True
    error = result.structured_content["error"]
    assert error["code"] == code
    return error["message"]


async def test_an_approval_for_other_arguments_is_refused(desk: ClientDesk) -> None:
    state = await ask_stateless(desk)
    message = refused(await retry(desk, state, {**TRADE, "quantity": 9000}))
    assert "approves another call" in message
    assert desk.service.requests == []
    [refusal] = desk.events("approval_answer_refused", "trader")
    assert refusal["approval"] == state and refusal["problem"] == "it approves another call"


async def test_a_used_approval_is_refused_the_second_time(desk: ClientDesk) -> None:
    state = await ask_stateless(desk)
    assert (await retry(desk, state)).is_error is False
    assert "already used" in refused(await retry(desk, state))
    assert len(desk.service.requests) == 1


async def test_a_forged_approval_is_refused(desk: ClientDesk) -> None:
    assert "no such approval" in refused(await retry(desk, "apr_" + "0" * 24))
    assert desk.service.requests == []


async def test_an_approval_asked_by_a_mediated_agent_is_refused(desk: ClientDesk) -> None:
    """Another agent's approval (a Responses one of the analyst) answered over MCP."""
    script_trade(desk)
    analysts = approval_request(await ask(desk, [PROMPT]))["id"]
    assert "no such approval" in refused(await retry(desk, analysts))
    assert desk.service.requests == []


async def test_an_operator_approval_cannot_be_answered_by_the_client(desk: ClientDesk) -> None:
    """A call held for the operator (a client without elicitation) stays the operator's."""
    async with trader(desk, "legacy", None) as client:
        waiting = asyncio.ensure_future(client.call_tool("desk_execute_trade", TRADE))
        approval = (await desk.pending())[0]
        assert approval["approver"] == "operator"
        assert "operator" in refused(await retry(desk, approval["id"]))
        assert desk.service.requests == []
        await desk.operator("POST", f"/operator/approvals/{approval['id']}", decision="approve")
        result = await waiting
    assert result.is_error is False
    assert len(desk.service.requests) == 1


async def test_the_operator_cannot_decide_a_client_approval(desk: ClientDesk) -> None:
    state = await ask_stateless(desk)
    status, body = await desk.operator("POST", f"/operator/approvals/{state}", decision="approve")
    assert status == 409 and "client" in body["error"]["message"]
    assert desk.service.requests == []


async def test_a_restart_between_question_and_answer_keeps_the_approval(desk: ClientDesk) -> None:
    state = await ask_stateless(desk)
    await desk.restart()
    assert (await retry(desk, state)).is_error is False
    assert len(desk.service.requests) == 1


async def test_an_answered_call_counts_once_against_its_rate(desk: ClientDesk) -> None:
    """The rule allows 3 trades a minute: asking and answering are one call, not two."""
    async with trader(desk, "auto", User(accept())) as client:
        results = [await client.call_tool("desk_execute_trade", TRADE) for _ in range(3)]
        over = await client.call_tool("desk_execute_trade", TRADE)
    assert [result.is_error for result in results] == [False] * 3
    assert len(desk.service.requests) == 3
    assert over.structured_content["error"]["code"] == "rate_limited"


async def test_a_session_client_that_never_answers_holds_neither_the_call_nor_the_shutdown(
    desk: ClientDesk,
) -> None:
    asked = asyncio.Event()
    never = asyncio.Event()

    async def silent_user(context: Any, params: types.ElicitRequestParams) -> Answer:
        asked.set()
        await never.wait()  # the user walked away
        return accept()

    async with trader(desk, "legacy", silent_user) as client:  # type: ignore[arg-type]
        calling = asyncio.ensure_future(client.call_tool("desk_execute_trade", TRADE))
        await asked.wait()
        await desk.sidecar.close()  # SIGTERM's path: the question is released at once
        try:
            result = await calling
        finally:
            never.set()
    assert result.structured_content["error"]["code"] == "approval_unanswered"
    assert desk.service.requests == []
    [approval] = desk.state_dir.joinpath("approvals").glob("*.json")  # left to expire
    assert '"status":"pending"' in approval.read_text()


async def test_the_console_lists_a_client_approval_without_deciding_it(desk: ClientDesk) -> None:
    state = await ask_stateless(desk)
    async with ConsoleClient(desk.sidecar.admin_url) as console:
        assert (await console.sign_in(OPERATOR_TOKEN))[0] == 303
        [listed] = await console.pending()
    assert listed["id"] == state
    assert "agent's user" in listed["html"] and 'value="approve"' not in listed["html"]


async def test_another_session_cannot_answer_the_question(desk: ClientDesk) -> None:
    """A forged "accept" POSTed on another session (even of the same agent) is not the answer:
    the user's own decline is."""
    forged: list[int] = []

    async def user(context: Any, params: types.ElicitRequestParams) -> Answer:
        forged.append(await post_on_a_new_session(desk, accepting=context.request_id))
        return types.ElicitResult(action="decline")

    async with trader(desk, "legacy", user) as client:  # type: ignore[arg-type]
        result = await client.call_tool("desk_execute_trade", TRADE)
    assert forged == [202]  # taken as a response, and answers nothing there
    assert result.structured_content["error"]["code"] == "approval_denied"
    assert desk.service.requests == []


async def post_on_a_new_session(desk: ClientDesk, accepting: Any) -> int:
    """Initialize a session of the same agent and POST an accepting answer to ``accepting``."""
    headers = {
        "Authorization": f"Bearer {desk.tokens['trader']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    url = desk.sidecar.url + "/mcp"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "attacker", "version": "1"},
        },
    }
    answer = {
        "jsonrpc": "2.0",
        "id": accepting,
        "result": {"action": "accept", "content": {"approve": True}},
    }
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(url, json=initialize) as response:
            session = response.headers["Mcp-Session-Id"]
        more = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        async with http.post(url, json=answer, headers=more) as response:
            return response.status


@pytest.mark.parametrize("desk", [300], indirect=True)
async def test_an_expired_approval_is_refused(desk: ClientDesk) -> None:
    state = await ask_stateless(desk)
    await asyncio.sleep(0.5)  # past timeout-ms (300 ms)
    refused(await retry(desk, state), "approval_expired")
    assert desk.service.requests == []
    assert [e["decision"] for e in desk.events("approval_decided", "trader")] == ["expired"]


async def test_an_answer_for_another_build_is_refused(desk: ClientDesk) -> None:
    state = await ask_stateless(desk)
    await desk.restart(reason="a new rule text makes a new build")
    assert "another build" in refused(await retry(desk, state))
    assert desk.service.requests == []
