"""Ready-to-use MCP configs for native runners (contract §7.5): literal token, only under
agents/, mode 0600; native agents get the context's config (no token) at /claw/mcp.json."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from clawpod.compiler.output.build import read_token, write_build
from clawpod.compiler.pod import compile_pod
from tests.compiler.conftest import EXAMPLE_POD

MCP_URL = "http://claw-sidecar:8080/mcp"


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runner-configs") / "build"
    write_build(compile_pod(EXAMPLE_POD), out)
    return out


@pytest.mark.parametrize("agent", ["analyst", "trader"])
def test_the_mcp_config_holds_the_literal_token(out: Path, agent: str) -> None:
    token = read_token(out / "agents" / f"{agent}.env")
    path = out / "agents" / f"{agent}.mcp.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    server = json.loads(path.read_text())["mcpServers"]["clawpod"]
    # One transport key: langchain-mcp-adapters passes any key it does not know (here "type")
    # on to its transport and fails, so its family gets a file of its own (below).
    assert server == {
        "type": "http",
        "url": MCP_URL,
        "headers": {"Authorization": f"Bearer {token}"},
    }


@pytest.mark.parametrize("agent", ["analyst", "trader"])
def test_the_langchain_config_is_multiserver_connections_with_the_literal_token(
    out: Path, agent: str
) -> None:
    token = read_token(out / "agents" / f"{agent}.env")
    path = out / "agents" / f"{agent}.langchain.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "clawpod": {
            "transport": "http",
            "url": MCP_URL,
            "headers": {"Authorization": f"Bearer {token}"},
        }
    }


@pytest.mark.parametrize("agent", ["analyst", "trader"])
def test_the_codex_config_is_toml_with_the_literal_token(out: Path, agent: str) -> None:
    token = read_token(out / "agents" / f"{agent}.env")
    path = out / "agents" / f"{agent}.codex.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    server = tomllib.loads(path.read_text())["mcp_servers"]["clawpod"]
    assert server == {"url": MCP_URL, "http_headers": {"Authorization": f"Bearer {token}"}}


def test_native_agents_get_the_literal_config_mounted(out: Path) -> None:
    services = yaml.safe_load((out / "compose.yml").read_text())["services"]
    # The mounted one is the context's (no token; readable by any agent user).
    assert "./context/trader/mcp.json:/claw/mcp.json:ro" in services["trader"]["volumes"]
    assert not any("/claw/mcp.json" in v for v in services["analyst"]["volumes"])


def test_the_context_config_still_names_the_token_by_reference(out: Path) -> None:
    text = (out / "context" / "trader" / "mcp.json").read_text()
    assert "${CLAW_AGENT_TOKEN}" in text
    assert read_token(out / "agents" / "trader.env") not in text
