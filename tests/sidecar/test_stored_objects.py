"""Stored Responses objects are bound to the agent the provider made them for: another agent,
holding the id, cannot read, continue, cancel or delete them (all agents share one provider
key, so only the sidecar can tell them apart). Driven by the real openai SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from clawpod.sidecar.model.end_user import EndUser, owner_of
from clawpod.sidecar.state.stored_objects import OWNERS_FILE, StoredObjects, StoredRef
from tests.sidecar.conftest import Pod, PodFactory
from tests.support import responses as r
from tests.support.builds import AgentSpec
from tests.support.sidecar import audit_records_when, start_sidecar

AGENTS = [AgentSpec("alice", mode="native"), AgentSpec("bob", mode="native")]


@pytest.fixture
async def pod(make_pod: PodFactory) -> Pod:
    return await make_pod(agents=AGENTS)


def client(pod: Pod, agent: str) -> openai.AsyncOpenAI:
    return pod.openai(token=pod.tokens[agent])


async def records_of(pod: Pod, agent: str, count: int) -> list[dict[str, Any]]:
    return await audit_records_when(pod.state_dir, agent, count)


async def alice_creates(pod: Pod, response_id: str, *, stream: bool = False) -> None:
    pod.upstream.enqueue(
        "responses", r.reply(r.response(r.message("mine"), response_id=response_id), stream=stream)
    )
    alice = client(pod, "alice")
    if stream:
        async with alice.responses.stream(model="gpt-4o", input="hi") as events:
            assert (await events.get_final_response()).id == response_id
    else:
        assert (await alice.responses.create(model="gpt-4o", input="hi")).id == response_id


async def every_use_is_refused(pod: Pod, agent: str, response_id: str) -> None:
    """Read, continue, cancel, delete and list the input of ``response_id`` as ``agent``: each
    a 404 in the Responses shape, and nothing reaches the provider."""
    seen = len(pod.upstream.received)
    other = client(pod, agent)
    attempts = [
        other.responses.retrieve(response_id),
        other.responses.create(model="gpt-4o", input="go on", previous_response_id=response_id),
        other.responses.cancel(response_id),
        other.responses.delete(response_id),
        other.responses.input_items.list(response_id),
        other.responses.input_tokens.count(
            model="gpt-4o", input="x", previous_response_id=response_id
        ),
    ]
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as caught:
            await attempt
        assert caught.value.body["code"] == "response_not_found"
        assert "was stored for this agent" in caught.value.body["message"]
    assert len(pod.upstream.received) == seen


@pytest.mark.parametrize("stream", [False, True])
async def test_another_agent_cannot_use_a_stored_response(pod: Pod, stream: bool) -> None:
    await alice_creates(pod, "resp_alice", stream=stream)
    await every_use_is_refused(pod, "bob", "resp_alice")
    # The owner still can.
    pod.upstream.enqueue("/v1/responses/resp_alice", r.reply(r.response(response_id="resp_alice")))
    pod.upstream.enqueue("responses", r.reply(r.response(r.message("more"), response_id="resp_2")))
    alice = client(pod, "alice")
    assert (await alice.responses.retrieve("resp_alice")).id == "resp_alice"
    await alice.responses.create(model="gpt-4o", input="more", previous_response_id="resp_alice")
    # The audit names the objects: made, used, refused.
    [made, *_] = await records_of(pod, "alice", 3)
    assert made["objects"] == [{"kind": "response", "id": "resp_alice", "use": "created"}]
    used = (await records_of(pod, "alice", 3))[2]
    assert {"kind": "response", "id": "resp_alice", "use": "referenced"} in used["objects"]
    refused = await records_of(pod, "bob", 6)
    assert all(
        rec["objects"] == [{"kind": "response", "id": "resp_alice", "use": "refused (foreign)"}]
        for rec in refused
    )
    assert all(rec["outcome"]["code"] == "response_not_found" for rec in refused)


async def test_an_id_nobody_was_given_is_refused_too(pod: Pod) -> None:
    await every_use_is_refused(pod, "alice", "resp_guessed")
    [first, *_] = await records_of(pod, "alice", 1)
    assert first["objects"][0]["use"] == "refused (unknown)"


async def test_a_deleted_response_is_forgotten(pod: Pod) -> None:
    await alice_creates(pod, "resp_gone")
    deleted = {"id": "resp_gone", "object": "response", "deleted": True}
    pod.upstream.enqueue("/v1/responses/resp_gone", r.Reply.json(deleted))
    alice = client(pod, "alice")
    await alice.responses.delete("resp_gone")
    with pytest.raises(openai.NotFoundError):
        await alice.responses.retrieve("resp_gone")


async def alice_creates_a_conversation(pod: Pod, conversation_id: str) -> None:
    """POST /v1/conversations through the sidecar, by the real SDK."""
    made = {"id": conversation_id, "object": "conversation", "created_at": 1, "metadata": {}}
    pod.upstream.enqueue("/v1/conversations", r.Reply.json(made))
    assert (await client(pod, "alice").conversations.create()).id == conversation_id


async def every_use_of_the_conversation_is_refused(pod: Pod, agent: str, conv: str) -> None:
    """Continue, read, update, delete and list or add items of ``conv`` as ``agent``: each a
    404 in the Responses shape, and nothing reaches the provider."""
    seen = len(pod.upstream.received)
    other = client(pod, agent)
    item = {"type": "message", "role": "user", "content": "x"}
    attempts = [
        other.responses.create(model="gpt-4o", input="hi", conversation=conv),
        other.responses.create(model="gpt-4o", input="hi", conversation={"id": conv}),
        other.conversations.retrieve(conv),
        other.conversations.update(conv, metadata={"k": "v"}),
        other.conversations.delete(conv),
        other.conversations.items.list(conv),
        other.conversations.items.create(conv, items=[item]),  # type: ignore[list-item]
        other.conversations.items.retrieve("msg_1", conversation_id=conv),
        other.conversations.items.delete("msg_1", conversation_id=conv),
    ]
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as caught:
            await attempt
        assert caught.value.body["code"] == "conversation_not_found"
    assert len(pod.upstream.received) == seen


async def test_a_conversation_belongs_to_the_agent_that_created_it(pod: Pod) -> None:
    await alice_creates_a_conversation(pod, "conv_alice")
    await every_use_of_the_conversation_is_refused(pod, "bob", "conv_alice")
    # Its creator uses it, and deleting one of its items keeps it hers.
    body = r.response(r.message("hi"), response_id="resp_c1", conversation={"id": "conv_alice"})
    pod.upstream.enqueue("responses", r.reply(body))
    alice = client(pod, "alice")
    await alice.responses.create(model="gpt-4o", input="hi", conversation="conv_alice")
    kept = {"id": "conv_alice", "object": "conversation", "created_at": 1, "metadata": {}}
    pod.upstream.enqueue("/v1/conversations/conv_alice/items/msg_1", r.Reply.json(kept))
    await alice.conversations.items.delete("msg_1", conversation_id="conv_alice")
    pod.upstream.enqueue("/v1/conversations/conv_alice", r.Reply.json(kept))
    assert (await alice.conversations.retrieve("conv_alice")).id == "conv_alice"
    # A conversation the provider names in an answer is bound too.
    named = r.response(r.message("x"), response_id="resp_c2", conversation={"id": "conv_new"})
    pod.upstream.enqueue("responses", r.reply(named, stream=True))
    async with alice.responses.stream(model="gpt-4o", input="x") as events:
        await events.get_final_response()
    with pytest.raises(openai.NotFoundError):
        await client(pod, "bob").responses.create(
            model="gpt-4o", input="x", conversation="conv_new"
        )


async def test_a_conversation_id_learnt_first_is_not_claimed(pod: Pod) -> None:
    """Bob learns the id of a conversation made for alice before she uses it: using it first
    does not make it his (it did: the first agent to use an unseen id held it)."""
    await every_use_of_the_conversation_is_refused(pod, "bob", "conv_made_outside")
    await alice_creates_a_conversation(pod, "conv_alice")
    await every_use_of_the_conversation_is_refused(pod, "bob", "conv_alice")
    [record, *_] = await records_of(pod, "bob", 1)
    assert record["objects"][0]["use"] == "refused (unknown)"


async def test_a_deleted_conversation_is_forgotten(pod: Pod) -> None:
    await alice_creates_a_conversation(pod, "conv_gone")
    deleted = {"id": "conv_gone", "object": "conversation.deleted", "deleted": True}
    pod.upstream.enqueue("/v1/conversations/conv_gone", r.Reply.json(deleted))
    alice = client(pod, "alice")
    await alice.conversations.delete("conv_gone")
    with pytest.raises(openai.NotFoundError):
        await alice.conversations.retrieve("conv_gone")


async def test_ownership_survives_a_restart(make_pod: PodFactory, tmp_path: Path) -> None:
    pod = await make_pod(agents=AGENTS)
    await alice_creates(pod, "resp_before_restart")
    await pod.sidecar.close()
    pod.sidecar = await start_sidecar(tmp_path / "build0", pod.state_dir)
    await every_use_is_refused(pod, "bob", "resp_before_restart")
    pod.upstream.enqueue(
        "/v1/responses/resp_before_restart", r.reply(r.response(response_id="resp_before_restart"))
    )
    retrieved = await client(pod, "alice").responses.retrieve("resp_before_restart")
    assert retrieved.id == "resp_before_restart"


def test_one_agents_flood_never_evicts_anothers_ids(tmp_path: Path) -> None:
    store = StoredObjects(tmp_path, max_per_agent=50)
    store.record("alice", [StoredRef("response", "resp_alice")])
    for n in range(500):  # bob creates conversations by the hundred
        store.record("bob", [StoredRef("conversation", f"conv_{n}")])
    assert store.owner(StoredRef("response", "resp_alice")) == "alice"
    assert store.owner(StoredRef("conversation", "conv_0")) is None  # bob's oldest went
    assert store.owner(StoredRef("conversation", "conv_499")) == "bob"
    assert store.refusal("bob", StoredRef("response", "resp_alice")) == "foreign"
    store.close()
    again = StoredObjects(tmp_path, max_per_agent=50)
    assert again.owner(StoredRef("response", "resp_alice")) == "alice"
    assert again.owner(StoredRef("conversation", "conv_499")) == "bob"
    again.close()


def test_the_file_is_compacted_and_a_torn_line_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("clawpod.sidecar.state.stored_objects.STALE_LINES", 20)
    store = StoredObjects(tmp_path, max_per_agent=5)
    for n in range(100):
        store.record("alice", [StoredRef("response", f"resp_{n}")])
    store.close()
    path = tmp_path / OWNERS_FILE
    assert len(path.read_text().splitlines()) < 40
    with path.open("ab") as file:
        file.write(b'{"a": "alice", "k": "resp')  # a crash mid-line
    again = StoredObjects(tmp_path, max_per_agent=5)
    assert again.owner(StoredRef("response", "resp_99")) == "alice"
    assert again.owner(StoredRef("response", "resp_90")) is None
    again.close()


def test_a_state_dir_that_cannot_be_written_fails_closed_after_restart(tmp_path: Path) -> None:
    (tmp_path / "objects").write_text("not a directory")  # every write fails (like a full disk)
    store = StoredObjects(tmp_path)
    store.record("alice", [StoredRef("response", "resp_1")])
    assert store.owner(StoredRef("response", "resp_1")) == "alice"  # held in memory
    store.close()
    assert StoredObjects(tmp_path).refusal("alice", StoredRef("response", "resp_1")) == "unknown"


def test_a_hostile_provider_cannot_hand_one_agents_id_to_another(tmp_path: Path) -> None:
    store = StoredObjects(tmp_path)
    store.record("alice", [StoredRef("response", "resp_shared")])
    # A provider (or a proxy before it) answering bob with alice's id does not give it to him.
    assert store.record("bob", [StoredRef("response", "resp_shared")]) == []
    assert store.refusal("bob", StoredRef("response", "resp_shared")) == "foreign"
    # Nor does an id too long to be one, which would only fill the file.
    assert store.record("bob", [StoredRef("response", "r" * 10_000)]) == []
    assert store.refusal("bob", StoredRef("conversation", "c" * 10_000)) == "unknown"
    store.close()


def test_an_agents_end_users_share_its_bound_and_keep_their_ids_through_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC §21: ids are an end user's within the agent; a flood of end users is still held to
    the agent's bound (not one bound each), and compaction keeps whose each id is."""
    monkeypatch.setattr("clawpod.sidecar.state.stored_objects.STALE_LINES", 20)
    user = EndUser("alice", "https://idp", 0.0, token="t")
    alices = owner_of("analyst", user)
    store = StoredObjects(tmp_path, max_per_agent=5)
    store.record("other", [StoredRef("response", "resp_other")])
    for n in range(100):
        store.record(alices, [StoredRef("response", f"resp_{n}")])
    store.record(owner_of("analyst", None), [StoredRef("response", "resp_agent")])
    store.close()
    again = StoredObjects(tmp_path, max_per_agent=5)
    assert again.refusal(alices, StoredRef("response", "resp_99")) is None
    assert again.refusal("analyst", StoredRef("response", "resp_99")) == "foreign"
    assert again.refusal(alices, StoredRef("response", "resp_agent")) == "foreign"
    assert again.owner(StoredRef("response", "resp_94")) is None  # the agent's bound: 5 ids
    assert again.owner(StoredRef("response", "resp_other")) == "other"
    again.close()
