"""A provider's stream that carries no answer (a Chat Completions server's ``data: [DONE]``
alone) is the provider's failure, 502 ``upstream_protocol_error``, whatever the caller's
protocol: a caller of another protocol got an empty answer, audited ok."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.support.upstream import Reply
from tests.translation.conftest import MODEL, TranslatingPod


def request(caller: str) -> tuple[str, dict[str, Any]]:
    model = MODEL["chat"]
    said = [{"role": "user", "content": "hi"}]
    if caller == "chat":
        return "/chat/completions", {"model": model, "messages": said, "stream": True}
    if caller == "responses":
        return "/responses", {"model": model, "input": "hi", "stream": True}
    return "/messages", {"model": model, "max_tokens": 64, "messages": said, "stream": True}


async def audited(pod: TranslatingPod, agent: str) -> list[dict[str, Any]]:
    """The agent's audit records once its request's is written (after the answer's end)."""
    for _ in range(500):
        records = pod.audit(agent)
        if records:
            return records
        await asyncio.sleep(0.01)
    raise AssertionError(f"no audit record of {agent}")


@pytest.mark.parametrize("agent", ["plain", "analyst"], ids=["pass-through", "mediated"])
@pytest.mark.parametrize("caller", ["chat", "responses", "messages"])
async def test_a_stream_of_only_done_is_a_502_for_every_caller(
    translating_pod: TranslatingPod, caller: str, agent: str
) -> None:
    pod = translating_pod
    if (caller, agent) == ("chat", "plain"):
        pytest.skip("a same-protocol pass-through relays the provider's stream as it is")
    pod.script("chat", Reply.sse(b"data: [DONE]\n\n"))
    path, body = request(caller)
    base = pod.sidecar.openai_base_url
    if caller == "messages":
        base = pod.sidecar.anthropic_base_url + "/v1"
    headers = {"Authorization": f"Bearer {pod.tokens[agent]}", "x-api-key": pod.tokens[agent]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + path, json=body, headers=headers) as answer,
    ):
        raw = await answer.read()
    assert b"upstream_protocol_error" in raw, raw[-300:]
    records = await audited(pod, agent)
    assert records[-1]["outcome"] == {"status": "error", "code": "upstream_protocol_error"}
