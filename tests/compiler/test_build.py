"""Build output (docs/contract.md §3): every file of a compiled example, recompiles, compose."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from clawpod.compiler.errors import CompileError
from clawpod.compiler.output.build import read_token, write_build
from clawpod.compiler.pod import compile_pod
from clawpod.sidecar.manifest import (
    AgentManifest,
    SidecarConfig,
    ToolsManifest,
    definition_pin,
    dump_json,
    load_build,
    token_sha256,
)
from tests.compiler.conftest import EXAMPLE_POD, TOOL_SERVICES, PodDir

# Every variable of the example pod that holds a secret (the sidecar's; never an agent's).
CREDENTIALS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TRADING_RO_TOKEN",
    "TRADING_RW_TOKEN",
    "NEWS_API_KEY",
    "RESEARCH_API_TOKEN",
    "CLAW_OPERATOR_TOKEN",
)

EXPECTED_FILES = {
    "compose.yml",
    "sidecar.json",
    "digest.json",
    *(
        f"agents/{a}.{f}"
        for a in ("analyst", "trader")
        for f in ("env", "mcp.json", "codex.toml", "langchain.json")
    ),
    *(
        f"context/{a}/{f}"
        for a in ("analyst", "trader")
        for f in ("tools.json", "agent.json", "CONTEXT.md", "mcp.json")
    ),
}


def files_of(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def example_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("example") / "build"
    write_build(compile_pod(EXAMPLE_POD), out)
    return out


def compose_of(out: Path) -> dict[str, Any]:
    return yaml.safe_load((out / "compose.yml").read_text())


def test_every_listed_file_is_written(example_out: Path) -> None:
    assert set(files_of(example_out)) == EXPECTED_FILES


def test_env_files_are_private_and_hold_the_standard_variables(example_out: Path) -> None:
    assert stat.S_IMODE((example_out / "agents").stat().st_mode) == 0o700
    for agent in ("analyst", "trader"):
        path = example_out / "agents" / f"{agent}.env"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        values = dict(
            line.split("=", 1)
            for line in path.read_text().splitlines()
            if line and not line.startswith("#")
        )
        token = values["CLAW_AGENT_TOKEN"]
        assert token.startswith("claw_") and len(token) > 40
        assert values == {
            "CLAW_AGENT_TOKEN": token,
            "CLAW_MCP_URL": "http://claw-sidecar:8080/mcp",
            "OPENAI_BASE_URL": "http://claw-sidecar:8080/v1",
            "OPENAI_API_KEY": token,
            "ANTHROPIC_BASE_URL": "http://claw-sidecar:8080",
            "ANTHROPIC_API_KEY": token,
        }


def test_the_sidecar_loads_and_verifies_the_build(example_out: Path) -> None:
    build = load_build(example_out)
    assert build.config.agents == ["analyst", "trader"]
    assert build.agents["trader"].agent.mode == "native"
    assert build.agents["analyst"].agent.mode == "mediated"


def test_context_files_are_the_canonical_dump_of_the_manifest_models(example_out: Path) -> None:
    for agent in ("analyst", "trader"):
        directory = example_out / "context" / agent
        tools_text = (directory / "tools.json").read_text()
        assert tools_text == dump_json(ToolsManifest.model_validate_json(tools_text))
        agent_text = (directory / "agent.json").read_text()
        assert agent_text == dump_json(AgentManifest.model_validate_json(agent_text))
    sidecar_text = (example_out / "sidecar.json").read_text()
    assert sidecar_text == dump_json(SidecarConfig.model_validate_json(sidecar_text))


def test_tools_json_entry_is_exactly_as_specified(example_out: Path) -> None:
    tools = json.loads((example_out / "context" / "analyst" / "tools.json").read_text())
    assert list(tools) == ["version", "agent", "tools", "policy"]
    assert tools["version"] == 1 and tools["agent"] == "analyst"
    assert tools["tools"][0] == {
        "name": "trading-api.get_market_context",
        "presented": "trading-api_get_market_context",
        "description": "Positions, balance and buying power for the calling agent.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"title": "Market context", "readOnlyHint": True},
        "execution": {
            "transport": "http",
            "service": "trading-api",
            "base_url": "http://trading-api:4000",
            "method": "GET",
            "path": "/api/v1/market_context/{claw_id}",
            "body": "none",
            # The grant's principal picks the credential (docs/governance.md).
            "auth": {"type": "bearer", "env": "TRADING_RO_TOKEN", "principal": "desk-readonly"},
        },
        # §11.2: the definition as the descriptor states it, pinned (and digest-covered).
        "pin": definition_pin(
            "get_market_context",
            "Positions, balance and buying power for the calling agent.",
            {"type": "object", "properties": {}},
            {"title": "Market context", "readOnlyHint": True},
        ),
        # Issue 23: what running it does, decided once from the annotations.
        "effect": "read-only",
    }
    assert tools["policy"] == {
        "max_rounds": 8,
        "timeout_per_tool_ms": 30000,
        "total_timeout_ms": 120000,
        "max_tool_result_bytes": 16384,
    }
    trader = json.loads((example_out / "context" / "trader" / "tools.json").read_text())
    trade = next(t for t in trader["tools"] if t["name"] == "trading-api.execute_trade")
    assert trade["execution"]["body"] == "json" and trade["execution"]["body_key"] == "trade"
    assert trade["execution"]["auth"] == {
        "type": "bearer",
        "env": "TRADING_RW_TOKEN",
        "principal": "desk-trader",
    }
    analyst = json.loads((example_out / "context" / "analyst" / "tools.json").read_text())
    research = next(t for t in analyst["tools"] if t["name"] == "research-mcp.get_fundamentals")
    assert research["execution"] == {
        "transport": "mcp",
        "service": "research-mcp",
        "base_url": "http://research-mcp:4200",
        "path": "/mcp",
        "tool": "get_fundamentals",
        "ttl_ms": research["execution"]["ttl_ms"],
        "auth": {"type": "bearer", "env": "RESEARCH_API_TOKEN"},
    }
    news = next(t for t in trader["tools"] if t["name"] == "market-news.search_news")
    assert news["execution"]["auth"] == {
        "type": "header",
        "env": "NEWS_API_KEY",
        "header": "X-News-Key",
    }


def test_grants_differ_per_agent(example_out: Path) -> None:
    def names(agent: str) -> list[str]:
        return [
            t["name"]
            for t in json.loads((example_out / "context" / agent / "tools.json").read_text())[
                "tools"
            ]
        ]

    assert names("analyst") == [
        "trading-api.get_market_context",
        "trading-api.get_quote",
        "market-news.search_news",
        "market-news.get_article",
        "research-mcp.get_fundamentals",
    ]
    assert names("trader") == [
        "trading-api.get_market_context",
        "trading-api.get_quote",
        "trading-api.execute_trade",
        "trading-api.list_trades",
        "trading-api.cancel_trade",
        "market-news.search_news",
        "market-news.get_article",
    ]


def test_agent_json_holds_identity_policy_and_reversible_names(example_out: Path) -> None:
    manifest = AgentManifest.model_validate_json(
        (example_out / "context" / "trader" / "agent.json").read_bytes()
    )
    token = read_token(example_out / "agents" / "trader.env")
    assert token is not None and manifest.token_sha256 == token_sha256(token)
    assert manifest.policy.max_rounds == 4 and manifest.policy.total_timeout_ms == 180000
    tools = ToolsManifest.model_validate_json(
        (example_out / "context" / "trader" / "tools.json").read_bytes()
    )
    assert manifest.names == {t.presented: t.name for t in tools.tools}


def test_context_md_lists_tools_and_skills_without_urls(example_out: Path) -> None:
    analyst = (example_out / "context" / "analyst" / "CONTEXT.md").read_text()
    trader = (example_out / "context" / "trader" / "CONTEXT.md").read_text()
    assert "`trading-api_get_market_context`" in analyst and "`market-news_search_news`" in analyst
    assert "execute_trade" not in analyst and "`trading-api_execute_trade`" in trader
    assert "# Trading policy" in analyst
    for text in (analyst, trader):
        assert "://" not in text and "4000" not in text and "claw-sidecar" not in text
        assert "TRADING_RO_TOKEN" not in text and "TRADING_RW_TOKEN" not in text
        assert "claw_" not in text


def test_mcp_json_points_at_the_sidecar_without_a_token(example_out: Path) -> None:
    config = json.loads((example_out / "context" / "trader" / "mcp.json").read_text())
    assert config == {
        "mcpServers": {
            "clawpod": {
                "type": "http",
                "url": "http://claw-sidecar:8080/mcp",
                "headers": {"Authorization": "Bearer ${CLAW_AGENT_TOKEN}"},
            }
        }
    }


def test_sidecar_json(example_out: Path) -> None:
    config = SidecarConfig.model_validate_json((example_out / "sidecar.json").read_bytes())
    assert config.pod == "trading-desk"
    assert (config.listen.host, config.listen.port, config.state_dir) == (
        "0.0.0.0",
        8080,
        "/var/lib/claw",
    )
    assert {n: p.key_env for n, p in config.providers.items()} == {
        "openai": "OPENAI_API_KEY",
        "anthropic": "ANTHROPIC_API_KEY",
    }


def test_recompile_is_byte_identical_and_keeps_tokens(tmp_path: Path) -> None:
    out = tmp_path / "build"
    pod = compile_pod(EXAMPLE_POD)
    write_build(pod, out)
    first = files_of(out)
    write_build(compile_pod(EXAMPLE_POD), out)
    assert files_of(out) == first


def test_rotate_tokens_changes_only_token_files(tmp_path: Path) -> None:
    out = tmp_path / "build"
    write_build(compile_pod(EXAMPLE_POD), out)
    before = files_of(out)
    write_build(compile_pod(EXAMPLE_POD), out, rotate_tokens=True)
    after = files_of(out)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {
        *(
            f"agents/{a}.{f}"
            for a in ("analyst", "trader")
            for f in ("env", "mcp.json", "codex.toml", "langchain.json")
        ),
        "context/analyst/agent.json",
        "context/trader/agent.json",
        "digest.json",
    }
    load_build(out)


def test_removed_agents_leave_no_files_behind(pod_dir: PodDir, tmp_path: Path) -> None:
    out = tmp_path / "out"
    two = (
        "services:\n"
        + TOOL_SERVICES
        + "  a:\n    image: x\n    x-claw: {agent: {}}\n"
        + "  b:\n    image: x\n    x-claw: {agent: {}}\n"
    )
    write_build(pod_dir.compile(two), out)
    write_build(pod_dir.compile(two.split("  b:\n")[0]), out)
    assert not (out / "context" / "b").exists() and not (out / "agents" / "b.env").exists()
    assert load_build(out).config.agents == ["a"]


def test_refuses_to_write_into_a_directory_that_is_not_a_build(tmp_path: Path) -> None:
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(CompileError, match="not a clawc build"):
        write_build(compile_pod(EXAMPLE_POD), out)
    assert (out / "notes.txt").read_text() == "keep me"


def test_generated_compose_wires_agents_sidecar_and_tools(example_out: Path) -> None:
    compose = compose_of(example_out)
    assert "x-claw" not in (example_out / "compose.yml").read_text()
    assert compose["name"] == "trading-desk"
    services = compose["services"]
    assert set(services) == {
        "trading-api",
        "market-news",
        "research-mcp",
        "analyst",
        "trader",
        "claw-sidecar",
    }
    networks = compose["networks"]
    assert set(networks) == {"claw-agents", "claw-tools", "claw-egress", "claw-admin"}
    for internal in ("claw-agents", "claw-tools"):
        # SPEC §10: no gateway address on the host for Docker >= 28; a bridge name the
        # firewall step of docs/running-a-pod.md matches on older engines.
        assert networks[internal]["internal"] is True
        options = networks[internal]["driver_opts"]
        assert options["com.docker.network.bridge.gateway_mode_ipv4"] == "isolated"
        assert options["com.docker.network.bridge.name"].startswith("clawi")
        assert len(options["com.docker.network.bridge.name"]) <= 15
    assert networks["claw-egress"] == {"driver": "bridge"}
    assert networks["claw-admin"] == {"internal": True}
    for agent in ("analyst", "trader"):  # the operator listener is out of the agents' reach
        assert "claw-admin" not in services[agent]["networks"]
    sidecar_json = json.loads((example_out / "sidecar.json").read_text())
    assert sidecar_json["admin_listen"] == {"host": "claw-sidecar-admin", "port": 9090}
    assert "claw-sidecar" in sidecar_json["allowed_hosts"]
    assert "claw-state" in compose["volumes"]
    sidecar = services["claw-sidecar"]
    assert sidecar["networks"] == {
        "claw-agents": None,
        "claw-tools": None,
        "claw-egress": None,
        "claw-admin": {"aliases": ["claw-sidecar-admin"]},
    }
    assert sidecar["command"] == [
        "python",
        "-m",
        "clawpod.sidecar",
        "--build",
        "/claw/build",
        "--state-dir",
        "/var/lib/claw",
    ]
    assert sidecar["volumes"] == [
        "./context:/claw/build/context:ro",
        "./sidecar.json:/claw/build/sidecar.json:ro",
        "./digest.json:/claw/build/digest.json:ro",
        "claw-state:/var/lib/claw",
    ]
    assert sidecar["environment"] == {
        name: "${" + name + "}"
        for name in (
            "ANTHROPIC_API_KEY",
            "CLAW_AUDIT_KEY",  # the audit chain's HMAC key (docs/contract.md §10)
            "CLAW_OPERATOR_TOKEN",  # the pod's orders wait for approvals (§9.3)
            "NEWS_API_KEY",
            "OPENAI_API_KEY",
            "RESEARCH_API_TOKEN",
            "TRADING_RO_TOKEN",  # the two principals' credentials, not the descriptor's default
            "TRADING_RW_TOKEN",
        )
    }
    assert "healthz" in " ".join(sidecar["healthcheck"]["test"])
    assert sidecar["build"]["args"] == {"BASE_IMAGE": "${CLAW_BASE_IMAGE:-python:3.11-slim}"}
    assert ((example_out / sidecar["build"]["context"]) / "sidecar" / "manifest.py").is_file()
    assert sidecar["image"].startswith("clawpod/sidecar:")
    for agent in ("analyst", "trader"):
        service = services[agent]
        assert service["networks"] == ["claw-agents"]
        assert service["env_file"] == [f"agents/{agent}.env"]
        assert service["depends_on"] == {"claw-sidecar": {"condition": "service_healthy"}}
        assert not any("tools.json" in v or "sidecar.json" in v for v in service["volumes"])
        assert (example_out / service["build"]).is_dir()
    assert services["analyst"]["volumes"] == ["./context/analyst/CONTEXT.md:/claw/CONTEXT.md:ro"]
    assert services["trader"]["volumes"] == [
        "./context/trader/CONTEXT.md:/claw/CONTEXT.md:ro",
        "./context/trader/mcp.json:/claw/mcp.json:ro",
    ]
    for tool in ("trading-api", "market-news", "research-mcp"):
        assert "claw-tools" in services[tool]["networks"]
        assert (example_out / services[tool]["build"] / "app.py").is_file()


def test_credential_references_appear_on_the_sidecar_only_among_generated_services(
    example_out: Path,
) -> None:
    services = compose_of(example_out)["services"]
    for agent in ("analyst", "trader"):
        text = json.dumps(services[agent])
        for name in CREDENTIALS:
            assert name not in text


def test_counted_agents_surfaces_and_dependencies(pod_dir: PodDir, tmp_path: Path) -> None:
    text = (
        "services:\n"
        + TOOL_SERVICES
        + """\
  db:
    image: postgres
    networks: [back]
  crew:
    image: example/agent
    env_file: ./crew.env
    volumes: ["./data:/data", "named:/cache"]
    depends_on: [db]
    x-claw:
      agent: {count: 2}
      tools: [svc]
      surfaces: ["service://db"]
  watcher:
    image: example/watch
    depends_on: [crew]
networks:
  back: {}
volumes:
  named: {}
"""
    )
    (pod_dir.root / "crew.env").write_text("LOG=1\n")
    out = tmp_path / "deep" / "out"
    write_build(pod_dir.compile(text), out, sidecar_image="registry.example/sidecar:1")
    services = compose_of(out)["services"]
    assert {"crew-0", "crew-1"} <= set(services) and "crew" not in services
    crew = services["crew-1"]
    assert crew["networks"] == ["claw-agents", "claw-surface-db"]
    assert crew["env_file"] == ["../../crew.env", "agents/crew-1.env"]
    assert crew["volumes"][:2] == ["../../data:/data", "named:/cache"]
    assert crew["depends_on"] == {
        "db": {"condition": "service_started"},
        "claw-sidecar": {"condition": "service_healthy"},
    }
    assert services["watcher"]["depends_on"] == {
        "crew-0": {"condition": "service_started"},
        "crew-1": {"condition": "service_started"},
    }
    assert services["db"]["networks"] == ["back", "claw-surface-db"]
    assert services["svc"]["networks"] == ["default", "claw-tools"]
    assert services["claw-sidecar"]["image"] == "registry.example/sidecar:1"
    assert "build" not in services["claw-sidecar"]
    assert compose_of(out)["networks"]["claw-surface-db"] == {"internal": True}


def test_a_skill_that_reveals_a_service_url_is_refused(pod_dir: PodDir, tmp_path: Path) -> None:
    (pod_dir.root / "leaky.md").write_text("Call http://svc:8000/a directly if the tool is slow.\n")
    data = json.loads((pod_dir.root / "svc.json").read_text())
    pod_dir.descriptor("svc.json", {**data, "skill": "leaky.md"})
    pod = pod_dir.compile(
        "services:\n"
        + TOOL_SERVICES
        + "  bot:\n    image: x\n    x-claw: {agent: {}, tools: [svc]}\n"
    )
    with pytest.raises(CompileError, match="reveals the service URL http://svc:8000") as caught:
        write_build(pod, tmp_path / "out")
    assert "svc.json" in str(caught.value)


def test_big_pod_helper_compiles_into_a_loadable_build(tmp_path: Path) -> None:
    from tests.support.bigpod import write_big_pod

    pod = compile_pod(write_big_pod(tmp_path / "big", agents=3, services=2, tools=4))
    write_build(pod, tmp_path / "big" / "build")
    build = load_build(tmp_path / "big" / "build")
    assert sorted(build.agents) == ["agent0", "agent1", "agent2"]
    assert all(len(a.tools.tools) == 8 for a in build.agents.values())
    assert build.agents["agent2"].agent.names["svc1_op_3"] == "svc1.op_3"


def test_anchored_extension_fields_lose_their_x_claw_and_aliases_are_expanded(
    pod_dir: PodDir, tmp_path: Path
) -> None:
    text = """\
x-agent: &agent
  image: example/agent
  volumes: ["./shared:/shared"]
  x-claw: {agent: {}, tools: [svc]}
services:
  svc:
    image: example/svc
    x-claw: {describe: svc.json}
  one: *agent
  two:
    <<: *agent
    image: example/other
"""
    out = tmp_path / "out"
    write_build(pod_dir.compile(text), out, sidecar_image="sidecar:1")
    generated = (out / "compose.yml").read_text()
    assert "x-claw" not in generated and "&id" not in generated and "*id" not in generated
    compose = yaml.safe_load(generated)
    assert compose["x-agent"]["image"] == "example/agent"
    assert compose["services"]["two"]["image"] == "example/other"
    assert compose["services"]["one"]["env_file"] == ["agents/one.env"]
