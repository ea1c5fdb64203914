"""Generate large pod files for compile-time measurements (docs/contract.md §6: 100 agents x
20 services x 20 tools in <= 2 s)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


def _descriptor(service: int, tools: int) -> dict:
    return {
        "version": 2,
        "description": f"Synthetic service {service}.",
        "auth": {"type": "bearer", "env": f"SVC{service}_TOKEN"},
        "tools": [
            {
                "name": f"op_{tool}",
                "description": f"Operation {tool} of service {service}.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "item_id": {"type": "string", "description": "Item id"},
                        "count": {"type": "integer", "minimum": 1, "maximum": 100 + tool},
                        "mode": {"enum": ["fast", "safe"]},
                    },
                    "required": ["item_id"],
                },
                "annotations": {"readOnlyHint": tool % 2 == 0},
                "http": {
                    "method": "GET" if tool % 2 == 0 else "POST",
                    "path": f"/svc{service}/op{tool}/{{item_id}}",
                },
            }
            for tool in range(tools)
        ],
    }


def write_big_pod(directory: Path, agents: int = 100, services: int = 20, tools: int = 20) -> Path:
    """Write a pod where every agent is granted every tool of every service; return the pod file."""
    directory.mkdir(parents=True, exist_ok=True)
    compose: dict = {
        "x-claw": {"pod": "big", "tools-defaults": [f"svc{s}" for s in range(services)]},
        "services": {},
    }
    for s in range(services):
        (directory / f"svc{s}.json").write_text(json.dumps(_descriptor(s, tools)))
        compose["services"][f"svc{s}"] = {
            "image": "example/tool",
            "expose": ["8000"],
            "x-claw": {"describe": f"svc{s}.json"},
        }
    for a in range(agents):
        compose["services"][f"agent{a}"] = {"image": "example/agent", "x-claw": {"agent": {}}}
    pod = directory / "pod.yml"
    pod.write_text(yaml.safe_dump(compose, sort_keys=False))
    return pod


# --- a catalog of many distinct tools (SPEC §23: tool search over a large grant) --------------

DOMAINS = [
    ("calendar", "event"),
    ("billing", "invoice"),
    ("weather", "forecast"),
    ("crm", "contact"),
    ("tickets", "ticket"),
    ("storage", "file"),
    ("mail", "message"),
    ("hr", "employee"),
    ("inventory", "product"),
    ("shipping", "parcel"),
    ("payments", "refund"),
    ("analytics", "report"),
    ("wiki", "page"),
    ("chat", "channel"),
    ("builds", "pipeline"),
    ("dns", "record"),
    ("cloud", "instance"),
    ("database", "backup"),
    ("travel", "booking"),
    ("recruiting", "candidate"),
    ("legal", "contract"),
    ("marketing", "campaign"),
    ("support", "article"),
    ("fleet", "vehicle"),
    ("security", "alert"),
]
VERBS = [
    ("create", "Create a new {o} in {d}"),
    ("delete", "Delete one {o} from {d} for good"),
    ("update", "Change the fields of an existing {o} in {d}"),
    ("get", "Read one {o} of {d} by its id"),
    ("list", "List every {o} of {d}, newest first"),
    ("search", "Find {o} entries of {d} matching free text"),
    ("archive", "Archive an old {o} of {d}"),
    ("restore", "Bring back an archived {o} of {d}"),
    ("share", "Share a {o} of {d} with a colleague"),
    ("export", "Export {o} data of {d} as CSV"),
    ("import", "Import {o} data into {d} from CSV"),
    ("assign", "Assign a {o} of {d} to an owner"),
    ("tag", "Add a label to a {o} in {d}"),
    ("comment", "Write a comment on a {o} of {d}"),
    ("approve", "Approve a pending {o} in {d}"),
    ("reject", "Reject a pending {o} in {d}"),
    ("count", "Count the {o} entries of {d}"),
    ("duplicate", "Copy a {o} of {d} into a new one"),
    ("lock", "Lock a {o} of {d} against edits"),
    ("history", "Show the change history of a {o} in {d}"),
]
# How a person asks for each verb without naming the tool (the held-out questions' words).
ASKED = {
    "create": "please make a new {o} in {d}",
    "delete": "remove this {o} from {d} for good",
    "update": "change the fields of the {o} in {d}",
    "get": "read the {o} in {d} with id 42",
    "list": "show me every {o} in {d}, newest first",
    "search": "find {o} entries in {d} that match the words blue sky",
    "archive": "archive the old {o} in {d}",
    "restore": "bring back the archived {o} in {d}",
    "share": "share the {o} in {d} with my colleague",
    "export": "export the {o} data of {d} as CSV",
    "import": "import {o} data from this CSV into {d}",
    "assign": "assign the {o} in {d} to an owner",
    "tag": "add a label to the {o} in {d}",
    "comment": "write a comment on the {o} in {d}",
    "approve": "approve the pending {o} in {d}",
    "reject": "reject the pending {o} in {d}",
    "count": "how many {o} entries does {d} have",
    "duplicate": "copy the {o} in {d} into a new one",
    "lock": "lock the {o} in {d} against edits",
    "history": "show the change history of the {o} in {d}",
}


def catalog_tool_names() -> list[str]:
    """Canonical names of the catalog's 500 tools, in grant order."""
    return [f"{d}.{verb}_{o}" for d, o in DOMAINS for verb, _ in VERBS]


def _catalog_descriptor(domain: str, thing: str) -> dict:
    return {
        "version": 2,
        "description": f"The {domain} service.",
        "tools": [
            {
                "name": f"{verb}_{thing}",
                "description": text.format(o=thing, d=domain) + ".",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        f"{thing}_id": {"type": "string", "description": f"The {thing}'s id"},
                        "note": {"type": "string"},
                    },
                },
                "annotations": {"readOnlyHint": True},
                "http": {"method": "GET", "path": f"/{domain}/{verb}"},
            }
            for verb, text in VERBS
        ],
    }


def held_out_questions(count: int = 50) -> list[tuple[str, str]]:
    """``count`` questions, each with the canonical name of the tool that answers it, spread
    over every domain and verb (never the tool's own name or description as written)."""
    pairs = [(d, o, verb) for d, o in DOMAINS for verb, _ in VERBS]
    step = len(pairs) // count
    chosen = [pairs[(i * step + i) % len(pairs)] for i in range(count)]
    return [(ASKED[verb].format(o=o, d=d), f"{d}.{verb}_{o}") for d, o, verb in chosen]


def write_catalog_pod(
    directory: Path,
    provider_url: str,
    service_url: str,
    defer_over: int | None,
    services: int = len(DOMAINS),
) -> Path:
    """A pod of one agent granted the catalog's tools (``services`` services of 20: 500 for all
    25), served at ``service_url``, its model at ``provider_url`` (Chat Completions);
    ``defer_over`` is the pod's ``defer-tools-over`` (None: every tool injected)."""
    directory.mkdir(parents=True, exist_ok=True)
    claw: dict = {
        "pod": "catalog",
        "providers": {
            "openai": {
                "api": "openai",
                "base-url": provider_url,
                "key-env": "OPENAI_API_KEY",
                "models": ["gpt-*"],
            }
        },
    }
    if defer_over is not None:
        claw["defer-tools-over"] = defer_over
    compose: dict = {"x-claw": claw, "services": {}}
    for domain, thing in DOMAINS[:services]:
        (directory / f"{domain}.json").write_text(json.dumps(_catalog_descriptor(domain, thing)))
        compose["services"][domain] = {
            "image": "example/tool",
            "x-claw": {"describe": f"{domain}.json", "url": service_url},
        }
    compose["services"]["agent"] = {
        "image": "example/agent",
        "x-claw": {"agent": {}, "tools": [d for d, _ in DOMAINS[:services]]},
    }
    pod = directory / "pod.yml"
    pod.write_text(yaml.safe_dump(compose, sort_keys=False))
    return pod
