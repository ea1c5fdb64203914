"""The Vercel AI SDK's tool loop (ai 6 and 7, ``openai()``: Responses) as it was recorded
against a provider serving Chat Completions only (tests/fixtures/runners/recorded/), replayed:
its follow-up refers by ``item_reference`` to the ids the sidecar issued in its translated
answer; the sidecar resolves them (it translated 400 ``untranslatable_request`` before), the
hidden round comes back and the order runs once. A reference the sidecar never issued, and a
``previous_response_id``, are still refused with 400 (docs/translation.md)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from clawpod.sidecar.translation import translate_request
from tests.exactly_once.test_retry_identity import BUY
from tests.mediation.scripted import oa_text
from tests.support.upstream import Reply
from tests.translation.conftest import MODEL, TranslatingPod

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "runners" / "recorded"
LOOPS = sorted(RECORDED.glob("ai-*-loop-translated.json"))
NARRATION = "Let me do that."


def chat_call(call_id: str, name: str, arguments: Any) -> Reply:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    call["function"]["arguments"] = (
        arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    )
    message = {"role": "assistant", "content": NARRATION, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return Reply.json(
        {
            "id": f"chatcmpl_{call_id}",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL["chat"],
            "choices": [choice],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
        }
    )


async def post(pod: TranslatingPod, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """The status and the answer's output items (of its completed event when streamed)."""
    headers = {"Authorization": f"Bearer {pod.tokens['analyst']}"}
    url = pod.sidecar.openai_base_url + "/responses"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as got,
    ):
        raw = await got.read()
    if got.status != 200:
        return got.status, []
    if not body.get("stream"):
        return 200, orjson.loads(raw)["output"]
    events = [orjson.loads(line[6:]) for line in raw.splitlines() if line.startswith(b"data: {")]
    done = [e for e in events if e.get("type") == "response.completed"]
    return 200, done[-1]["response"]["output"]


def trades(pod: TranslatingPod) -> int:
    return sum(1 for request in pod.service.requests if request.path == "/trades")


@pytest.mark.parametrize("fixture", LOOPS, ids=[f.stem for f in LOOPS])
async def test_references_to_translated_answers_resolve(
    translating_pod: TranslatingPod, fixture: Path
) -> None:
    pod = translating_pod
    exchanges = orjson.loads(fixture.read_bytes())["exchanges"]
    first, follow_up = (copy.deepcopy(exchanges[i]["request"]) for i in (0, -1))
    for body in (first, follow_up):
        body["model"] = MODEL["chat"]
    note = next(item for item in follow_up["input"] if item.get("type") == "function_call")
    pod.script("chat", chat_call("call_2", "desk_trade", BUY))
    pod.script("chat", chat_call(note["call_id"], note["name"], note["arguments"]))
    status, output = await post(pod, first)
    assert status == 200 and trades(pod) == 1
    # The ids this sidecar issued now, where the recording has those it issued then.
    issued = iter(item["id"] for item in output if item["type"] == "message")
    for item in follow_up["input"]:
        if item.get("type") == "item_reference":
            item["id"] = next(issued)
    pod.script("chat", Reply.json(oa_text("Done.")))
    status, _ = await post(pod, follow_up)
    assert status == 200
    resent = pod.sent("chat")[-1]["messages"]
    assert any(m.get("tool_call_id") == "call_2" for m in resent)  # the hidden round is back
    assert any(m.get("content") == NARRATION for m in resent if m["role"] == "assistant")
    assert trades(pod) == 1


@pytest.mark.parametrize(
    "item",
    [{"type": "item_reference", "id": "msg_never_issued"}],
    ids=["unknown-reference"],
)
async def test_a_reference_the_sidecar_never_issued_is_refused(
    translating_pod: TranslatingPod, item: dict[str, Any]
) -> None:
    body = {"model": MODEL["chat"], "input": [{"role": "user", "content": "Hi"}, item]}
    status, _ = await post(translating_pod, body)
    assert status == 400
    assert translating_pod.service.requests == []


async def test_a_translated_previous_response_id_is_400(translating_pod: TranslatingPod) -> None:
    """docs/translation.md: a provider of another protocol stores nothing to continue from;
    an id this sidecar never gave (it was 404, from the stored-object check first)."""
    body = {"model": MODEL["chat"], "input": "Hi", "previous_response_id": "resp_unknown"}
    status, _ = await post(translating_pod, body)
    assert status == 400


CLAUDE_LOCAL = RECORDED / "claude-code-2.1.330-local-model-retry.json"


@pytest.mark.parametrize("target", ["chat", "responses"])
def test_claude_code_system_message_inside_messages_is_translated(target: str) -> None:
    """Claude Code 2.1.330 with ``--model local-qwen`` (not a Claude id) puts its environment
    in a ``system`` message after the first user turn: an instruction where it stands (it was
    refused: 400 on every request)."""
    for exchange in orjson.loads(CLAUDE_LOCAL.read_bytes())["exchanges"]:
        translated = translate_request(copy.deepcopy(exchange["request"]), "messages", target)
        items = translated.body["messages" if target == "chat" else "input"]
        instructions = [i for i in items if i.get("role") in ("system", "developer")]
        assert any("# Environment" in str(i["content"]) for i in instructions)
        assert items[0]["role"] in ("system", "developer", "user")
