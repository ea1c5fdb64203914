"""The JSON-RPC 2.0 and MCP message shapes the endpoint speaks (tools only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..manifest import AgentBuild
from ..model.conversation import ToolOutcome

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# Newest first. Versions negotiated by the initialize handshake over Streamable HTTP.
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_VERSION = SUPPORTED_VERSIONS[0]
# Before this revision results had no structuredContent and JSON-RPC batches were allowed.
STRUCTURED_CONTENT_SINCE = "2025-06-18"
BATCHES_UNTIL = "2025-03-26"
# Tasks (SPEC §22): the capability of this revision; 2026-07-28 made them an extension.
TASKS_SINCE = "2025-11-25"
TASKS_CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
MCP_ANNOTATIONS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")

SERVER_INFO = {"name": "clawpod-sidecar", "version": "0.1.0"}


class JsonRpcError(Exception):
    def __init__(self, code: int, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id

    def response(self) -> dict[str, Any]:
        return error_response(self.request_id, self.code, self.message)


@dataclass(frozen=True, slots=True)
class Message:
    kind: Literal["request", "notification", "response"]
    id: Any
    method: str | None
    params: Any
    result: Any = None
    """A response's result (the client answering a request of this server)."""


def parse_body(raw: bytes) -> tuple[list[Message], bool]:
    """The messages of a POST body and whether it was a batch; raises :class:`JsonRpcError`."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise JsonRpcError(
            PARSE_ERROR, f"Parse error: body is not valid JSON ({exc.msg})"
        ) from None
    if isinstance(value, list):
        if not value:
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: empty batch")
        return [_message(item) for item in value], True
    return [_message(value)], False


def _message(value: Any) -> Message:
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        raise JsonRpcError(
            INVALID_REQUEST, 'Invalid Request: not a JSON-RPC 2.0 message ("jsonrpc": "2.0")'
        )
    has_id = "id" in value
    request_id = value.get("id")
    if has_id and not _valid_id(request_id):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    method = value.get("method")
    if method is None:
        if has_id and ("result" in value or "error" in value):
            return Message("response", request_id, None, None, value.get("result"))
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: no method", request_id)
    if not isinstance(method, str):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: method must be a string", request_id)
    params = value.get("params")
    if params is not None and not isinstance(params, dict | list):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: params must be an object", request_id)
    return Message("request" if has_id else "notification", request_id, method, params)


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def result_response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


# -- params ------------------------------------------------------------------------------------


class _Params(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


ParamsT = TypeVar("ParamsT", bound=_Params)


class InitializeParams(_Params):
    protocol_version: str = Field(alias="protocolVersion")
    capabilities: dict[str, Any]
    client_info: dict[str, Any] = Field(alias="clientInfo")


class CallToolParams(_Params):
    name: str
    arguments: dict[str, Any] | None = None


class ListToolsParams(_Params):
    cursor: str | None = None


class TaskParams(_Params):
    """``tasks/get``, ``tasks/result``, ``tasks/cancel``, ``tasks/update``."""

    task_id: str = Field(alias="taskId")


def parse_params(model: type[ParamsT], message: Message) -> ParamsT:
    try:
        return model.model_validate(message.params or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'params'}: {error['msg']}"
            for error in exc.errors()
        )
        raise JsonRpcError(
            INVALID_PARAMS, f"Invalid params for {message.method}: {problems}", message.id
        ) from None


def negotiate_version(requested: str) -> str:
    """The client's version when we speak it, else our latest (the client then decides)."""
    return requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION


def initialize_result(version: str, agent: AgentBuild) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
    if version >= TASKS_SINCE:
        capabilities["tasks"] = TASKS_CAPABILITY
    return {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": SERVER_INFO,
        "instructions": instructions(agent),
    }


def instructions(agent: AgentBuild) -> str:
    return (
        f"Tools granted to agent {agent.agent.id} by the pod operator. The sidecar runs each "
        "call against its service with the service's credentials; results are JSON envelopes "
        '{"ok", "status", "data"} or {"ok": false, "error": {"code", "message"}}.'
    )


def tool_listing(agent: AgentBuild) -> list[dict[str, Any]]:
    """The agent's granted tools as MCP ``Tool`` objects, under their presented names."""
    listing = []
    for tool in agent.tools.tools:
        entry: dict[str, Any] = {
            "name": tool.presented,
            "description": tool.description,
            "inputSchema": tool.input_schema,
        }
        annotations = {k: tool.annotations[k] for k in MCP_ANNOTATIONS if k in tool.annotations}
        if "title" in annotations:
            entry["title"] = annotations["title"]
        if annotations:
            entry["annotations"] = annotations
        listing.append(entry)
    return listing


def tool_result(outcome: ToolOutcome, version: str) -> dict[str, Any]:
    """A ``CallToolResult``: the envelope as text (what a model reads) and as structured content."""
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": outcome.envelope_json()}],
        "isError": not outcome.ok,
    }
    if version >= STRUCTURED_CONTENT_SINCE:
        result["structuredContent"] = outcome.envelope
    return result
