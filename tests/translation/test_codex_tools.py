"""The Codex CLI's freeform tools (Responses ``custom`` tools such as apply_patch) reach a
Chat-only model as functions of one string, and its calls come back as ``custom_tool_call``
items the runner executes (contract §18, docs/translation.md)."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from tests.mediation.scripted import oa_calls
from tests.support.upstream import Reply
from tests.translation.conftest import MODEL, TranslatingPod

APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}
PATCH = "*** Begin Patch\n*** End Patch"


async def follow_up_sent(
    pod: TranslatingPod, follow_up: list[dict[str, Any]], tool: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A runner's next request, echoing its tool's call and result: the Chat request the
    server got, and its assistant turn."""
    pod.script("chat", Reply.json(oa_calls()))  # any answer; the request is what is checked
    async with pod.openai("plain") as client:
        await client.responses.create(
            model=MODEL["chat"], input=follow_up, tools=[tool], store=False
        )
    sent = pod.sent("chat")[-1]
    return sent, next(m for m in sent["messages"] if m["role"] == "assistant")


async def test_a_custom_tool_round_trips_through_a_chat_server(
    translating_pod: TranslatingPod,
) -> None:
    pod = translating_pod
    pod.script("chat", Reply.json(oa_calls(("call_p", "apply_patch", {"input": PATCH}))))
    async with pod.openai("analyst") as client:
        answer = await client.responses.create(
            model=MODEL["chat"], input="fix it", tools=[APPLY_PATCH], store=False
        )
    (call,) = [i for i in answer.output if i.type == "custom_tool_call"]
    assert (call.call_id, call.name, call.input) == ("call_p", "apply_patch", PATCH)
    (sent,) = pod.sent("chat")
    offered = next(t["function"] for t in sent["tools"] if t["function"]["name"] == "apply_patch")
    assert offered["parameters"]["required"] == ["input"]
    assert 'start: "*** Begin Patch"' in offered["description"]
    assert pod.service.requests == []  # the runner's tool: handed back, never run here

    follow_up = [
        {"role": "user", "content": "fix it"},
        {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
    ]
    sent, assistant = await follow_up_sent(pod, follow_up, APPLY_PATCH)
    arguments = assistant["tool_calls"][0]["function"]["arguments"]
    assert orjson.loads(arguments) == {"input": PATCH}
    result = next(m for m in sent["messages"] if m["role"] == "tool")
    assert (result["tool_call_id"], result["content"]) == ("call_p", "Done!")


# Codex's default offer (0.169): its sub-agent tools in a Responses `namespace` (its MCP servers'
# tools come the same way), and a provider-run web search in its cached mode.
SUB_AGENTS = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "close_agent",
            "description": "Close an agent.",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {"target": {"type": "string"}},
                "required": ["target"],
                "additionalProperties": False,
            },
        }
    ],
}
WEB_SEARCH = {"type": "web_search", "external_web_access": False}
FLAT = "multi_agent_v1__close_agent"


async def test_a_namespaced_tool_round_trips_through_a_chat_server(
    translating_pod: TranslatingPod,
) -> None:
    """A namespace's function is offered as one flat function; the model's call of it comes
    back naming the namespace and the function's own name, as Codex offered it."""
    pod = translating_pod
    pod.script("chat", Reply.json(oa_calls(("call_n", FLAT, {"target": "a1"}))))
    async with pod.openai("analyst") as client:
        answer = await client.responses.create(
            model=MODEL["chat"], input="close a1", tools=[SUB_AGENTS, WEB_SEARCH], store=False
        )
    (call,) = [i.to_dict() for i in answer.output if i.type == "function_call"]
    assert (call["namespace"], call["name"], call["call_id"]) == (
        "multi_agent_v1",
        "close_agent",
        "call_n",
    )
    assert orjson.loads(call["arguments"]) == {"target": "a1"}
    (sent,) = pod.sent("chat")
    offered = next(t["function"] for t in sent["tools"] if t["function"]["name"] == FLAT)
    assert offered["description"].startswith("Tools for spawning and managing sub-agents.")
    assert offered["parameters"]["required"] == ["target"]
    assert "web_search" not in str(sent["tools"])  # left out: a Chat server cannot run it
    assert pod.service.requests == []  # the runner's tool: handed back, never run here

    follow_up = [
        {"role": "user", "content": "close a1"},
        {
            "type": "function_call",
            "call_id": "call_n",
            "namespace": "multi_agent_v1",
            "name": "close_agent",
            "arguments": '{"target":"a1"}',
        },
        {"type": "function_call_output", "call_id": "call_n", "output": "closed"},
    ]
    _, assistant = await follow_up_sent(pod, follow_up, SUB_AGENTS)
    assert assistant["tool_calls"][0]["function"]["name"] == FLAT


async def test_a_dropped_web_search_is_named_in_the_audit_record(
    translating_pod: TranslatingPod,
) -> None:
    pod = translating_pod
    pod.script("chat", Reply.json(oa_calls()))
    async with pod.openai("plain") as client:
        await client.responses.create(
            model=MODEL["chat"], input="hi", tools=[WEB_SEARCH], store=False
        )
    (sent,) = pod.sent("chat")
    assert "tools" not in sent or sent["tools"] == []
    translation = next(r["translation"] for r in pod.audit("plain") if r.get("translation"))
    assert "tools[0] (web_search)" in translation["dropped"]


async def test_a_namespaced_name_that_collides_with_a_function_is_refused(
    translating_pod: TranslatingPod,
) -> None:
    pod = translating_pod
    clash = {"type": "function", "name": FLAT, "parameters": {"type": "object"}}
    async with pod.openai("plain") as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(
                model=MODEL["chat"], input="hi", tools=[SUB_AGENTS, clash], store=False
            )
    assert raised.value.body["code"] == "untranslatable_request"
    assert FLAT in raised.value.body["message"]
    assert pod.sent("chat") == []
