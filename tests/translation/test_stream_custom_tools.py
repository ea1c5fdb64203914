"""A Responses caller's ``custom`` tools (contract §18, docs/translation.md) across a
streamed translation: the call a provider of another protocol makes to one comes back live
as the ``custom_tool_call`` item the caller offered, its input the one string."""

from __future__ import annotations

import pytest

from tests.translation.conftest import MODEL, TranslatingPod
from tests.translation.streams import stream_reply

PATCH = '*** Begin Patch\n*** Add File: a.txt\n+hi "there"\n*** End Patch\n'
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
}


@pytest.mark.parametrize("target", ["chat", "messages"])
async def test_a_custom_tool_call_comes_back_as_the_custom_call_codex_offered(
    translating_pod: TranslatingPod, target: str
) -> None:
    """Codex's apply_patch is a Responses ``custom`` tool: it reaches the provider as a
    function of one string, and its call streams back to Codex as a ``custom_tool_call``."""
    pod = translating_pod
    pod.script(target, stream_reply(target, [], [("call_p", "apply_patch", {"input": PATCH})]))
    async with pod.openai("plain") as client:
        events = await client.responses.create(
            model=MODEL[target], input="Add a.txt", tools=[APPLY_PATCH], stream=True
        )
        done = [e.item async for e in events if e.type == "response.output_item.done"]
    (item,) = done
    assert (item.type, item.call_id, item.name, item.input) == (
        "custom_tool_call",
        "call_p",
        "apply_patch",
        PATCH,
    )
    (sent,) = pod.sent(target)
    assert "apply_patch" in str(sent["tools"])


@pytest.mark.parametrize("target", ["chat", "messages"])
async def test_a_namespaced_call_streams_back_with_its_namespace(
    translating_pod: TranslatingPod, target: str
) -> None:
    """Codex offers its sub-agents (and MCP servers' tools) in a ``namespace``: a provider of
    another protocol sees flat functions, and the call streams back naming both parts."""
    pod = translating_pod
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "wait_agent", "parameters": {"type": "object"}}],
    }
    flat = "multi_agent_v1__wait_agent"
    pod.script(target, stream_reply(target, [], [("call_w", flat, {"ids": ["a1"]})]))
    async with pod.openai("plain") as client:
        events = await client.responses.create(
            model=MODEL[target], input="wait", tools=[namespace], stream=True
        )
        seen = [e async for e in events]
    added = [e.item.to_dict() for e in seen if e.type == "response.output_item.added"]
    done = [e.item.to_dict() for e in seen if e.type == "response.output_item.done"]
    for item in (*added, *done):
        assert (item["namespace"], item["name"], item["call_id"]) == (
            "multi_agent_v1",
            "wait_agent",
            "call_w",
        )
    assert done[0]["arguments"] == '{"ids":["a1"]}'
    (sent,) = pod.sent(target)
    assert flat in str(sent["tools"])
