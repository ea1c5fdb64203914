"""Helpers for compiler tests: small pod files and descriptors written into a temporary dir."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from clawpod.compiler.errors import CompileError
from clawpod.compiler.pod import CompiledPod, compile_pod

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = REPO / "compose" / "examples" / "trading-desk"
EXAMPLE_POD = EXAMPLE_DIR / "pod.yml"


def tool(name: str, method: str = "GET", path: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The {name} operation.",
        "inputSchema": extra.pop("inputSchema", {"type": "object", "properties": {}}),
        "http": {"method": method, "path": path or f"/{name}", **extra.pop("http", {})},
        **extra,
    }


def descriptor(*tools: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"version": 2, "description": "A service.", "tools": list(tools), **extra}


class PodDir:
    """A temporary pod directory: ``pod(yaml)`` writes pod.yml, ``descriptor`` writes JSON."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def descriptor(self, name: str, data: dict[str, Any] | str) -> Path:
        path = self.root / name
        path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
        return path

    def pod(self, text: str) -> Path:
        path = self.root / "pod.yml"
        path.write_text(textwrap.dedent(text))
        return path

    def compile(self, text: str) -> CompiledPod:
        return compile_pod(self.pod(text))

    def error(self, text: str) -> CompileError:
        with pytest.raises(CompileError) as caught:
            compile_pod(self.pod(text))
        return caught.value

    def line_of(self, needle: str) -> int:
        """1-based line of the first line of pod.yml containing ``needle``."""
        lines = (self.root / "pod.yml").read_text().splitlines()
        return next(i for i, line in enumerate(lines, 1) if needle in line)


@pytest.fixture
def pod_dir(tmp_path: Path) -> PodDir:
    """A pod dir with two tool services' descriptors: svc (a, b, c) and other (x, y)."""
    directory = PodDir(tmp_path)
    directory.descriptor("svc.json", descriptor(tool("a"), tool("b"), tool("c", "POST")))
    directory.descriptor(
        "other.json",
        descriptor(tool("x"), tool("y"), auth={"type": "bearer", "env": "OTHER_TOKEN"}),
    )
    return directory


TOOL_SERVICES = """\
  svc:
    image: example/svc
    expose: ["8000"]
    x-claw: {describe: svc.json}
  other:
    image: example/other
    x-claw: {describe: other.json}
"""


def granted(pod: CompiledPod, agent_id: str) -> list[str]:
    agent = next(a for a in pod.agents if a.id == agent_id)
    return [f"{service.name}.{t.name}" for service, t in agent.tools]
