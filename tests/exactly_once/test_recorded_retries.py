"""A failed attempt and its retry as real runners sent them (recorded by the runner matrix,
tests/runners/recording.py, into tests/fixtures/runners/recorded/): replayed through the
sidecar, the provider failing after the order, the service sees one order; and what tells a
re-rendered retry from another request (SPEC §8.2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from clawpod.sidecar.codecs.chat.codec import OpenAICodec
from clawpod.sidecar.state.journal import asked_content, retries
from tests.exactly_once.test_retry_identity import BUY, send, trades
from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.upstream import Reply

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "runners" / "recorded"
OPENCLAW = RECORDED / "openclaw-2026.9.6-retry.json"
OPENCODE = RECORDED / "opencode-1.18.33-retry.json"


def attempts(fixture: Path) -> list[dict[str, Any]]:
    """The agent's model calls the runner sent, in order (the failed attempt, then its retry):
    those offering tools (a title request offers none)."""
    recorded = orjson.loads(fixture.read_bytes())
    return [e["request"] for e in recorded["exchanges"] if e["request"].get("tools")]


def content(request: dict[str, Any]) -> str:
    return asked_content(OpenAICodec().parse_request(copy.deepcopy(request)))


def with_prompt(request: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    changed = copy.deepcopy(request)
    for message in changed["messages"]:
        if isinstance(message["content"], str):
            message["content"] = message["content"].replace(old, new)
    return changed


@pytest.mark.parametrize("fixture", [OPENCLAW, OPENCODE], ids=lambda f: f.stem)
async def test_a_recorded_retry_places_the_order_once(pod: MediatedPod, fixture: Path) -> None:
    """OpenClaw 2026.9.6: a timestamp before the prompt already in the first attempt, a queued
    preamble between it and the text, a continue paragraph and its runtime line after, and an
    internal-context user message after the prompt (3 orders per user call before). opencode
    1.18.33 retries the same request."""
    first, retry = attempts(fixture)
    failure = Reply.error("openai", 503, "provider down")
    pod.upstream.enqueue("openai", Reply.json(oa_calls(("call_0", "desk_trade", BUY))), failure)
    assert await send(pod, "openai", first) is None
    assert trades(pod) == 1
    pod.upstream.enqueue("openai", Reply.json(oa_text("Ok.")))
    assert await send(pod, "openai", retry) == "Ok."
    resent = pod.sent("openai")[-1]["messages"]
    assert resent[-1]["role"] == "tool"  # the order and its result after the retry's prompt
    assert resent[-1]["tool_call_id"] == "call_0"
    assert trades(pod) == 1
    records = await pod.wait_for_audit(2)
    assert records[1]["resumed_from"] == records[0]["id"]


def test_openclaw_decorations_are_not_content() -> None:
    first, retry = attempts(OPENCLAW)
    assert content(first) == "Buy one AAPL."
    assert retries(content(first), content(retry))


@pytest.mark.parametrize(
    "other",
    ["Buy one MSFT.", "Buy one AAPL. Then sell it.", "[order] Buy one AAPL."],
)
def test_other_content_in_the_retry_never_adopts(other: str) -> None:
    first, retry = attempts(OPENCLAW)
    assert not retries(content(first), content(with_prompt(retry, "Buy one AAPL.", other)))


def test_a_continue_line_of_the_failed_attempt_is_content() -> None:
    """A line asking to continue is a decoration only in the retry: a failed "Continue the
    report." is not retried by "Continue the summary."."""
    first, retry = attempts(OPENCLAW)
    failed = content(with_prompt(first, "Buy one AAPL.", "Continue the report."))
    assert failed == "Continue the report."
    again = with_prompt(retry, "Buy one AAPL.", "Continue the report.")
    other = with_prompt(retry, "Buy one AAPL.", "Continue the summary.")
    assert retries(failed, content(again)) and not retries(failed, content(other))
