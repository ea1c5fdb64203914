"""The Codex CLI's freeform tools (Responses ``custom`` tools such as apply_patch) reach a
Chat-only model as functions of one string, and its calls come back as ``custom_tool_call``
items the runner executes (contract §18, docs/translation.md)."""

from __future__ import annotations

import orjson

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

    pod.script("chat", Reply.json(oa_calls()))  # any answer; the request is what is checked
    follow_up = [
        {"role": "user", "content": "fix it"},
        {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
    ]
    async with pod.openai("plain") as client:
        await client.responses.create(
            model=MODEL["chat"], input=follow_up, tools=[APPLY_PATCH], store=False
        )
    sent = pod.sent("chat")[-1]
    assistant = next(m for m in sent["messages"] if m["role"] == "assistant")
    arguments = assistant["tool_calls"][0]["function"]["arguments"]
    assert orjson.loads(arguments) == {"input": PATCH}
    result = next(m for m in sent["messages"] if m["role"] == "tool")
    assert (result["tool_call_id"], result["content"]) == ("call_p", "Done!")
