"""Policy on arguments (SPEC §9.2): ordered rules per agent, each a tool glob, an optional CEL
condition (the language: ``model/rules.py``) and an effect; the first rule that matches
decides, and a call no rule matches is allowed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..manifest import Approver, Governance, ManagedTool, Rate, RuleEffect, ToolRule
from ..model.rules import (
    UNTAINTED_REQUEST,
    Condition,
    ConditionError,
    activation,
    annotations_of,
    as_declared,
    compile_condition,
    evaluate,
    tool_matches,
)


@dataclass(frozen=True, slots=True)
class Decision:
    effect: RuleEffect
    reason: str
    rule: int | None  # index in the agent's rules; None when no rule matched
    rate: Rate | None = None
    approver: Approver = "operator"  # who approves a confirm (SPEC §16)


ALLOWED = Decision("allow", "no rule matched", None)


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    rule: ToolRule
    program: Condition | None  # None: the rule has no condition


class Policy:
    """Every agent's rules, their conditions compiled once when the sidecar starts."""

    def __init__(self, governance: Governance | None) -> None:
        rules = governance.rules if governance is not None else {}
        self._rules = {
            agent: [
                _CompiledRule(rule, compile_condition(rule.when) if rule.when else None)
                for rule in agent_rules
            ]
            for agent, agent_rules in rules.items()
        }

    def governs(self, agent: str, tool: ManagedTool) -> bool:
        """Some rule of ``agent`` names ``tool``: its calls are decided, not simply allowed."""
        return any(tool_matches(c.rule.tool, tool.name) for c in self._rules.get(agent, ()))

    def decide(
        self,
        agent: str,
        tool: ManagedTool,
        args: dict[str, Any],
        request: Mapping[str, Any] = UNTAINTED_REQUEST,
    ) -> Decision:
        """The first matching rule's decision; ``request`` is the calling request's taint."""
        variables: dict[str, Any] | None = None
        for index, compiled in enumerate(self._rules.get(agent, ())):
            rule = compiled.rule
            if not tool_matches(rule.tool, tool.name):
                continue
            if compiled.program is not None:
                if variables is None:
                    typed = as_declared(tool.input_schema, args)
                    variables = activation(agent, tool.name, annotations_of(tool), typed, request)
                try:
                    if not evaluate(compiled.program, variables):
                        continue
                except ConditionError as exc:
                    # Fail closed: a rule that cannot judge these arguments refuses them.
                    return Decision(
                        "deny", f"the rule at {rule.source} could not be evaluated: {exc}", index
                    )
            reason = rule.reason or f"{rule.effect} by the rule at {rule.source}"
            return Decision(rule.effect, reason, index, rule.rate, rule.approver)
        return ALLOWED
