"""The Responses API's approval items, for approvals the client answers (SPEC §16).

The sidecar asks with an ``mcp_approval_request`` output item (``id``: the approval's id,
``name``: the tool as presented, ``arguments``: the call's exact JSON text, ``server_label``:
``clawpod``) and reads the answer from an ``mcp_approval_response`` input item
(``approval_request_id``, ``approve``, optional ``reason``), OpenAI's shapes for hosted MCP
servers. A client names the sidecar as such a server to the OpenAI Agents SDK
(``HostedMCPTool`` with ``server_label: clawpod``): that declaration stands for the sidecar's
tools and never goes upstream. Only Responses has these items; Chat Completions and Messages
keep the operator's approval (docs/approvals.md).
"""

from __future__ import annotations

from typing import Any

from ...model.client_approval import SERVER_LABEL, ClientAnswer
from ...model.conversation import CodecError, ModelTurn

REQUEST = "mcp_approval_request"
RESPONSE = "mcp_approval_response"
# The sidecar's approval ids (state/approvals.py): an answer naming one is the sidecar's,
# whatever the client echoed before it; other answers belong to the provider's MCP servers.
APPROVAL_ID_PREFIX = "apr_"


def is_sidecar_tool(tool: dict[str, Any]) -> bool:
    """The client's declaration of the sidecar as a hosted MCP server."""
    return tool.get("type") == "mcp" and tool.get("server_label") == SERVER_LABEL


def request_item(approval_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": REQUEST,
        "id": approval_id,
        "name": name,
        "arguments": arguments,
        "server_label": SERVER_LABEL,
    }


def requested_id(item: dict[str, Any]) -> str | None:
    """The approval a sidecar's ``mcp_approval_request`` item asks about."""
    if item.get("type") == REQUEST and item.get("server_label") == SERVER_LABEL:
        return str(item.get("id") or "")
    return None


def is_sidecar_item(item: dict[str, Any]) -> bool:
    """One of the sidecar's approval requests, or the client's answer to one."""
    if requested_id(item) is not None:
        return True
    answered = item.get("approval_request_id")
    return (
        item.get("type") == RESPONSE
        and isinstance(answered, str)
        and answered.startswith(APPROVAL_ID_PREFIX)
    )


def check_answers(items: list[dict[str, Any]]) -> None:
    """Every ``mcp_approval_response`` of a request's input has the API's required fields."""
    for item in items:
        if item.get("type") != RESPONSE:
            continue
        if not isinstance(item.get("approval_request_id"), str):
            raise CodecError("input: mcp_approval_response needs an 'approval_request_id' string")
        if not isinstance(item.get("approve"), bool):
            raise CodecError("input: mcp_approval_response needs 'approve': true or false")


def answer_of(item: dict[str, Any], asked: set[str]) -> ClientAnswer | None:
    """The answer an ``mcp_approval_response`` item (checked by :func:`check_answers`) gives
    to one of the sidecar's approvals (``asked``: the ids its requests in this input carry);
    None for any other item."""
    if item.get("type") != RESPONSE:
        return None
    approval_id = str(item["approval_request_id"])
    if approval_id not in asked and not approval_id.startswith(APPROVAL_ID_PREFIX):
        return None
    reason = item.get("reason")
    return ClientAnswer(approval_id, item["approve"], reason if isinstance(reason, str) else None)


def asking_turn(turn: ModelTurn, asked: dict[str, tuple[str, str]]) -> ModelTurn:
    """The turn as the client sees it: each call waiting for the client (call id ->
    approval id, presented name) becomes an approval request in its place; the round's other
    calls, which the sidecar answered, stay hidden."""
    output: list[dict[str, Any]] = []
    for item in turn.body.get("output") or []:
        call_id = item.get("call_id") if item.get("type") == "function_call" else None
        if call_id is None:
            output.append(item)
        elif call_id in asked:
            approval_id, name = asked[call_id]
            output.append(request_item(approval_id, name, str(item.get("arguments") or "")))
    return ModelTurn([], turn.usage, {**turn.body, "output": output})
