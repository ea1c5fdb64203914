"""Issue 50's "done when", measured on a compiled pod granting 500 generated tools: a real
sidecar, the stub provider on 127.0.0.1 counting the tool tokens it receives, a scripted model
that searches by the question's words, and a real tool service.

Injecting all 500 tools against deferring them (``defer-tools-over``): the tools' tokens per
model call fall by at least 90%, the right tool is run for at least as many of 50 held-out
questions, and a tool that was not searched for, or not granted, is not run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import openai
import pytest

from clawpod.compiler.output.build import read_token, write_build
from clawpod.compiler.pod import compile_pod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.bigpod import held_out_questions, write_catalog_pod
from tests.support.catalog_model import CatalogModel
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, audit_records_when, start_sidecar
from tests.support.upstream import Reply, StubUpstream

QUESTIONS = held_out_questions(50)


@dataclass
class Arm:
    """One pod of the comparison, its provider and its tool service."""

    client: openai.AsyncOpenAI
    model: CatalogModel
    upstream: StubUpstream
    service: ToolService
    state_dir: Path
    admin_url: str

    async def ask(self, question: str) -> str:
        await self.client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": question}]
        )
        return self.service.requests[-1].path if self.service.requests else ""


@pytest.fixture
async def arms(tmp_path: Path) -> AsyncIterator[dict[str, Arm]]:
    made: dict[str, Arm] = {}
    closing = []
    for name, defer_over in (("all", None), ("deferred", 50)):
        upstream = await StubUpstream().start()
        service = await ToolService().start()
        model = CatalogModel()
        upstream.respond("openai", model)
        directory = tmp_path / name
        pod = write_catalog_pod(directory, upstream.openai_url, service.url, defer_over)
        out = directory / "out"
        write_build(compile_pod(pod), out)
        sidecar = await start_sidecar(out, directory / "state")
        token = read_token(out / "agents" / "agent.env")
        client = openai.AsyncOpenAI(base_url=sidecar.openai_base_url, api_key=token, max_retries=0)
        made[name] = Arm(client, model, upstream, service, directory / "state", sidecar.admin_url)
        closing += [client.close, sidecar.close, service.close, upstream.close]
    yield made
    for close in reversed(closing):
        await close()


def path_of(canonical: str) -> str:
    service, tool = canonical.split(".")
    return f"/{service}/{tool.split('_')[0]}"


async def test_deferred_tools_cost_a_tenth_and_find_the_right_tool_as_often(
    arms: dict[str, Arm],
) -> None:
    right = {name: 0 for name in arms}
    for question, tool in QUESTIONS:
        for name, arm in arms.items():
            if await arm.ask(question) == path_of(tool):
                right[name] += 1
    every, deferred = arms["all"].model, arms["deferred"].model
    per_call_all = sum(every.tool_tokens) / len(every.tool_tokens)
    per_call_deferred = sum(deferred.tool_tokens) / len(deferred.tool_tokens)
    assert per_call_deferred <= 0.1 * per_call_all, (per_call_deferred, per_call_all)
    assert right["deferred"] >= right["all"], right
    assert right["deferred"] >= 45, right  # the comparison is not between two failures
    # The audit says what each model call was offered: the search first, then what it found.
    records = await audit_records_when(arms["deferred"].state_dir, "agent", len(QUESTIONS))
    offered = records[0]["tools_offered"]
    assert offered[0] == ["claw_tool_search"]
    assert QUESTIONS[0][1].replace(".", "_") in offered[1]
    # The search's calls are counted as the sidecar's own, not as a runner's tool.
    async with (
        aiohttp.ClientSession() as session,
        session.get(arms["deferred"].admin_url + "/metrics") as response,
    ):
        metrics = await response.text()
    assert 'tool="claw_tool_search"' in metrics


async def test_a_tool_not_searched_for_or_not_granted_is_not_run(arms: dict[str, Arm]) -> None:
    arm = arms["deferred"]
    arm.upstream.respond("openai", lambda received: None)  # scripted replies from here
    arm.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("c1", "billing_send_invoice_now", {}))),  # granted to no one
        Reply.json(oa_calls(("c2", "billing_delete_invoice", {}))),  # granted, not searched
        Reply.json(oa_text("ok")),
    )
    first = await arm.client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "bill them"}]
    )
    # Not this agent's: handed back to the runner as its own call, never run here.
    assert first.choices[0].message.tool_calls[0].function.name == "billing_send_invoice_now"
    await arm.client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "delete it"}]
    )
    assert arm.service.requests == []
    refusal = arm.upstream.requests_to("openai")[-1].json["messages"][-1]
    assert '"tool_not_found"' in refusal["content"]
    assert TEST_PROVIDER_KEYS["OPENAI_API_KEY"] not in refusal["content"]
