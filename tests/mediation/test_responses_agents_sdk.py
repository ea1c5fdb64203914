"""The OpenAI Agents SDK with its default model (the Responses API) against a mediated agent:
a hidden round of the sidecar's tools, then the agent's own function tool, then the answer."""

from __future__ import annotations

import pytest

from tests.mediation.conftest import MediatedPod
from tests.support import responses as r

agents = pytest.importorskip("agents", reason="the openai-agents package is not installed")


async def test_agent_with_default_model_through_the_sidecar(pod: MediatedPod) -> None:
    notified: list[str] = []

    @agents.function_tool
    def notify_user(text: str) -> str:
        """Show a line to the user."""
        notified.append(text)
        return "shown"

    pod.upstream.enqueue(
        "responses",
        r.reply(r.response(r.call("call_1", "desk_quote", {"symbol": "AAPL"}))),
        r.reply(r.response(r.call("call_2", "notify_user", {"text": "AAPL is up"}))),
        r.reply(r.response(r.message("Told the user."), response_id="resp_3")),
    )
    agent = agents.Agent(name="desk", instructions="Be brief.", model="gpt-4o", tools=[notify_user])
    provider = agents.OpenAIProvider(openai_client=pod.openai())
    config = agents.RunConfig(model_provider=provider, tracing_disabled=True)
    result = await agents.Runner.run(agent, "How is AAPL?", run_config=config)
    assert result.final_output == "Told the user."
    assert notified == ["AAPL is up"]
    first, second, third = (x.json for x in pod.upstream.requests_to("responses"))
    assert [t["name"] for t in first["tools"]] == [
        "notify_user",
        "desk_quote",
        "desk_trade",
        "desk_slow",
    ]
    assert [i.get("type") for i in second["input"]][-1] == "function_call_output"
    # The runner's follow-up carries its own call's result; the hidden round is put back.
    kinds = [(i.get("type", "message"), i.get("call_id")) for i in third["input"]]
    assert kinds == [
        ("message", None),
        ("function_call", "call_1"),
        ("function_call_output", "call_1"),
        ("function_call", "call_2"),
        ("function_call_output", "call_2"),
    ]
    assert len(pod.service.requests) == 1
