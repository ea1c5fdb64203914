"""Codex CLI and a rule whose approver is the client (SPEC §16). Codex speaks Responses but
knows nothing of ``mcp_approval_request`` items: asked, it ends its turn without a word and
without answering, so the call must never run (docs/approvals.md says to keep such agents on
the operator's approval)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawpod.sidecar.manifest import Governance, ToolRule
from tests.mediation.conftest import desk_tools
from tests.runners.conftest import RunnerPod, serving
from tests.runners.provider import QUOTE, ScriptedProvider
from tests.runners.test_codex import PROMPT, codex_exec
from tests.support.builds import AgentSpec, providers_for
from tests.support.sidecar import audit_records

pytestmark = pytest.mark.runners


@pytest.fixture
async def client_rule_pod(tmp_path: Path) -> AsyncIterator[RunnerPod]:
    provider = await ScriptedProvider(plan=(QUOTE,)).start()

    def agents(service_url: str) -> list[AgentSpec]:
        return [AgentSpec("mediated", desk_tools(service_url))]

    rule = ToolRule(tool="*", effect="confirm", approver="client", source="pod.yml:1")
    governance = Governance(rules={"mediated": [rule]})
    providers = providers_for(provider.url + "/v1", provider.url)
    async with serving(tmp_path, provider, agents, providers, governance=governance) as pod:
        yield pod


async def test_codex_meets_a_client_approval(client_rule_pod: RunnerPod) -> None:
    pod = client_rule_pod
    env = pod.env("mediated")
    argv = codex_exec(env, PROMPT)
    code, out, err = await pod.run(argv, env)
    assert code == 0, (out + err)[-3000:]  # Codex 0.169 ends the turn as if answered
    assert "QUOTE-OK" not in out
    assert pod.quote_calls() == []  # asked and never answered: not run
    records = audit_records(pod.sidecar.state.state_dir, "mediated")
    ((call,),) = [r["calls"] for r in records[0]["tool_trace"]]
    assert (call["name"], call["error_code"], call["executed"]) == (
        "desk.quote",
        "approval_requested",
        False,
    )
