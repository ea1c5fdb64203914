"""Every /v1 request is audited (route, mode, model, provider, outcome, status, stream, usage)
on the hash chain, and neither the agent token nor a provider key reaches the audit or logs."""

from __future__ import annotations

import io
import logging

import openai
import orjson
import pytest

from clawpod.cli.audit import verify_command
from clawpod.sidecar.observability.logs import REQUEST_LOGGER
from tests.sidecar.conftest import Pod, PodFactory
from tests.support.builds import AgentSpec, http_tool
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.upstream import Reply, anthropic_message, openai_completion

PROMPT = [{"role": "user", "content": "hi"}]


def _records(pod: Pod, agent: str = "agent") -> list[dict]:
    return [orjson.loads(line) for line in pod.audit_lines(agent)]


async def test_native_pass_through_is_audited_with_usage(pod: Pod) -> None:
    pod.upstream.enqueue(
        "openai", Reply.json(openai_completion(prompt_tokens=11, completion_tokens=4))
    )
    pod.upstream.enqueue_fixture("derived/openai_stream_tool_call.turn1.sse")
    pod.upstream.enqueue(
        "anthropic", Reply.json(anthropic_message(input_tokens=7, output_tokens=2))
    )
    pod.upstream.enqueue_fixture("anthropic/stream_tool_loop_haiku-4-5.llm-anthropic.yaml", turn=0)
    await pod.openai().chat.completions.create(model="openai/gpt-4o", messages=PROMPT)
    stream = await pod.openai().chat.completions.create(
        model="gpt-4o-mini", messages=PROMPT, stream=True, stream_options={"include_usage": True}
    )
    [_ async for _ in stream]
    await pod.anthropic().messages.create(model="claude-haiku-4-5", max_tokens=5, messages=PROMPT)
    stream = await pod.anthropic().messages.create(
        model="claude-haiku-4-5", max_tokens=5, messages=PROMPT, stream=True
    )
    [_ async for _ in stream]

    records = _records(pod)
    assert [(r["route"], r["model"], r["provider"], r["stream"]) for r in records] == [
        ("/v1/chat/completions", "gpt-4o", "openai", False),
        ("/v1/chat/completions", "gpt-4o-mini", "openai", True),
        ("/v1/messages", "claude-haiku-4-5", "anthropic", False),
        ("/v1/messages", "claude-haiku-4-5", "anthropic", True),
    ]
    for record in records:
        assert record["mode"] == "native"
        assert record["outcome"] == {"status": "ok", "code": None}
        assert record["http_status"] == 200
        assert record["tool_trace"] == []
        assert record["agent"] == "agent"
    usages = [(r["usage"]["input_tokens"], r["usage"]["output_tokens"]) for r in records]
    assert usages[0] == (11, 4) and usages[2] == (7, 2)
    assert usages[1] == (53, 15)  # the recorded stream's include_usage chunk
    assert usages[3][0] > 0 and usages[3][1] > 0  # message_start input, message_delta output
    assert all(r["usage"]["rounds"] == 1 for r in records)
    out = io.StringIO()
    assert verify_command(pod.state_dir, out) == 0, out.getvalue()


async def test_no_secret_in_audit_or_logs(
    pod: Pod, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=REQUEST_LOGGER)
    pod.upstream.enqueue("openai", Reply.json(openai_completion()))
    await pod.openai().chat.completions.create(model="gpt-4o", messages=PROMPT)
    with pytest.raises(openai.PermissionDeniedError):
        await pod.openai(token=pod.token + "x").chat.completions.create(
            model="gpt-4o", messages=PROMPT
        )
    logged = capsys.readouterr()
    audit = "\n".join(pod.audit_lines())
    for secret in (pod.token, *TEST_PROVIDER_KEYS.values()):
        assert secret not in audit
        assert secret not in logged.err and secret not in logged.out
    lines = [orjson.loads(line) for line in logged.err.splitlines() if line.startswith("{")]
    assert [(line["route"], line["status"]) for line in lines] == [
        ("/v1/chat/completions", 200),
        ("/v1/chat/completions", 403),
    ]


async def test_mediated_agent_without_tools_is_passed_through(make_pod: PodFactory) -> None:
    pod = await make_pod([AgentSpec("agent", mode="mediated")])
    pod.upstream.enqueue("openai", Reply.json(openai_completion("plain")))
    completion = await pod.openai().chat.completions.create(model="gpt-4o", messages=PROMPT)
    assert completion.choices[0].message.content == "plain"
    assert "tools" not in pod.upstream.received[-1].json
    assert _records(pod)[-1]["mode"] == "mediated"


async def test_mediated_agent_with_tools_goes_through_mediation(make_pod: PodFactory) -> None:
    tool = http_tool("svc", "lookup", "http://127.0.0.1:9", annotations={"readOnlyHint": True})
    pod = await make_pod([AgentSpec("agent", mode="mediated", tools=[tool])])
    pod.upstream.enqueue("openai", Reply.json(openai_completion("no tool needed")))
    completion = await pod.openai().chat.completions.create(model="gpt-4o", messages=PROMPT)
    assert completion.choices[0].message.content == "no tool needed"
    injected = pod.upstream.received[-1].json["tools"]
    assert [t["function"]["name"] for t in injected] == ["svc_lookup"]
