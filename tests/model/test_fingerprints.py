"""A turn's fingerprint is computed once while it is remembered (model/conversation.py): a
conversation resends its whole history with every request, and every request of an agent its
system prompt, which the journal's identity of a request reads (SPEC §8.2)."""

from __future__ import annotations

from typing import Any

import pytest

from clawpod.sidecar.codecs.chat.codec import OpenAICodec
from clawpod.sidecar.codecs.messages.codec import AnthropicCodec
from clawpod.sidecar.model import conversation
from clawpod.sidecar.model.conversation import RememberedFingerprints

SYSTEM = {"role": "system", "content": "You are the desk analyst. " * 400}  # ~10 KB


class Counted:
    """A codec's fingerprint that counts the turns it is asked for."""

    def __init__(self, fingerprint: Any) -> None:
        self.fingerprint = fingerprint
        self.turns: list[dict[str, Any]] = []

    def __call__(self, turn: dict[str, Any]) -> str:
        self.turns.append(turn)
        return self.fingerprint(turn)


def body(*asks: str) -> dict[str, Any]:
    turns = [{"role": "user", "content": ask} for ask in asks]
    return {"model": "gpt-4o", "messages": [SYSTEM, *turns]}


def test_a_turn_an_earlier_request_carried_is_not_fingerprinted_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    codec = OpenAICodec()
    counted = Counted(codec.fingerprint)
    monkeypatch.setattr(codec, "fingerprint", counted)
    monkeypatch.setattr(conversation, "remembered", RememberedFingerprints())
    first = list(codec.parse_request(body("Buy one.")).fingerprints)
    second = list(codec.parse_request(body("Buy one.", "And another.")).fingerprints)
    assert second[:2] == first  # the same fingerprints, read from memory
    assert [t["content"] for t in counted.turns[2:]] == ["And another."]


def test_each_codec_fingerprints_a_turn_its_own_way() -> None:
    turn = {"role": "user", "content": "Buy one."}
    remembered = RememberedFingerprints()
    openai, anthropic = OpenAICodec(), AnthropicCodec()
    assert remembered(openai.fingerprint, turn) == openai.fingerprint(turn)
    assert remembered(anthropic.fingerprint, turn) == anthropic.fingerprint(turn)
    assert len(remembered) == 2


def test_a_flood_of_distinct_turns_keeps_what_is_remembered_within_its_bound() -> None:
    """Another agent, or a hostile runner, sending big turns of its own every time: the oldest
    go; a turn past the per-turn bound is fingerprinted and not kept at all."""
    codec = OpenAICodec()
    remembered = RememberedFingerprints(limit=64 * 1024)
    for n in range(200):
        turn = {"role": "user", "content": f"{n} " + "x" * 4000}
        assert remembered(codec.fingerprint, turn) == codec.fingerprint(turn)
        assert remembered.held <= remembered.limit
    huge = {"role": "user", "content": "y" * (conversation.REMEMBERED_TURN_BYTES + 1)}
    before = len(remembered)
    assert remembered(codec.fingerprint, huge) == codec.fingerprint(huge)
    assert len(remembered) == before
    wide = {"role": "user", "content": [{"type": "text", "text": "n"}], "n": 1 << 70}
    assert remembered(codec.fingerprint, wide) == codec.fingerprint(wide)  # not JSON for orjson


TURNS = [
    {"role": "user", "content": "Buy one."},
    {"role": "user", "content": "Buy one. "},
    {"role": "user", "content": [{"type": "text", "text": "Buy one."}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
    {"role": "user", "content": "é ☃ 𝄞", "name": "desk"},
    SYSTEM,
]


def test_a_remembered_fingerprint_is_the_codecs_over_a_set_of_turns() -> None:
    """The shortcut against its general path (docs/architecture.md, "Shortcuts"): every turn,
    asked twice and as an equal copy, under each codec, gets the codec's own fingerprint."""
    remembered = RememberedFingerprints()
    for fingerprint in (OpenAICodec().fingerprint, AnthropicCodec().fingerprint):
        for turn in [*TURNS, *TURNS, *(dict(turn) for turn in TURNS)]:
            assert remembered(fingerprint, turn) == fingerprint(turn)
