"""Long tool lists on ``/mcp`` (SPEC §23): ``tools/list`` in pages, and ``claw_tool_search``
offered beside the agent's tools when it has more than a page of them or defers some.

The search is the one mediated mode uses (``model/tool_search.py``), over the tools the agent
is offered now; its results carry each tool's input schema, since an MCP client has no next
round in which the sidecar could offer them.
"""

from __future__ import annotations

from typing import Any

from ..manifest import AgentBuild, ManagedTool
from ..model.conversation import ToolOutcome, refused
from ..model.tool_search import (
    SEARCH_SCHEMA,
    SEARCH_TOOL,
    index_of,
    read_request,
)

PAGE_SIZE = 100
"""Tools per ``tools/list`` page."""
_CURSOR_PREFIX = "claw-page-"
MCP_SEARCH_DESCRIPTION = (
    "Find tools by what they do, among this agent's many tools: describe the task in a few "
    "words and the best-matching tools are returned with their input schemas."
)


def offers_search(agent: AgentBuild) -> bool:
    """Whether the listing leads with ``claw_tool_search``: a list longer than a page, or an
    agent with deferred tools; never when a granted tool already has that name."""
    tools = agent.tools.tools
    wanted = len(tools) > PAGE_SIZE or bool(agent.agent.deferred)
    return wanted and all(tool.presented != SEARCH_TOOL for tool in tools)


def search_listing_entry() -> dict[str, Any]:
    return {
        "name": SEARCH_TOOL,
        "description": MCP_SEARCH_DESCRIPTION,
        "inputSchema": SEARCH_SCHEMA,
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    }


def page(
    listing: list[dict[str, Any]], cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """The page of ``listing`` that ``cursor`` names (None: the first) and the next page's
    cursor (None after the last); a cursor this server did not hand out is a ValueError."""
    start = 0
    if cursor is not None:
        number = cursor.removeprefix(_CURSOR_PREFIX)
        if number == cursor or not number.isdigit() or len(number) > 9:
            raise ValueError("unknown cursor")
        start = int(number) * PAGE_SIZE
        if start == 0 or start >= len(listing):
            raise ValueError("unknown cursor")
    end = start + PAGE_SIZE
    following = f"{_CURSOR_PREFIX}{end // PAGE_SIZE}" if end < len(listing) else None
    return listing[start:end], following


def answer_search(tools: list[ManagedTool], arguments: Any) -> ToolOutcome:
    """A search over ``tools`` (the agent's offered tools): the best matches, each with its
    name, description and input schema."""
    request = read_request(arguments if arguments is not None else {})
    if isinstance(request, str):
        return refused("invalid_arguments", request)
    found = index_of(tools).search(request.query, request.limit)
    matches = [
        {"name": t.presented, "description": t.description, "inputSchema": t.input_schema}
        for t in found
    ]
    envelope = {"ok": True, "status": None, "data": {"tools": matches}}
    return ToolOutcome(envelope, None, None, executed=False, latency_ms=0.0)
