"""Write small sidecar builds directly from the manifest models, for tests that need no pod file."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawpod.sidecar.manifest import (
    AgentManifest,
    Execution,
    ManagedTool,
    Mode,
    OnMixed,
    Provider,
    SidecarConfig,
    ToolAuth,
    ToolInjection,
    ToolPolicy,
    ToolsManifest,
    dump_json,
    token_sha256,
    write_digest,
)

# The order-entry schema of the example trading tool (docs/contract.md §1).
TRADE_SCHEMA = {
    "type": "object",
    "properties": {
        "symbol": {"type": "string"},
        "side": {"enum": ["buy", "sell"]},
        "quantity": {"type": "number", "exclusiveMinimum": 0},
    },
    "required": ["symbol", "side", "quantity"],
}


def http_tool(
    service: str,
    tool: str,
    base_url: str,
    *,
    method: str = "GET",
    path: str | None = None,
    schema: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    body_key: str | None = None,
    auth: ToolAuth | None = None,
    description: str = "",
    long_running: bool | None = None,
) -> ManagedTool:
    has_body = method in ("POST", "PUT", "PATCH")
    return ManagedTool(
        name=f"{service}.{tool}",
        presented=f"{service}_{tool}".replace(".", "_")[:64],
        description=description or f"{tool} on {service}",
        inputSchema=schema or {"type": "object", "properties": {}},
        annotations=annotations or {},
        execution=Execution(
            service=service,
            base_url=base_url,
            method=method,
            path=path or f"/{tool}",
            body="json" if has_body else "none",
            body_key=body_key,
            auth=auth or ToolAuth(type="none"),
        ),
        long_running=long_running,
    )


@dataclass
class AgentSpec:
    id: str
    tools: list[ManagedTool] = field(default_factory=list)
    mode: Mode = "mediated"
    on_mixed: OnMixed = "refuse"
    policy: ToolPolicy = field(default_factory=ToolPolicy)
    tool_injection: ToolInjection = "auto"
    token: str = field(default_factory=lambda: "claw_" + secrets.token_urlsafe(24))
    deferred: list[str] | None = None
    """Canonical names of the tools offered only once found (SPEC §23)."""


def write_build(
    root: Path,
    agents: Iterable[AgentSpec],
    providers: dict[str, Provider],
    *,
    pod: str = "test-pod",
    **config: Any,
) -> dict[str, str]:
    """Write a verified build under ``root``; return agent id -> token."""
    agents = list(agents)
    root.mkdir(parents=True, exist_ok=True)
    sidecar = SidecarConfig(pod=pod, providers=providers, agents=[a.id for a in agents], **config)
    (root / "sidecar.json").write_text(dump_json(sidecar))
    for spec in agents:
        directory = root / "context" / spec.id
        directory.mkdir(parents=True, exist_ok=True)
        manifest = AgentManifest(
            id=spec.id,
            mode=spec.mode,
            token_sha256=token_sha256(spec.token),
            on_mixed=spec.on_mixed,
            tool_injection=spec.tool_injection,
            policy=spec.policy,
            names={t.presented: t.name for t in spec.tools},
            deferred=spec.deferred,
        )
        tools = ToolsManifest(agent=spec.id, tools=spec.tools, policy=spec.policy)
        (directory / "agent.json").write_text(dump_json(manifest))
        (directory / "tools.json").write_text(dump_json(tools))
    write_digest(root)
    return {a.id: a.token for a in agents}


def providers_for(
    openai_url: str | None = None, anthropic_url: str | None = None
) -> dict[str, Provider]:
    """Providers pointing at local stub upstreams (key env names are the standard ones)."""
    providers: dict[str, Provider] = {}
    if openai_url:
        providers["openai"] = Provider(
            api="openai", base_url=openai_url, key_env="OPENAI_API_KEY", models=["gpt-*", "o*"]
        )
    if anthropic_url:
        providers["anthropic"] = Provider(
            api="anthropic",
            base_url=anthropic_url,
            key_env="ANTHROPIC_API_KEY",
            models=["claude-*"],
        )
    return providers
