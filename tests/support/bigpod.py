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
