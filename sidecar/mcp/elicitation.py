"""Approvals the MCP client's user answers (SPEC §16), in each era's own way.

- 2025-11-25 (sessions): a client that declared the ``elicitation`` capability at
  ``initialize`` is asked with an ``elicitation/create`` request on the SSE stream of its
  ``tools/call``; it answers by POSTing the JSON-RPC response on its session, and the call goes
  on (or is refused) in the same stream.
- 2026-07-28 (stateless): a client that declares ``elicitation`` in the request's
  ``io.modelcontextprotocol/clientCapabilities`` gets an ``input_required`` result whose
  ``inputRequests`` holds the same ``elicitation/create`` request under the approval's id, and
  ``requestState`` the same id. It retries the same ``tools/call`` (same name and arguments)
  with ``inputResponses: {<id>: <ElicitResult>}`` and the echoed ``requestState``; the
  official Python client does this itself.

The question is a form with one boolean, ``approve``; the call runs only when the user accepts
with ``approve: true``. Any other answer (decline, cancel, ``false``, an error) rejects it; no
answer (in time, or before the sidecar stops) leaves it unanswered. Clients that declare
neither get the operator's approval.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..manifest import ManagedTool
from ..model.client_approval import (
    ClientAnswer,
    ClientApproval,
    requested_approval,
    unanswered,
)
from ..model.conversation import ToolOutcome
from .http import sse_event
from .protocol import CallToolParams, Message

ELICIT = "elicitation/create"
APPROVE = "approve"
ASK_ID_PREFIX = "clawpod-approval-"

Send = Callable[[bytes], Awaitable[bool]]


def can_elicit(capabilities: Any) -> bool:
    """The client renders form elicitations (an empty ``elicitation`` object means form, as
    before modes were named)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    if not isinstance(elicitation, dict):
        return False
    return "form" in elicitation or "url" not in elicitation


def elicitation_params(tool: ManagedTool, arguments: dict[str, Any]) -> dict[str, Any]:
    """A boolean confirm form naming the tool and its exact arguments."""
    shown = orjson.dumps(arguments).decode()
    return {
        "mode": "form",
        "message": f"Allow the call {tool.presented} with arguments {shown}?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                APPROVE: {
                    "type": "boolean",
                    "title": f"Run {tool.presented}",
                    "description": f"{tool.presented} {shown}",
                }
            },
            "required": [APPROVE],
        },
    }


def answer_of(approval_id: str, result: Any) -> ClientAnswer:
    """The user's ``ElicitResult`` as an answer: approved only on accept with approve true."""
    action = result.get("action") if isinstance(result, dict) else None
    content = result.get("content") if isinstance(result, dict) else None
    approve = action == "accept" and isinstance(content, dict) and content.get(APPROVE) is True
    if approve:
        reason = None
    elif action == "accept":  # the form was submitted with the call not approved
        reason = "the user did not approve it"
    else:
        reason = f"the user answered {action or 'nothing usable'}"
    return ClientAnswer(approval_id, approve, reason)


# --- the stateless era ------------------------------------------------------------------------


def input_required(approval_id: str, tool: ManagedTool, arguments: dict[str, Any]) -> dict:
    request = {"method": ELICIT, "params": elicitation_params(tool, arguments)}
    return {
        "resultType": "input_required",
        "inputRequests": {approval_id: request},
        "requestState": approval_id,
    }


def retry_answer(params: CallToolParams) -> ClientAnswer | None:
    """The answer a retried ``tools/call`` carries (``inputResponses`` under the echoed
    ``requestState``); None for a first call."""
    extra = params.model_extra or {}
    state = extra.get("requestState")
    responses = extra.get("inputResponses")
    if not isinstance(state, str) or not isinstance(responses, dict):
        return None
    return answer_of(state, responses.get(state))


# --- the session era --------------------------------------------------------------------------


@dataclass(slots=True)
class ApprovalChannel:
    """How the client of one ``tools/call`` can answer an approval: on its SSE stream
    (``send``, session era) or by retrying (stateless)."""

    stateless: bool
    session_id: str | None = None
    send: Send | None = None
    ask: Callable[[str, dict[str, Any]], Awaitable[Any]] | None = None
    """A task's own way to ask (SPEC §22): the question waits in the task, ``input_required``,
    for the client's ``tasks/update`` (the approval's id, the question; the answer)."""


@dataclass(slots=True)
class Elicitations:
    """Questions sent to session clients, waiting for the responses they POST."""

    _waiting: dict[tuple[str, str], asyncio.Future[Any]] = field(default_factory=dict)
    _stopping: bool = False

    async def ask(
        self, channel: ApprovalChannel, params: dict[str, Any], timeout_s: float
    ) -> Any | None:
        """The client's result (an error response is a result without content); None when it
        does not answer in time, its stream is gone or the sidecar is stopping."""
        if channel.session_id is None or channel.send is None or self._stopping:
            return None
        request_id = ASK_ID_PREFIX + secrets.token_urlsafe(12)
        key = (channel.session_id, request_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        message = {"jsonrpc": "2.0", "id": request_id, "method": ELICIT, "params": params}
        try:
            if not await channel.send(sse_event(orjson.dumps(message))):
                return None
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(future, timeout_s)
            return None
        finally:
            self._waiting.pop(key, None)

    async def run(
        self,
        execute: Callable[[ClientApproval | None], Awaitable[ToolOutcome]],
        channel: ApprovalChannel | None,
        tool: ManagedTool,
        params: CallToolParams,
        timeout_s: float,
    ) -> ToolOutcome:
        """One governed ``tools/call`` (``execute``, given what the client can answer): a
        stateless retry brings its answer; a session client is asked on its stream and the
        call is made again with the answer (or not at all without one)."""
        if channel is None:
            return await execute(None)
        if channel.stateless:
            return await execute(ClientApproval(None, retry_answer(params)))
        outcome = await execute(ClientApproval(None))
        asked = requested_approval(outcome)
        if asked is None:
            return outcome
        question = elicitation_params(tool, params.arguments or {})
        if channel.ask is not None:
            try:
                result = await asyncio.wait_for(channel.ask(asked, question), timeout_s)
            except TimeoutError:
                result = None
        else:
            result = await self.ask(channel, question, timeout_s)
        if result is None:
            return unanswered(asked)
        return await execute(ClientApproval(None, answer_of(asked, result)))

    def stop(self) -> None:
        """Release every question: a sidecar shutting down does not wait for users."""
        self._stopping = True
        for future in self._waiting.values():
            if not future.done():
                future.set_result(None)

    def deliver(self, session_id: str, message: Message) -> None:
        """A response POSTed on a session: it answers only that session's own question."""
        future = self._waiting.get((session_id, str(message.id)))
        if future is not None and not future.done():
            future.set_result(message.result)
