"""docs/contract.md §4.2 point 14: hidden rounds come back in place, per conversation, after
restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.mediation.commands import Recall, Remember
from clawpod.sidecar.state.continuity import ContinuityStore
from clawpod.sidecar.state.journal import request_identity
from tests.mediation.scripted import (
    agent,
    calls,
    drive,
    engine_for,
    messages_field,
    request,
    text,
)
from tests.support.codecs import EVERY_API, codec_of

APIS = EVERY_API


def echo(api: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The final answer as a runner sends it back (SDK objects dumped, extra null fields; a
    Responses runner that keeps its own history sends the output items back)."""
    if api == "openai":
        message = dict(body["choices"][0]["message"])
        message.setdefault("refusal", None)
        return [message]
    if api == "responses":
        return list(body["output"])
    return [{"role": "assistant", "content": body["content"]}]


def own_history(api: str, prompt: str = "What is AAPL at?", **extra: Any) -> dict[str, Any]:
    """A request of a runner that sends the whole conversation (in Responses: no provider-held
    responses, so the rounds the runner never saw are the sidecar's to put back)."""
    return request(api, prompt, **({"store": False} if api == "responses" else {}), **extra)


def first_turn(api: str, store: ContinuityStore, prompt: str, build: Any = None) -> dict:
    body = own_history(api, prompt)
    run = drive(
        engine_for(api, body, build),
        [calls(api, ("c1", "desk_lookup", {"symbol": prompt})), text(api, f"answer to {prompt}")],
        store=store,
    )
    return {"messages": body[messages_field(api)] + echo(api, run.response.body)}


def next_turn(
    api: str, store: ContinuityStore, history: dict, follow_up: str, build: Any = None
) -> list[dict[str, Any]]:
    body = own_history(api)
    body[messages_field(api)] = [*history["messages"], {"role": "user", "content": follow_up}]
    run = drive(engine_for(api, body, build), [text(api, "ok")], store=store)
    return run.upstream_bodies[0][messages_field(api)]


def hidden_ids(api: str, messages: list[dict[str, Any]]) -> list[str]:
    """Tool-call ids of assistant turns the runner never saw."""
    ids = []
    for message in messages:
        if api == "responses":
            ids += [message["call_id"]] if message.get("type") == "function_call" else []
        elif api == "openai":
            ids += [c["id"] for c in message.get("tool_calls") or []]
        elif isinstance(message["content"], list):
            ids += [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
    return ids


@pytest.mark.parametrize("api", APIS)
def test_hidden_rounds_are_reinserted_before_the_answer_they_led_to(
    api: str, tmp_path: Path
) -> None:
    store = ContinuityStore(tmp_path)
    history = first_turn(api, store, "AAPL")
    messages = next_turn(api, store, history, "and MSFT?")
    roles = [m.get("role") or m["type"] for m in messages]
    if api == "openai":
        assert roles == ["user", "assistant", "tool", "assistant", "user"]
    elif api == "responses":
        assert roles == ["user", "function_call", "function_call_output", "assistant", "user"]
    else:
        assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert hidden_ids(api, messages) == ["c1"]
    assert messages[3] == history["messages"][1]


@pytest.mark.parametrize("api", APIS)
def test_whitespace_and_key_order_do_not_change_the_conversation(api: str, tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    history = first_turn(api, store, "AAPL")
    answer = history["messages"][1]
    reordered = dict(reversed(list(answer.items())))
    if api == "openai":
        reordered["content"] = "  answer   to\nAAPL "
    elif api == "responses":
        reordered = {"content": "answer to  AAPL\n", "role": "assistant"}  # a plain message
    else:
        reordered["content"] = "answer to  AAPL\n"  # a string instead of one text block
    history["messages"][1] = reordered
    history["messages"][0] = {"content": "  AAPL\n", "role": "user"}
    assert hidden_ids(api, next_turn(api, store, history, "more")) == ["c1"]


@pytest.mark.parametrize("api", APIS)
def test_concurrent_conversations_of_one_agent_never_mix(api: str, tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    one = first_turn(api, store, "AAPL")
    two = first_turn(api, store, "MSFT")
    one_next = next_turn(api, store, one, "next")
    two_next = next_turn(api, store, two, "next")
    assert "AAPL" in str(one_next) and "MSFT" not in str(one_next)
    assert "MSFT" in str(two_next) and "AAPL" not in str(two_next)


@pytest.mark.parametrize("api", APIS)
def test_agents_never_see_each_others_rounds(api: str, tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    history = first_turn(api, store, "AAPL", agent(agent_id="alpha"))
    assert hidden_ids(api, next_turn(api, store, history, "x", agent(agent_id="beta"))) == []
    assert hidden_ids(api, next_turn(api, store, history, "x", agent(agent_id="alpha"))) == ["c1"]


@pytest.mark.parametrize("api", APIS)
def test_rounds_survive_a_restart(api: str, tmp_path: Path) -> None:
    history = first_turn(api, ContinuityStore(tmp_path), "AAPL")
    restarted = ContinuityStore(tmp_path)
    assert hidden_ids(api, next_turn(api, restarted, history, "again")) == ["c1"]


@pytest.mark.parametrize("api", APIS)
def test_rounds_before_a_handoff_to_runner_tools_come_back(api: str, tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    body = own_history(api)
    local = {"type": "object", "properties": {}}
    body["tools"] = [
        {
            "openai": {"type": "function", "function": {"name": "notify", "parameters": local}},
            "anthropic": {"name": "notify", "input_schema": local},
            "responses": {"type": "function", "name": "notify", "parameters": local},
        }[api]
    ]
    run = drive(
        engine_for(api, body),
        [calls(api, ("c1", "desk_lookup", {"symbol": "A"})), calls(api, ("r1", "notify", {}))],
        store=store,
    )
    handed_off = echo(api, run.response.body)
    if api == "openai":
        result = {"role": "tool", "tool_call_id": "r1", "content": "sent"}
    elif api == "responses":
        result = {"type": "function_call_output", "call_id": "r1", "output": "sent"}
    else:
        block = {"type": "tool_result", "tool_use_id": "r1", "content": "sent"}
        result = {"role": "user", "content": [block]}
    field = messages_field(api)
    body[field] = [*body[field], *handed_off, result]
    back = drive(engine_for(api, body), [text(api, "done")], store=store)
    messages = back.upstream_bodies[0][field]
    assert hidden_ids(api, messages) == ["c1", "r1"]


def test_a_legacy_function_call_answer_is_recognised(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    schema = {"type": "object", "properties": {}}
    body = request("openai", functions=[{"name": "notify", "parameters": schema}])
    run = drive(
        engine_for("openai", body),
        [
            calls("openai", ("c1", "desk_lookup", {"symbol": "A"})),
            calls("openai", ("x", "notify", {})),
        ],
        store=store,
    )
    answer = run.response.body["choices"][0]["message"]
    assert "function_call" in answer
    body["messages"] = [
        *body["messages"],
        answer,
        {"role": "function", "name": "notify", "content": "sent"},
    ]
    back = drive(engine_for("openai", body), [text("openai", "done")], store=store)
    assert "c1" in hidden_ids("openai", back.upstream_bodies[0]["messages"])


def test_a_changed_system_prompt_is_the_same_conversation(tmp_path: Path) -> None:
    """SPEC 8.3 (superseding the wave-1 rule): runners rewrite system prompts between turns
    (Claude Code's git status); the turn the rounds led to identifies them."""
    store = ContinuityStore(tmp_path)
    body = request("anthropic", "AAPL", system="You are terse.")
    run = drive(
        engine_for("anthropic", body),
        [calls("anthropic", ("c1", "desk_lookup", {"symbol": "A"})), text("anthropic", "1")],
        store=store,
    )
    history = [*body["messages"], *echo("anthropic", run.response.body)]
    for system, expected in (("You are terse.", ["c1"]), ("You are chatty.", ["c1"])):
        again = request("anthropic", system=system)
        again["messages"] = [*history, {"role": "user", "content": "more"}]
        back = drive(engine_for("anthropic", again), [text("anthropic", "ok")], store=store)
        assert hidden_ids("anthropic", back.upstream_bodies[0]["messages"]) == expected


@pytest.mark.parametrize("api", APIS)
def test_a_first_turn_looks_nothing_up(api: str) -> None:
    run = drive(engine_for(api, own_history(api)), [text(api, "hi")])
    assert run.of(Recall) == []


@pytest.mark.parametrize("api", APIS)
def test_only_requests_with_hidden_rounds_are_remembered(api: str) -> None:
    run = drive(engine_for(api, own_history(api)), [text(api, "plain")])
    assert run.of(Remember) == []


def test_the_store_is_bounded_least_recently_used_first(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path, max_entries=2)
    for key in ("aa01", "bb02"):
        store.remember(key, [{"role": "assistant", "content": key}], agent="agent")
    assert store.recall(["aa01"])  # touch: bb02 is now the oldest
    store.remember("cc03", [{"role": "assistant", "content": "c"}], agent="agent")
    assert set(store.recall(["aa01", "bb02", "cc03"])) == {"aa01", "cc03"}
    restarted = ContinuityStore(tmp_path, max_entries=2)
    assert set(restarted.recall(["aa01", "bb02", "cc03"])) == {"aa01", "cc03"}


def test_the_store_is_bounded_in_bytes(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path, max_bytes=10_000)
    for number in range(5):
        store.remember(f"{number:04x}", [{"role": "user", "content": "x" * 3000}], agent="agent")
    assert set(store.recall([f"{n:04x}" for n in range(5)])) == {"0002", "0003", "0004"}


async def test_a_replaced_entry_wins_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    store.remember("dd04", [{"role": "assistant", "content": "old"}], agent="agent")
    store.remember("dd04", [{"role": "assistant", "content": "new"}], agent="agent")
    await store.close()
    with open(store.path, "ab") as log:
        log.write(b'{"key": "ee05", "messa')  # a crash mid-write
    restarted = ContinuityStore(tmp_path)
    assert restarted.recall(["dd04", "ee05"]) == {"dd04": [{"role": "assistant", "content": "new"}]}
    restarted.remember("ff06", [], agent="agent")
    assert ContinuityStore(tmp_path).recall(["ff06"]) == {"ff06": []}


def test_the_log_is_compacted_when_dead_entries_dominate(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path, max_entries=3)
    payload = [{"role": "assistant", "content": "x" * 4096}]
    for number in range(400):
        store.remember(f"{number:04x}", payload, agent="agent")
    store.finish_compaction()  # it runs in a worker thread
    assert store.path.stat().st_size < 3 * 1024 * 1024
    assert set(store.recall(["018d", "018e", "018f"])) == {"018d", "018e", "018f"}
    assert set(ContinuityStore(tmp_path).recall(["018d", "018e", "018f", "0000"])) == {
        "018d",
        "018e",
        "018f",
    }


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    arguments=st.dictionaries(st.text(min_size=1, max_size=6), JSON_VALUES, max_size=5),
    words=st.lists(st.text(alphabet="abcxyz.,!", min_size=1, max_size=6), max_size=6),
)
def test_fingerprints_ignore_key_order_spacing_and_null_fields(
    arguments: dict[str, Any], words: list[str]
) -> None:
    reordered = dict(reversed(list(arguments.items())))
    openai_codec, anthropic_codec = codec_of("openai"), codec_of("anthropic")
    sent = {
        "role": "assistant",
        "content": " ".join(words),
        "tool_calls": [
            {
                "id": "a",
                "type": "function",
                "function": {"name": "f", "arguments": json.dumps(arguments)},
            }
        ],
    }
    echoed = {
        "tool_calls": [
            {
                "function": {"arguments": json.dumps(reordered, indent=2), "name": "f"},
                "type": "function",
                "id": "a",
            }
        ],
        "refusal": None,
        "content": "\n  " + "  \n".join(words) + " ",
        "role": "assistant",
    }
    assert openai_codec.fingerprint(sent) == openai_codec.fingerprint(echoed)
    blocks = [
        {"type": "text", "text": " ".join(words)},
        {"type": "tool_use", "id": "a", "name": "f", "input": arguments},
    ]
    again = [
        {"text": "\t".join(words), "type": "text"},
        {"input": reordered, "name": "f", "id": "a", "type": "tool_use"},
    ]
    assert anthropic_codec.fingerprint({"role": "assistant", "content": blocks}) == (
        anthropic_codec.fingerprint({"content": again, "role": "assistant"})
    )


def system_prompt(api: str, text: str) -> dict[str, Any]:
    """A request whose system prompt is ``text``, in the protocol's own place."""
    if api == "anthropic":
        return request(api, system=text)
    if api == "responses":
        return own_history(api, instructions=text)
    return request(api, messages=[{"role": "system", "content": text}, USER_TURN])


USER_TURN = {"role": "user", "content": "What is AAPL at?"}


@pytest.mark.parametrize("api", APIS)
def test_continuity_never_fingerprints_a_system_prompt(
    api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner's system prompt runs to tens of KB and is never part of a continuity key: the
    engine leaves it unread, while the turns it keys on are fingerprinted as before."""
    store = ContinuityStore(tmp_path)
    history = first_turn(api, store, "AAPL")
    codec = type(codec_of(api))
    fingerprinted: list[str] = []
    fingerprint = codec.fingerprint

    def counted(self: Any, message: dict[str, Any]) -> str:
        fingerprinted.append(message["role"])
        return fingerprint(self, message)

    monkeypatch.setattr(codec, "fingerprint", counted)
    body = system_prompt(api, "You are terse. " * 2000)
    body[messages_field(api)] = [*body[messages_field(api)][:-1], *history["messages"]]
    body[messages_field(api)].append({"role": "user", "content": "more"})
    back = drive(engine_for(api, body), [text(api, "ok")], store=store)
    assert "c1" in hidden_ids(api, back.upstream_bodies[0][messages_field(api)])
    assert fingerprinted and not {"system", "developer"} & set(fingerprinted)


@pytest.mark.parametrize("api", APIS)
def test_the_journal_identity_still_reads_the_system_prompt(api: str) -> None:
    """Fingerprints and the seed are computed when read: a request whose system prompt changed
    is still another request to the journal (SPEC §8.2)."""
    codec = codec_of(api)
    terse, chatty = (
        codec.parse_request(system_prompt(api, text)) for text in ("You are terse.", "Be chatty.")
    )
    assert request_identity("a", api, terse) != request_identity("a", api, chatty)
    again = codec.parse_request(system_prompt(api, "You are terse."))
    assert request_identity("a", api, terse) == request_identity("a", api, again)
    assert list(terse.fingerprints) == terse.fingerprints[:] == list(again.fingerprints)
