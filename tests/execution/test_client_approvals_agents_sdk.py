"""The OpenAI Agents SDK answers the sidecar's approval requests with its own hook: the pod's
tools are declared as a hosted MCP server labelled ``clawpod`` whose ``on_approval_request``
asks the user (SPEC §16)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.execution.client_desk import TRADE, ClientDesk, desk
from tests.support import responses as r

__all__ = ["desk"]  # the fixture

agents = pytest.importorskip("agents", reason="the openai-agents package is not installed")


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_the_agents_sdk_hook_answers_the_approval(
    desk: ClientDesk, approve: bool, streamed: bool
) -> None:
    asked: list[dict[str, Any]] = []

    def on_approval_request(request: Any) -> dict[str, Any]:
        asked.append(request.data.model_dump())
        return {"approve": approve, "reason": None if approve else "too risky"}

    sidecar_tools = agents.HostedMCPTool(
        tool_config={
            "type": "mcp",
            "server_label": "clawpod",
            "server_url": desk.sidecar.url + "/mcp",  # never called: it stands for the pod
            "require_approval": "always",
        },
        on_approval_request=on_approval_request,
    )
    desk.upstream.enqueue(
        "responses",
        r.reply(r.response(r.call("call_t", "desk_execute_trade", TRADE)), stream=streamed),
        r.reply(
            r.response(r.message("Done." if approve else "Not done."), response_id="resp_2"),
            stream=streamed,
        ),
    )
    agent = agents.Agent(name="desk", model="gpt-4o", tools=[sidecar_tools])
    client = desk.openai()
    provider = agents.OpenAIProvider(openai_client=client)
    config = agents.RunConfig(model_provider=provider, tracing_disabled=True)
    try:
        if streamed:
            result = agents.Runner.run_streamed(agent, "Buy 10 NVDA.", run_config=config)
            async for _ in result.stream_events():
                pass
        else:
            result = await agents.Runner.run(agent, "Buy 10 NVDA.", run_config=config)
    finally:
        await client.close()

    assert result.final_output == ("Done." if approve else "Not done.")
    [request] = asked
    assert (request["name"], request["server_label"]) == ("desk_execute_trade", "clawpod")
    assert request["id"].startswith("apr_")
    first, second = (received.json for received in desk.upstream.requests_to("responses"))
    assert first.get("stream", False) is streamed  # the client's streaming goes upstream too
    # The hosted-server declaration never reaches the provider; the pod's tools do.
    assert [t.get("name") for t in first["tools"]] == ["desk_get_quote", "desk_execute_trade"]
    assert not any(i.get("type", "").startswith("mcp_") for i in second["input"])
    [result_seen] = desk.results_seen("call_t")
    if approve:
        assert result_seen["ok"] is True
        assert [q.path for q in desk.service.requests] == ["/trades"]
    else:
        assert result_seen["error"]["code"] == "approval_denied"
        assert "rejected by the user: too risky" in result_seen["error"]["message"]
        assert desk.service.requests == []
