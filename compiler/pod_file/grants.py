"""The grant grammar of ``tools:`` and ``tools-defaults:`` (docs/contract.md §2).

A grant item is ``...`` (splice the defaults), a service name (all its tools) or a mapping
``{service, allow, principal, defer}`` where ``allow`` is ``all`` (also when omitted) or a list
of tool names, ``principal`` (optional) names the pod principal whose credential the calls use,
and ``defer: true`` offers the granted tools only once the model has searched for them (SPEC §23).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import PlainValidator, WithJsonSchema

from ..errors import CompileError

SPREAD = "..."
ALL = "all"


@dataclass(frozen=True)
class Grant:
    service: str
    allow: Literal["all"] | tuple[str, ...]
    principal: str | None = None
    defer: bool = False


def _parse_item(value: Any) -> str | Grant:
    if value == SPREAD:
        return SPREAD
    if isinstance(value, str):
        if not value:
            raise ValueError("a grant needs a service name")
        return Grant(service=value, allow=ALL)
    if not isinstance(value, dict):
        raise ValueError("a grant is '...', a service name, or a mapping {service, allow}")
    unknown = sorted(set(value) - {"service", "allow", "principal", "defer"})
    if unknown:
        raise ValueError(
            f"unknown field '{unknown[0]}' in grant (expected service, allow, principal, defer)"
        )
    defer = value.get("defer", False)
    if not isinstance(defer, bool):
        raise ValueError("defer must be true or false")
    service = value.get("service")
    if not isinstance(service, str) or not service:
        raise ValueError("a grant mapping needs 'service: NAME'")
    principal = value.get("principal")
    if principal is not None and (not isinstance(principal, str) or not principal):
        raise ValueError("principal must name a principal of x-claw.principals")
    if "allow" not in value or value["allow"] == ALL:
        return Grant(service=service, allow=ALL, principal=principal, defer=defer)
    allow = value["allow"]
    if not isinstance(allow, list):
        raise ValueError("allow must be 'all' or a list of tool names")
    if not allow:
        raise ValueError("allow is empty; omit the grant, or write allow: all")
    if any(not isinstance(name, str) or not name for name in allow):
        raise ValueError("allow must list tool names (strings)")
    if ALL in allow:
        raise ValueError("allow: 'all' cannot be combined with tool names")
    return Grant(service=service, allow=tuple(allow), principal=principal, defer=defer)


_ITEM_SCHEMA = {
    "anyOf": [
        {"const": SPREAD, "description": "splice tools-defaults here"},
        {"type": "string", "description": "a service: all of its tools"},
        {
            "type": "object",
            "properties": {
                "service": {"type": "string"},
                "principal": {"type": "string", "description": "a key of x-claw.principals"},
                "defer": {
                    "type": "boolean",
                    "description": "offer these tools only once the model searched for them",
                },
                "allow": {
                    "anyOf": [
                        {"const": ALL},
                        {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    ]
                },
            },
            "required": ["service"],
            "additionalProperties": False,
        },
    ]
}

GrantItem = Annotated[Any, PlainValidator(_parse_item), WithJsonSchema(_ITEM_SCHEMA)]
"""A parsed grant item: :data:`SPREAD` or a :class:`Grant`."""


@dataclass(frozen=True)
class Located:
    """A grant with the path of the item it came from, for error messages."""

    grant: Grant
    path: tuple[str | int, ...]


def expand(
    declared: Sequence[str | Grant] | None,
    declared_path: tuple[str | int, ...],
    defaults: Sequence[str | Grant] | None,
    defaults_path: tuple[str | int, ...],
    fail: Callable[[str, tuple[str | int, ...]], CompileError],
) -> list[Located]:
    """Apply inheritance, replacement and ``...`` splicing; return the grants in order."""
    default_items = [
        Located(item, (*defaults_path, i))
        for i, item in enumerate(defaults or [])
        if isinstance(item, Grant)
    ]
    if declared is None:
        return default_items
    result: list[Located] = []
    spread_at: int | None = None
    for index, item in enumerate(declared):
        if item == SPREAD:
            path = (*declared_path, index)
            if spread_at is not None:
                raise fail(f"'...' may appear only once (already at item {spread_at})", path)
            if defaults is None:
                raise fail("'...' splices tools-defaults, but the pod declares none", path)
            spread_at = index
            result += default_items
        else:
            assert isinstance(item, Grant)
            result.append(Located(item, (*declared_path, index)))
    return result


@dataclass
class ServiceGrant:
    """The union of one service's grants for one agent."""

    service: str
    all: bool
    names: list[str]
    name_paths: dict[str, tuple[str | int, ...]]
    path: tuple[str | int, ...]
    principal: str | None = None
    principal_path: tuple[str | int, ...] | None = None
    defer_all: bool = False
    """A grant of all the service's tools said ``defer: true``."""
    deferred: set[str] = field(default_factory=set)
    """Tools a grant naming them said ``defer: true`` of."""

    def defers(self, tool: str) -> bool:
        return self.defer_all or tool in self.deferred


def union(
    grants: Sequence[Located], fail: Callable[[str, tuple[str | int, ...]], CompileError]
) -> list[ServiceGrant]:
    """Union per service: ``all`` wins; duplicates collapse where they first occurred. One
    agent's grants of one service use one principal (or none)."""
    merged: dict[str, ServiceGrant] = {}
    for located in grants:
        grant = located.grant
        entry = merged.setdefault(
            grant.service, ServiceGrant(grant.service, False, [], {}, located.path)
        )
        if entry.principal_path is None:
            entry.principal = grant.principal
            entry.principal_path = (*located.path, "principal")
        elif entry.principal != grant.principal:
            raise fail(
                f"grants of service '{grant.service}' name different principals "
                f"({entry.principal or 'none'} and {grant.principal or 'none'}); "
                "one agent uses one credential per service",
                located.path,
            )
        if grant.allow == ALL:
            entry.all = True
            entry.defer_all = entry.defer_all or grant.defer
            continue
        if grant.defer:
            entry.deferred.update(grant.allow)
        for position, name in enumerate(grant.allow):
            if name not in entry.name_paths:
                entry.names.append(name)
                entry.name_paths[name] = (*located.path, "allow", position)
    return list(merged.values())
