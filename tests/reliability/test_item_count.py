"""A request of many small items (issue 46): 20,000 Responses input items in 1.5 MB passed
the body's shape bound, and the per-item work of mediation (each item's continuity fingerprint
and keys, on the event loop) stalled every agent 1.4 s; translation (a pass-through agent whose
provider speaks another protocol) walked every item too, uncapped. A real sidecar process; the
victim is another agent on its own address, timed from a thread of this process."""

from __future__ import annotations

import asyncio
import http.client
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import orjson
import pytest

from clawpod.sidecar.codecs.base import MAX_INPUT_ITEMS
from clawpod.sidecar.manifest import Provider
from tests.mediation.scripted import an_text
from tests.reliability.test_body_amplification import GUARD_S, Process
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.responses import message, response
from tests.support.sidecar import TEST_AUDIT_KEY, TEST_PROVIDER_KEYS
from tests.support.sidecar_process import sidecar_process
from tests.support.upstream import Reply, StubUpstream, openai_completion

# A generous cap on the victim's slowest answer on a machine shared by many test runs (the
# attack held it 1.4 s), never a timing of the code under test.
STALL_CAP_S = 0.5
VICTIM_ADDRESS = "127.0.0.2"  # another peer than the attacker's


class VictimProbe(threading.Thread):
    """Another agent's model calls, one every 20 ms on a kept-alive connection: the slowest."""

    def __init__(self, sidecar: Process, agent: str) -> None:
        super().__init__(daemon=True)
        self.port = int(sidecar.url.rsplit(":", 1)[1])
        self.token = sidecar.tokens[agent]
        self.slowest = 0.0
        self.answers = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=GUARD_S, source_address=(VICTIM_ADDRESS, 0)
        )
        body = orjson.dumps(
            {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        )
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        while not self.stopping.is_set():
            started = time.perf_counter()
            connection.request("POST", "/v1/chat/completions", body, headers)
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200
            self.slowest = max(self.slowest, time.perf_counter() - started)
            self.answers += 1
            time.sleep(0.02)
        connection.close()


@pytest.fixture
async def sidecar(tmp_path: Path) -> AsyncIterator[Process]:
    """A sidecar process: a native agent (the victim), a mediated one and a pass-through one
    whose requests are translated (the attackers); a Messages provider (claude-*) and a
    Chat-only one (local-*) beside OpenAI's."""
    async with StubUpstream() as upstream:
        upstream.always("openai", Reply.json(openai_completion("ok")))
        upstream.always("responses", Reply.json(response(message("ok"))))
        upstream.always("anthropic", Reply.json(an_text("ok")))
        agents = [
            AgentSpec("native", mode="native"),
            AgentSpec("mediated", tools=[http_tool("svc", "look", "http://127.0.0.1:9/")]),
            AgentSpec("passing", mode="native"),
        ]
        providers = providers_for(upstream.openai_url, upstream.anthropic_url)
        providers["local"] = Provider(
            api="openai",
            protocols=["chat"],
            base_url=upstream.openai_url,
            key_env="OPENAI_API_KEY",
            models=["local-*"],
        )
        tokens = write_build(tmp_path / "build", agents, providers)
        env = {**TEST_PROVIDER_KEYS, "CLAW_AUDIT_KEY": TEST_AUDIT_KEY}
        async with sidecar_process(tmp_path / "build", tmp_path / "state", env) as running:
            yield Process(running, tokens)


def items(count: int) -> list[dict[str, str]]:
    """Distinct small turns (equal ones would be fingerprinted once)."""
    return [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"}
        for n in range(count)
    ]


# A caller's request of ``count`` items: its route, agent and body.
Attack = tuple[str, str, dict[str, object]]


def mediated_responses(count: int) -> Attack:
    return "/v1/responses", "mediated", {"model": "gpt-4o", "input": items(count)}


def chat_to_messages(count: int) -> Attack:
    """A Chat caller whose model a Messages provider serves."""
    body = {"model": "claude-sonnet-4-6", "messages": items(count)}
    return "/v1/chat/completions", "passing", body


def responses_to_chat(count: int) -> Attack:
    """A Responses caller whose model a Chat-only provider serves."""
    return "/v1/responses", "passing", {"model": "local-model", "input": items(count)}


async def attack(sidecar: Process, request: Attack) -> tuple[int, dict, VictimProbe]:
    route, agent, payload = request
    body = orjson.dumps(payload)
    probe = VictimProbe(sidecar, "native")
    probe.start()
    try:
        await asyncio.sleep(0.2)
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                sidecar.url + route,
                data=body,
                headers={"Authorization": f"Bearer {sidecar.tokens[agent]}"},
                timeout=aiohttp.ClientTimeout(total=GUARD_S),
            ) as answer,
        ):
            status, payload = answer.status, await answer.json()
        await asyncio.sleep(0.2)
    finally:
        probe.stopping.set()
        await asyncio.to_thread(probe.join, GUARD_S)
    assert probe.answers > 0
    return status, payload, probe


@pytest.mark.parametrize("request_of", [mediated_responses, chat_to_messages, responses_to_chat])
async def test_twenty_thousand_items_are_refused_in_the_callers_protocol(
    sidecar: Process, request_of: Callable[[int], Attack]
) -> None:
    status, payload, probe = await attack(sidecar, request_of(20_000))
    assert status == 413, payload
    # The caller's error shape (Chat's and Responses' alike), naming the bound and what to do.
    assert payload["error"]["code"] == "request_too_complex"
    assert f"at most {MAX_INPUT_ITEMS}" in payload["error"]["message"]
    assert probe.slowest < STALL_CAP_S, f"the other agent waited {probe.slowest:.2f} s"


async def test_a_conversation_at_the_bound_is_mediated_without_stalling_others(
    sidecar: Process,
) -> None:
    """Its turns are fingerprinted a slice per turn of the event loop (0.28 to 0.44 s of
    stall for the other agent when they were not, measured here)."""
    status, payload, probe = await attack(sidecar, mediated_responses(MAX_INPUT_ITEMS))
    assert status == 200, payload
    assert probe.slowest < STALL_CAP_S, f"the other agent waited {probe.slowest:.2f} s"


@pytest.mark.parametrize("request_of", [chat_to_messages, responses_to_chat])
async def test_a_conversation_at_the_bound_is_translated_without_stalling_others(
    sidecar: Process, request_of: Callable[[int], Attack]
) -> None:
    status, payload, probe = await attack(sidecar, request_of(MAX_INPUT_ITEMS))
    assert status == 200, payload
    assert probe.slowest < STALL_CAP_S, f"the other agent waited {probe.slowest:.2f} s"
