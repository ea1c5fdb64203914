"""What the sidecar remembers for a request is its end user's (SPEC §21): one end user replaying
another's conversation through the same agent gets none of the other's hidden tool rounds (their
results may be the other's data), and cannot continue the other's stored responses."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.identity.conftest import DoorPod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support import responses as r
from tests.support.upstream import Reply

PROMPT = {"role": "user", "content": "What is in my portfolio?"}


async def ask(door: DoorPod, user: str, messages: list[dict[str, Any]]) -> Any:
    client = door.openai(door.tokens["analyst"], end_user=door.user_token(user))
    return await client.chat.completions.create(model="gpt-4o", messages=messages)


def tool_results_sent(door: DoorPod) -> list[str]:
    """The tool results the last model call carried (hidden rounds put back among them)."""
    sent = door.upstream.requests_to("openai")[-1].json["messages"]
    return [m["tool_call_id"] for m in sent if m["role"] == "tool"]


async def test_another_end_user_replaying_a_conversation_gets_none_of_its_hidden_rounds(
    door: DoorPod,
) -> None:
    lookup = Reply.json(oa_calls(("alices-call", "desk_quote", {"symbol": "AAPL"})))
    door.upstream.enqueue("openai", lookup, Reply.json(oa_text("You hold 10 AAPL.")))
    answer = await ask(door, "alice", [PROMPT])
    echoed = answer.choices[0].message.model_dump(exclude_none=True)
    replay = [PROMPT, echoed, {"role": "user", "content": "And what is it worth?"}]

    door.upstream.enqueue("openai", Reply.json(oa_text("no idea")))
    await ask(door, "bob", replay)
    assert tool_results_sent(door) == []  # alice's quote never reaches bob's model call

    door.upstream.enqueue("openai", Reply.json(oa_text("about 2000 USD")))
    await ask(door, "alice", replay)
    assert tool_results_sent(door) == ["alices-call"]  # her own round comes back


async def test_another_end_user_cannot_continue_a_stored_response(door: DoorPod) -> None:
    def client(user: str) -> Any:
        return door.openai(door.tokens["native"], end_user=door.user_token(user))

    made = r.reply(r.response(r.message("your balance is 10"), response_id="resp_alice"))
    door.upstream.enqueue("responses", made)
    await client("alice").responses.create(model="gpt-4o", input="my balance?")

    seen = len(door.upstream.received)
    with pytest.raises(openai.NotFoundError) as caught:
        await client("bob").responses.create(
            model="gpt-4o", input="go on", previous_response_id="resp_alice"
        )
    assert caught.value.body["code"] == "response_not_found"
    assert len(door.upstream.received) == seen  # nothing reached the provider

    door.upstream.enqueue("responses", r.reply(r.response(r.message("ok"), response_id="resp_2")))
    await client("alice").responses.create(
        model="gpt-4o", input="go on", previous_response_id="resp_alice"
    )
