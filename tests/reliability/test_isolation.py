"""Isolation between agents, integrity of the build, and constant-time token checks.

Agent A's token never executes, lists or sees agent B's tools, continuity or audit; a build
whose tools.json, agent.json, sidecar.json or digest.json was altered keeps the sidecar from
starting; token checks compare fixed-length digests with ``hmac.compare_digest`` against every
agent, matched or not.
"""

from __future__ import annotations

import hmac
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from clawpod.sidecar.manifest import BuildError, load_build, token_sha256
from clawpod.sidecar.server.front import edge
from tests.reliability.wire import text, tool_call
from tests.support import secret_sweep
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, start_sidecar
from tests.support.upstream import Reply, StubUpstream

REPO = Path(__file__).resolve().parents[2]


class Pair:
    """Agents alpha and beta (mediated) and alpha-mcp and beta-mcp (native), each with tools of
    its own on one service."""

    def __init__(
        self,
        sidecar: RunningSidecar,
        upstream: StubUpstream,
        service: ToolService,
        tokens: dict[str, str],
        state_dir: Path,
    ) -> None:
        self.sidecar = sidecar
        self.upstream = upstream
        self.service = service
        self.tokens = tokens
        self.state_dir = state_dir

    def client(self, agent: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.sidecar.openai_base_url, api_key=self.tokens[agent], max_retries=0
        )

    def audit(self, agent: str) -> list[dict[str, Any]]:
        path = self.state_dir / "audit" / f"{agent}.jsonl"
        return (
            [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []
        )


def tools_of(owner: str, url: str) -> list:
    schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    return [
        http_tool(
            owner,
            "read",
            url,
            path=f"/{owner}/read",
            schema=schema,
            annotations={"readOnlyHint": True},
        ),
        http_tool(owner, "write", url, method="POST", path=f"/{owner}/write", schema=schema),
    ]


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    async with StubUpstream() as upstream, ToolService() as service:
        agents = [
            AgentSpec("alpha", tools_of("alpha", service.url)),
            AgentSpec("beta", tools_of("beta", service.url)),
            AgentSpec("alpha-mcp", tools_of("alpha", service.url), mode="native"),
            AgentSpec("beta-mcp", tools_of("beta", service.url), mode="native"),
        ]
        root = tmp_path / "build"
        tokens = write_build(root, agents, providers_for(upstream.openai_url))
        sidecar = await start_sidecar(root, tmp_path / "state")
        try:
            yield Pair(sidecar, upstream, service, tokens, tmp_path / "state")
        finally:
            await sidecar.close()


async def test_mediated_agent_never_sees_or_runs_another_agents_tools(pair: Pair) -> None:
    # The model (for alpha) asks for beta's tool by presented and by canonical name.
    for name in ("beta_write", "beta.write"):
        pair.upstream.enqueue("openai", Reply.json(tool_call("openai", name, {"note": "x"})))
        reply = await pair.client("alpha").chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": f"call {name}"}]
        )
        # Not alpha's tool: handed to the runner as its own call, never executed here.
        assert reply.choices[0].message.tool_calls[0].function.name == name
    injected = [t["function"]["name"] for t in pair.upstream.received[0].json["tools"]]
    assert injected == ["alpha_read", "alpha_write"]
    assert pair.service.requests == []
    assert all(not r.get("tool_trace") for r in pair.audit("alpha"))


async def test_native_agent_lists_and_calls_only_its_own_tools(pair: Pair) -> None:
    headers = {"Authorization": f"Bearer {pair.tokens['alpha-mcp']}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(pair.sidecar.url + "/mcp", http_client=http)) as client,
    ):
        listed = await client.list_tools()
        assert sorted(t.name for t in listed.tools) == ["alpha_read", "alpha_write"]
        for name in ("beta_write", "beta.write", "beta-mcp.beta_write"):
            try:
                result = await client.call_tool(name, {"note": "x"})
                assert result.is_error, result
            except Exception as exc:  # a JSON-RPC error is as good as an isError result
                secret_sweep.collect("mcp error", str(exc))
    assert pair.service.requests == []
    calls = [c for r in pair.audit("alpha-mcp") for t in r["tool_trace"] for c in t["calls"]]
    assert calls and all(not c["executed"] for c in calls)
    assert pair.audit("beta-mcp") == []


async def test_mcp_session_of_one_agent_is_useless_with_another_token(pair: Pair) -> None:
    url = pair.sidecar.url + "/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with aiohttp.ClientSession() as http:
        headers = {**accept, "Authorization": f"Bearer {pair.tokens['beta-mcp']}"}
        async with http.post(url, json=initialize, headers=headers) as response:
            session_id = response.headers["Mcp-Session-Id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        headers = {
            **accept,
            "Authorization": f"Bearer {pair.tokens['alpha-mcp']}",
            "Mcp-Session-Id": session_id,
        }
        async with http.post(url, json=listing, headers=headers) as response:
            body = await response.read()
            secret_sweep.collect("mcp foreign session", body)
    assert response.status == 404
    assert b"beta" not in body


async def test_continuity_never_crosses_agents(pair: Pair) -> None:
    """Identical conversations of two agents: each gets only its own hidden rounds back."""
    question = [{"role": "user", "content": "read my notes"}]
    for agent in ("alpha", "beta"):
        pair.upstream.enqueue(
            "openai",
            Reply.json(tool_call("openai", f"{agent}_read", {"note": agent}, call_id=f"c_{agent}")),
            Reply.json(text("openai", "notes read")),
        )
        reply = await pair.client(agent).chat.completions.create(model="gpt-4o", messages=question)
        assert reply.choices[0].message.content == "notes read"
    follow_up = [
        *question,
        {"role": "assistant", "content": "notes read"},
        {"role": "user", "content": "and now?"},
    ]
    for agent in ("alpha", "beta"):
        pair.upstream.enqueue("openai", Reply.json(text("openai", "done")))
        await pair.client(agent).chat.completions.create(model="gpt-4o", messages=follow_up)
        sent = orjson.dumps(pair.upstream.received[-1].json).decode()
        other = "beta" if agent == "alpha" else "alpha"
        assert f"c_{agent}" in sent, "the agent's own hidden round must come back"
        assert f"c_{other}" not in sent and f"{other}_read" not in sent


async def test_audit_records_stay_with_their_agent(pair: Pair) -> None:
    for agent in ("alpha", "beta"):
        pair.upstream.enqueue("openai", Reply.json(text("openai", f"hi {agent}")))
        await pair.client(agent).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": agent}]
        )
    for agent in ("alpha", "beta"):
        records = pair.audit(agent)
        assert [r["agent"] for r in records] == [agent]
    # No route serves audit data, whoever asks.
    async with aiohttp.ClientSession() as http:
        for path in ("/audit", "/v1/audit", "/state/audit/beta.jsonl", "/../audit/beta.jsonl"):
            headers = {"Authorization": f"Bearer {pair.tokens['alpha']}"}
            async with http.get(pair.sidecar.url + path, headers=headers) as response:
                body = await response.read()
                assert response.status in (404, 405)
                assert b"beta" not in body


# --- the build cannot be altered --------------------------------------------------------------


def _edit_json(path: Path, change: Callable[[Any], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


TAMPERING: dict[str, Callable[[Path], None]] = {
    "tools.json base_url redirected": lambda root: _edit_json(
        root / "context/alpha/tools.json",
        lambda d: d["tools"][0]["execution"].update(base_url="http://attacker.example"),
    ),
    "tools.json tool added": lambda root: _edit_json(
        root / "context/alpha/tools.json",
        lambda d: d["tools"].append({**d["tools"][0], "name": "x.y", "presented": "x_y"}),
    ),
    "tools.json whitespace": lambda root: (root / "context/alpha/tools.json").write_text(
        (root / "context/alpha/tools.json").read_text() + "\n"
    ),
    "agent.json token swapped": lambda root: _edit_json(
        root / "context/alpha/agent.json",
        lambda d: d.update(token_sha256=token_sha256("attacker")),
    ),
    "sidecar.json provider redirected": lambda root: _edit_json(
        root / "sidecar.json",
        lambda d: d["providers"]["openai"].update(base_url="http://attacker.example/v1"),
    ),
    "digest.json entry changed": lambda root: _edit_json(
        root / "digest.json",
        lambda d: d["files"].update({"sidecar.json": "0" * 64}),
    ),
    "digest.json entry removed": lambda root: _edit_json(
        root / "digest.json",
        lambda d: d["files"].pop("context/alpha/tools.json"),
    ),
    "digest.json deleted": lambda root: (root / "digest.json").unlink(),
    "digest.json not JSON": lambda root: (root / "digest.json").write_text("{"),
    "file added under context": lambda root: (root / "context/alpha/extra.json").write_text("{}"),
    "tools.json deleted": lambda root: (root / "context/alpha/tools.json").unlink(),
}


def _small_build(root: Path) -> None:
    agents = [AgentSpec("alpha", tools_of("alpha", "http://127.0.0.1:9"))]
    write_build(root, agents, providers_for("http://127.0.0.1:9/v1"))


@pytest.mark.parametrize("tampering", list(TAMPERING))
def test_altered_build_is_refused(tmp_path: Path, tampering: str) -> None:
    root = tmp_path / "build"
    _small_build(root)
    load_build(root)  # intact: loads
    TAMPERING[tampering](root)
    with pytest.raises(BuildError):
        load_build(root)


@pytest.mark.parametrize("tampering", ["tools.json base_url redirected", "digest.json deleted"])
def test_sidecar_process_refuses_to_start_on_an_altered_build(
    tmp_path: Path, tampering: str
) -> None:
    root = tmp_path / "build"
    _small_build(root)
    TAMPERING[tampering](root)
    env = {**os.environ, **TEST_PROVIDER_KEYS, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "clawpod.sidecar",
            "--build",
            str(root),
            "--port",
            "0",
            "--admin-port",
            "0",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    secret_sweep.collect("sidecar stderr", result.stderr + result.stdout)
    assert result.returncode == 1
    assert "refusing to start" in result.stderr
    assert "listening on" not in result.stdout
    assert "Traceback" not in result.stderr


# --- constant-time token checks ---------------------------------------------------------------


@pytest.mark.parametrize("presented", ["first", "last", "nobody", "x" * 5000])
def test_token_check_compares_fixed_length_digests_against_every_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, presented: str
) -> None:
    agents = [AgentSpec(f"agent-{n}") for n in range(5)]
    tokens = write_build(tmp_path / "build", agents, providers_for("http://127.0.0.1:9/v1"))
    build = load_build(tmp_path / "build")
    token = {"first": tokens["agent-0"], "last": tokens["agent-4"]}.get(presented, presented)
    compared: list[tuple[int, int]] = []
    compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return compare(a, b)

    monkeypatch.setattr(edge.hmac, "compare_digest", spy)
    verifier = edge.TokenVerifier(build)

    try:
        agent = verifier.authenticate({"Authorization": f"Bearer {token}"})
        assert presented in ("first", "last")
        assert agent.agent.id == {"first": "agent-0", "last": "agent-4"}[presented]
    except edge.AuthError as err:
        assert presented not in ("first", "last")
        assert err.status == 403
    # Every agent is compared, whichever matched, always 32 bytes against 32 bytes.
    assert compared == [(32, 32)] * 5
