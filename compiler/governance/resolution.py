"""Governance resolved at compile time (SPEC §9): tool rules matched to the tools they govern and
their CEL conditions checked against each tool's input schema, approvals and budgets resolved to
agent ids; and untrusted tool output (SPEC §17): the pod's taint mode (default ``confirm`` once
any granted tool returns untrusted output) and the egress allow-lists."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...sidecar.manifest import (
    Approvals,
    BudgetGroup,
    Governance,
    SharedLimits,
    Taint,
    ToolRule,
)
from ...sidecar.model.rules import condition_problem, exact_string_comparisons, tool_matches
from ..agents import AgentPlan
from ..pod_file.governance_spec import RuleSpec, parse_rate
from ..pod_file.reader import PodReader, Where
from ..pod_file.reserved import STORE_URL_ENV
from ..pod_file.spec import PodClaw, ServiceClaw
from ..services.tool_names import canonical_name
from ..services.tool_services import ToolService
from .identity import resolve_end_user_limits

EVERY_AGENT = "*"


@dataclass(frozen=True)
class _RuleTarget:
    """What a condition is checked against: a tool's canonical name, schema and hints."""

    name: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]


def _targets(tools: Iterable[tuple[ToolService, Any]]) -> dict[str, _RuleTarget]:
    return {
        canonical_name(s.name, t.name): _RuleTarget(
            canonical_name(s.name, t.name), t.input_schema, t.annotations
        )
        for s, t in tools
    }


def _rule(
    reader: PodReader,
    spec: RuleSpec,
    where: Where,
    targets: dict[str, _RuleTarget],
    agent: str,
    service: str | None,
) -> ToolRule:
    matched = [t for name, t in targets.items() if tool_matches(spec.tool, name)]
    if not matched:
        scope = "granted to this agent" if service else "granted in this pod"
        raise reader.fail(
            f"tool '{spec.tool}' matches no tool {scope} (write <service>.<tool> or a glob)",
            (*where, "tool"),
            service,
        )
    if spec.when is not None:
        for target in matched:
            problem = condition_problem(spec.when, agent, target)
            if problem is not None:
                raise reader.fail(
                    f"{problem} (checked against the input schema of {target.name})",
                    (*where, "when"),
                    service,
                )
        _warn_exact_strings(reader, spec.when, matched, (*where, "when"), service)
    line = reader.lines.line(where)
    return ToolRule(
        tool=spec.tool,
        when=spec.when,
        effect=spec.effect,
        reason=spec.reason,
        rate=parse_rate(spec.rate) if spec.rate else None,
        approver=spec.approver or "operator",
        source=f"{reader.file.name}:{line}" if line else reader.file.name,
    )


def _warn_exact_strings(
    reader: PodReader, when: str, matched: list[_RuleTarget], where: Where, service: str | None
) -> None:
    """A free-form string compared as it is lets another spelling through ("nvda", "NVDA ")."""
    fields = dict.fromkeys(
        field for target in matched for field in exact_string_comparisons(when, target.input_schema)
    )
    for field in fields:
        reader.warn(
            f"{field} is a free-form string compared exactly: another case or spacing of the "
            f"value does not match; normalise it ({field}.upperAscii(), .lowerAscii(), "
            f".trim()) or give the schema an enum or pattern",
            where,
            service,
        )


def resolve_governance(
    reader: PodReader,
    claw: PodClaw,
    claws: dict[str, ServiceClaw | None],
    agents: list[AgentPlan],
    agent_ids: dict[str, list[str]],
) -> Governance | None:
    """The manifest's governance block; None when the pod sets none of it."""
    if not (
        claw.tool_rules
        or claw.approvals
        or claw.budgets
        or claw.budget_groups
        or claw.end_user_limits
        or _agent_rules(claws)
    ):
        return None
    everything = _targets(t for agent in agents for t in agent.tools)
    pod_rules = [
        _rule(reader, spec, ("x-claw", "tool-rules", i), everything, EVERY_AGENT, None)
        for i, spec in enumerate(claw.tool_rules or [])
    ]
    rules: dict[str, list[ToolRule]] = {}
    for agent in agents:
        mine = _targets(agent.tools)
        own = (claws[agent.service] or ServiceClaw()).tool_rules or []
        compiled = pod_rules + [
            _rule(
                reader,
                spec,
                ("services", agent.service, "x-claw", "tool-rules", i),
                mine,
                agent.id,
                agent.service,
            )
            for i, spec in enumerate(own)
        ]
        if compiled:
            rules[agent.id] = compiled
    tokens, usd = _budgets(reader, claw, agent_ids)
    return Governance(
        rules=rules,
        approvals=_approvals(reader, claw, everything),
        budgets=tokens,
        usd_budgets=usd or None,
        budget_groups=_budget_groups(reader, claw, agent_ids),
        end_user_limits=resolve_end_user_limits(reader, claw),
    )


def _agent_rules(claws: dict[str, ServiceClaw | None]) -> bool:
    return any(c is not None and c.tool_rules for c in claws.values())


def _approvals(reader: PodReader, claw: PodClaw, targets: dict[str, _RuleTarget]) -> Approvals:
    spec = claw.approvals
    if spec is None:
        return Approvals()
    if isinstance(spec.require, list):
        for index, pattern in enumerate(spec.require):
            if not any(tool_matches(pattern, name) for name in targets):
                raise reader.fail(
                    f"'{pattern}' matches no tool granted in this pod",
                    ("x-claw", "approvals", "require", index),
                )
    return Approvals(
        require=spec.require,
        timeout_ms=spec.timeout_ms,
        webhook=spec.webhook,
        max_open_per_agent=spec.max_open_per_agent,
    )


def _budgets(
    reader: PodReader, claw: PodClaw, agent_ids: dict[str, list[str]]
) -> tuple[dict[str, int], dict[str, float]]:
    """Daily token and USD budgets by agent id (or '*')."""
    tokens: dict[str, int] = {}
    usd: dict[str, float] = {}
    ids = {agent_id for group in agent_ids.values() for agent_id in group}
    for key, spec in (claw.budgets or {}).items():
        if key == EVERY_AGENT or key in ids:
            holders = [key]
        elif key in agent_ids:
            holders = agent_ids[key]
        else:
            raise reader.fail(
                f"budget for '{key}': not an agent of this pod (use an agent id, its service "
                "or '*')",
                ("x-claw", "budgets", key),
            )
        if spec.tokens_per_day is not None:
            tokens.update(dict.fromkeys(holders, spec.tokens_per_day))
        if spec.usd_per_day is not None:
            usd.update(dict.fromkeys(holders, spec.usd_per_day))
    return tokens, usd


def _budget_groups(
    reader: PodReader, claw: PodClaw, agent_ids: dict[str, list[str]]
) -> dict[str, BudgetGroup] | None:
    """Each group's agents by id (a service stands for all of its agents)."""
    if not claw.budget_groups:
        return None
    if claw.shared_limits is None:
        reader.warn(
            "budget-groups without shared-limits count this pod's agents in this sidecar "
            "alone; other pods' agents of a group count only where the pods share a store",
            ("x-claw", "budget-groups"),
        )
    ids = {agent_id for group in agent_ids.values() for agent_id in group}
    groups: dict[str, BudgetGroup] = {}
    for name, spec in claw.budget_groups.items():
        members: list[str] = []
        for index, key in enumerate(spec.agents):
            if key in ids:
                found = [key]
            elif key in agent_ids:
                found = agent_ids[key]
            else:
                raise reader.fail(
                    f"budget group '{name}': '{key}' is not an agent of this pod (use an agent "
                    "id or its service)",
                    ("x-claw", "budget-groups", name, "agents", index),
                )
            members += [agent for agent in found if agent not in members]
        groups[name] = BudgetGroup(
            agents=members,
            tokens_per_day=spec.tokens_per_day,
            usd_per_day=spec.usd_per_day,
            requests_per_minute=spec.requests_per_minute,
            tokens_per_minute=spec.tokens_per_minute,
        )
    return groups


def resolve_shared_limits(reader: PodReader, claw: PodClaw) -> SharedLimits | None:
    """Where the sidecar counts rates and budgets; None: in its own state directory."""
    spec = claw.shared_limits
    if spec is None:
        return None
    if spec.service is not None:
        return SharedLimits(url_env=STORE_URL_ENV, on_unreachable=spec.on_unreachable)
    assert spec.url_env is not None  # one of the two, by the grammar
    return SharedLimits(url_env=spec.url_env, on_unreachable=spec.on_unreachable)


def resolve_taint(
    reader: PodReader,
    claw: PodClaw,
    claws: dict[str, ServiceClaw | None],
    agents: list[AgentPlan],
) -> Taint | None:
    """The sidecar's taint settings; None when no tool of the pod is untrusted and the pod
    sets no mode (nothing can taint a request then)."""
    tool_services = {service.name for agent in agents for service, _ in agent.tools}
    agent_services = {agent.service for agent in agents}
    service_allow: dict[str, list[str]] = {}
    for name, service_claw in claws.items():
        if service_claw is None or service_claw.egress_allow is None:
            continue
        where = ("services", name, "x-claw", "egress-allow")
        if name in agent_services:
            raise reader.fail("egress-allow belongs to a tool service, not an agent", where, name)
        if name not in tool_services:
            reader.warn("egress-allow of a service no agent is granted tools of", where, name)
        service_allow[name] = _hosts(service_claw.egress_allow)
    untrusted = any(tool.untrusted_output for agent in agents for _, tool in agent.tools)
    if not untrusted and claw.taint is None:
        return None
    if not untrusted:
        reader.warn(
            "taint is set but no granted tool returns untrusted output", ("x-claw", "taint")
        )
    return Taint(
        mode=claw.taint or "confirm",
        egress_allow=_hosts(claw.egress_allow or []),
        service_egress_allow=service_allow,
    )


def _hosts(hosts: list[str]) -> list[str]:
    """Host names compare case-insensitively: kept lower-case, duplicates dropped."""
    return list(dict.fromkeys(host.lower() for host in hosts))
