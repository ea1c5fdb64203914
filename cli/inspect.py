"""``clawc inspect OUT``: what each agent of a build sees, and how each of its tools executes."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ..sidecar.manifest import (
    QUARANTINE_FILE,
    AgentBuild,
    Build,
    BuildError,
    ManagedTool,
    RouteTarget,
    SidecarConfig,
    load_build,
)
from ..sidecar.model.tool_search import SEARCH_TOOL

_MODES = {
    "mediated": "mediated: the sidecar offers these tools in every LLM request and runs them",
    "native": "native: the runner calls these tools over MCP (context/{id}/mcp.json)",
}


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row))).rstrip()
        for row in rows
    ]


def _effect(tool: ManagedTool) -> str:
    return tool.effect.value + (", untrusted output" if tool.untrusted else "")


_TAINT_MODES = {
    "confirm": "destructive and open-world calls after an untrusted read wait for approval",
    "withdraw": "destructive and open-world tools are withdrawn after an untrusted read",
    "off": "untrusted results are fenced; calls after them are not held",
}


def _taint_lines(config: SidecarConfig) -> list[str]:
    taint = config.taint
    if taint is None:
        return []
    allowed = [*taint.egress_allow]
    allowed += [f"{h} ({s})" for s, hosts in taint.service_egress_allow.items() for h in hosts]
    hosts = ", ".join(allowed) or "none (every URL in a tainted request's arguments is refused)"
    return [f"taint: {taint.mode}: {_TAINT_MODES[taint.mode]}", f"egress-allow: {hosts}"]


def _execution(tool: ManagedTool) -> str:
    execution = tool.execution
    if execution.transport == "mcp":
        return f"MCP tools/call {execution.tool} at {execution.endpoint}"
    text = f"{execution.method} {execution.base_url}{execution.path}"
    headers = "".join(f" [{h}: {name}]" for name, h in (execution.headers or {}).items())
    if execution.body == "json":
        query = execution.query or []
        text += "?" + "&".join(query) if query else ""
        body = f" (JSON under '{execution.body_key}')" if execution.body_key else " (JSON)"
        if execution.body_arg:
            body = f" (JSON: {execution.body_arg})"
        return text + headers + body
    placed = set(re.findall(r"\{([^{}]*)\}", execution.path)) | set(execution.headers or {})
    query = [name for name in tool.input_schema.get("properties", {}) if name not in placed]
    return text + ("?" + "&".join(query) if query else "") + headers


def _auth(tool: ManagedTool) -> str:
    auth = tool.execution.auth
    if auth.type == "none":
        return "none"
    principal = f" (principal {auth.principal})" if auth.principal else ""
    scopes = f" (scopes {' '.join(auth.scopes)})" if auth.scopes else ""
    if auth.type == "oauth2-client-credentials":
        return f"OAuth client credentials{scopes}{principal}"
    if auth.type == "token-exchange":
        return f"on behalf of the end user{scopes}{principal}"
    if auth.type == "header":
        return f"{auth.header}: ${auth.env}{principal}"
    if auth.type == "query":
        return f"?{auth.param}=${auth.env}{principal}"
    return f"{auth.type} ${auth.env}{principal}"


def _pin(tool: ManagedTool, quarantined: dict[str, str]) -> str:
    if tool.name in quarantined:
        return f"QUARANTINED ({quarantined[tool.name]})"
    return tool.pin[:12] if tool.pin else "-"


def _agent_lines(agent_build: AgentBuild, quarantined: dict[str, str]) -> list[str]:
    agent, tools = agent_build.agent, agent_build.tools
    policy = agent.policy
    lines = [
        f"agent {agent.id}",
        f"  mode     {_MODES[agent.mode].format(id=agent.id)}",
        f"  policy   {policy.max_rounds} rounds, {policy.timeout_per_tool_ms} ms per tool, "
        f"{policy.total_timeout_ms} ms per request, "
        f"results cut at {policy.max_tool_result_bytes} bytes"
        + (f"; mixed responses: {agent.on_mixed}" if agent.mode == "mediated" else ""),
        f"  context  context/{agent.id}/CONTEXT.md; token in agents/{agent.id}.env",
    ]
    if not tools.tools:
        return [*lines, "  tools    none (deny by default)", ""]
    deferred = set(agent.deferred or ())
    rows = [("MODEL SEES", "CANONICAL", "EFFECT", "EXECUTES AS", "AUTH", "PIN")]
    rows += [
        (
            t.presented + (" (deferred)" if t.name in deferred else ""),
            t.name,
            _effect(t),
            _execution(t),
            _auth(t),
            _pin(t, quarantined),
        )
        for t in tools.tools
    ]
    count = f"  tools    {len(tools.tools)}"
    if deferred:
        count += f", {len(deferred)} deferred: offered once {SEARCH_TOOL} finds them (SPEC §23)"
    return [*lines, count, *_table(rows, "    "), ""]


def _route_lines(routes: dict[str, list[RouteTarget]]) -> list[str]:
    """One line per fallback route: its glob and its targets in order."""
    return [
        f"route {glob}: "
        + " > ".join(t.provider + (f" ({t.model})" if t.model else "") for t in targets)
        for glob, targets in routes.items()
    ]


def render(
    build: Build, agent: str | None = None, quarantined: dict[str, str] | None = None
) -> str:
    config = build.config
    providers = ", ".join(
        f"{name} ({p.api}: {' '.join(p.models)}; key {' '.join('$' + k for k in p.key_envs)})"
        for name, p in config.providers.items()
    )
    lines = [
        f"pod {config.pod}: {len(config.agents)} agent(s); sidecar on "
        f"{config.listen.host}:{config.listen.port}, state in {config.state_dir}",
        f"providers: {providers}",
        *_taint_lines(config),
        *_route_lines(config.routes or {}),
        "",
    ]
    for agent_id in config.agents:
        if agent is None or agent == agent_id:
            lines += _agent_lines(build.agents[agent_id], quarantined or {})
    return "\n".join(lines)


def read_quarantine(state_dir: Path) -> dict[str, str]:
    """What a running sidecar quarantined (§11.2), from its state directory."""
    path = state_dir / QUARANTINE_FILE
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text())["quarantined"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BuildError(f"{path}: cannot read the quarantine: {exc}") from None


def inspect_command(
    out: Path, stdout: TextIO, agent: str | None = None, state_dir: Path | None = None
) -> None:
    """Print the build's agents; raise :class:`sidecar.manifest.BuildError` if it is unusable.
    With ``state_dir``, tools the sidecar quarantined are marked."""
    build = load_build(out)
    quarantined = read_quarantine(state_dir) if state_dir is not None else {}
    if agent is not None and agent not in build.agents:
        raise BuildError(
            f"no agent '{agent}' in this build (agents: {', '.join(build.config.agents)})"
        )
    stdout.write(render(build, agent, quarantined))
