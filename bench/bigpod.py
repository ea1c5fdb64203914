"""Generate a large pod (agents x services x tools) for the compile-time benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


def _descriptor(service: int, tools: int) -> dict:
    return {
        "version": 2,
        "description": f"Generated service {service} for the compile benchmark.",
        "auth": {"type": "bearer", "env": f"SVC{service}_TOKEN"},
        "tools": [
            {
                "name": f"op_{tool}",
                "description": f"Operation {tool} of service {service}.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "item": {"type": "string", "maxLength": 64},
                        "count": {"type": "integer", "minimum": 1},
                        "mode": {"enum": ["fast", "full"]},
                    },
                    "required": ["item"],
                },
                "annotations": {"readOnlyHint": tool % 2 == 0},
                "http": {
                    "method": "POST" if tool % 2 else "GET",
                    "path": f"/api/op_{tool}/{{item}}",
                },
            }
            for tool in range(tools)
        ],
    }


def write_big_pod(root: Path, agents: int, services: int, tools: int) -> Path:
    """Write descriptors and a pod file granting every agent all tools of every service."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "descriptors").mkdir(exist_ok=True)
    compose: dict = {
        "x-claw": {"pod": "bigpod", "mode": "mediated"},
        "services": {},
    }
    for service in range(services):
        name = f"svc-{service}"
        path = root / "descriptors" / f"{name}.json"
        path.write_text(json.dumps(_descriptor(service, tools), indent=2))
        compose["services"][name] = {
            "image": "example/service",
            "expose": ["8000"],
            "x-claw": {"describe": f"descriptors/{name}.json"},
        }
    grants = [f"svc-{service}" for service in range(services)]
    for agent in range(agents):
        compose["services"][f"agent-{agent}"] = {
            "image": "example/agent",
            "x-claw": {"agent": {}, "tools": grants},
        }
    pod = root / "pod.yaml"
    pod.write_text(yaml.safe_dump(compose, sort_keys=False))
    return pod
