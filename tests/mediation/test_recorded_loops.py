"""Tool loops as real SDKs sent them (recorded by the runner matrix into
tests/fixtures/runners/recorded/), replayed through the sidecar: the Vercel AI SDK's default
``openai()`` (ai 6 and 7) echoes a call turn that had text as an ``item_reference`` to its
message beside the whole ``function_call``; the hidden round before it comes back and the
managed tool does not run again (SPEC §8.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.exactly_once.test_retry_identity import BUY, trades
from tests.mediation.conftest import MediatedPod
from tests.support import responses as r

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "runners" / "recorded"
LOOPS = sorted(RECORDED.glob("ai-*-loop.json"))
NARRATION = "Let me do that."


def loop(fixture: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loop's first request and its last (the SDK's retry of the follow-up)."""
    exchanges = orjson.loads(fixture.read_bytes())["exchanges"]
    return exchanges[0]["request"], exchanges[-1]["request"]


async def post(pod: MediatedPod, body: dict[str, Any]) -> int:
    headers = {"Authorization": f"Bearer {pod.tokens['analyst']}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.openai_base_url + "/responses", json=body, headers=headers) as got,
    ):
        await got.read()
        return got.status


@pytest.mark.parametrize("fixture", LOOPS, ids=[f.stem for f in LOOPS])
async def test_an_echo_by_reference_beside_a_whole_call_keeps_the_hidden_round(
    pod: MediatedPod, fixture: Path
) -> None:
    first, follow_up = loop(fixture)
    items = follow_up["input"]
    references = [item["id"] for item in items if item.get("type") == "item_reference"]
    note = next(item for item in items if item.get("type") == "function_call")
    stream = bool(first.get("stream"))
    # The ids the recorded answers had: the SDK refers to them.
    hidden = r.response(r.message(NARRATION, references[0]), r.call("call_2", "desk_trade", BUY))
    answer = r.response(
        r.message(NARRATION, references[-1]),
        r.call(note["call_id"], note["name"], note["arguments"]),
        response_id="resp_2",
    )
    replies = r.reply(hidden, stream=stream), r.reply(answer, stream=stream)
    pod.upstream.enqueue("responses", *replies)
    assert await post(pod, first) == 200
    assert trades(pod) == 1
    done = r.response(r.message("Done.", "msg_9"), response_id="resp_3")
    pod.upstream.enqueue("responses", r.reply(done, stream=stream))
    assert await post(pod, follow_up) == 200
    resent = pod.sent("responses")[-1]["input"]
    assert any(item.get("call_id") == "call_2" for item in resent)  # the hidden round is back
    assert trades(pod) == 1
