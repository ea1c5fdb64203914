"""A client approval (``approver: client``, SPEC §16) of a call made as a 2026-07-28 task
(SEP-2663, §22): the task shows ``input_required`` with the approval's question under its id,
and the client's ``tasks/update`` answers it; the official MCP client drives it through its
extension interface (``tests/support/mcp_tasks_client.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.execution.client_desk import TRADE, ClientDesk, desk
from tests.support.mcp_tasks_client import Tasks

__all__ = ["desk"]  # the fixture


class User:
    """Answers each question put to it in the task; never asked any other way."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def in_task(self, key: str, request: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((key, request))
        return {"action": "accept", "content": {"approve": self.approve}}

    async def elicit(self, context: Any, params: Any) -> Any:
        raise AssertionError("a task's question is answered with tasks/update, not elicited")


@asynccontextmanager
async def trader(desk: ClientDesk, user: User, tasks: Tasks) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {desk.tokens['trader']}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(
            streamable_http_client(desk.sidecar.url + "/mcp", http_client=http),
            mode="auto",
            elicitation_callback=user.elicit,
            extensions=[tasks],
        ) as client,
    ):
        yield client


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_the_user_answers_a_tasks_question_with_tasks_update(
    desk: ClientDesk, approve: bool
) -> None:
    user = User(approve)
    tasks = Tasks(answer=user.in_task)
    async with trader(desk, user, tasks) as client:
        result = await client.call_tool("desk_execute_trade", TRADE)
    [(key, question)] = user.asked
    assert key.startswith("apr_") and question["method"] == "elicitation/create"
    assert "desk_execute_trade" in question["params"]["message"]
    held = [s for s in tasks.seen if s["status"] == "input_required"]
    assert held and key in held[0]["statusMessage"] and key in held[0]["inputRequests"]
    if approve:
        assert result.is_error is False
        assert [(q.method, q.path) for q in desk.service.requests] == [("POST", "/trades")]
    else:
        assert result.structured_content["error"]["code"] == "approval_denied"
        assert desk.service.requests == []
    [decided] = desk.events("approval_decided", "trader")
    assert decided["who"] == "client"
