"""Pod file x-claw (docs/contract.md §2): pod/service blocks, agents, policy, providers,
starvation."""

from __future__ import annotations

import pytest

from clawpod.compiler.pod_file.providers import DEFAULT_PROVIDERS
from clawpod.compiler.services.tool_services import container_port
from clawpod.sidecar.manifest import ToolPolicy
from tests.compiler.conftest import TOOL_SERVICES, PodDir

AGENT = "  bot:\n    image: example/agent\n    x-claw:\n      agent: {}\n"


def agent(pod_dir: PodDir, text: str, agent_id: str = "bot"):
    return next(a for a in pod_dir.compile(text).agents if a.id == agent_id)


def test_pod_defaults(pod_dir: PodDir) -> None:
    pod = pod_dir.compile("services:\n" + TOOL_SERVICES + AGENT)
    assert pod.name == pod_dir.root.name
    assert pod.providers == DEFAULT_PROVIDERS
    assert pod.claw.on_mixed == "refuse"
    bot = pod.agents[0]
    assert (bot.id, bot.mode, bot.policy, bot.tools) == ("bot", "mediated", ToolPolicy(), [])


def test_pod_level_settings(pod_dir: PodDir) -> None:
    text = """\
    x-claw:
      pod: desk
      mode: native
      on-mixed: retry
      providers:
        local:
          {api: openai, base-url: "http://llm:8000/v1", key-env: LOCAL_KEY, models: ["llama-*"]}
        slow:
          {api: anthropic, base-url: "http://big", key-env: K, models: [x], timeout-ms: 900000}
        llama:
          {api: openai, base-url: "http://llama", key-env: K, models: [y], stream-tools: false}
    services:
      bot:
        image: example/agent
        x-claw: {agent: {}}
      other-bot:
        image: example/agent
        x-claw: {agent: {}, mode: mediated}
    """
    pod = pod_dir.compile(text)
    assert pod.name == "desk"
    assert pod.claw.on_mixed == "retry"
    assert list(pod.providers) == ["local", "slow", "llama"]
    assert pod.providers["local"].key_env == "LOCAL_KEY"
    assert pod.providers["local"].timeout_ms == 600000  # the default
    assert pod.providers["slow"].timeout_ms == 900000
    assert pod.providers["local"].stream_tools == "auto"  # the default: learned
    assert pod.providers["llama"].stream_tools is False
    assert [(a.id, a.mode) for a in pod.agents] == [("bot", "native"), ("other-bot", "mediated")]


def test_agent_count_gives_numbered_ids(pod_dir: PodDir) -> None:
    pod = pod_dir.compile("services:\n  crew:\n    image: a\n    x-claw: {agent: {count: 3}}\n")
    assert [a.id for a in pod.agents] == ["crew-0", "crew-1", "crew-2"]
    assert pod.agent_ids == {"crew": ["crew-0", "crew-1", "crew-2"]}


def test_agent_marker_may_be_empty(pod_dir: PodDir) -> None:
    pod = pod_dir.compile("services:\n  bot:\n    image: a\n    x-claw:\n      agent:\n")
    assert [a.id for a in pod.agents] == ["bot"]


def test_policy_defaults_replace_and_null(pod_dir: PodDir) -> None:
    text = """\
    x-claw:
      tool-policy-defaults:
        max-rounds: 3
        timeout-per-tool-ms: 1000
        total-timeout-ms: 5000
        max-tool-result-bytes: 100
    services:
      inherits:
        image: a
        x-claw: {agent: {}}
      replaces:
        image: a
        x-claw: {agent: {}, tool-policy: {max-rounds: 2}}
      suppresses:
        image: a
        x-claw: {agent: {}, tool-policy: null}
    """
    pod = pod_dir.compile(text)
    policies = {a.id: a.policy for a in pod.agents}
    assert policies["inherits"] == ToolPolicy(
        max_rounds=3, timeout_per_tool_ms=1000, total_timeout_ms=5000, max_tool_result_bytes=100
    )
    assert policies["replaces"] == ToolPolicy(
        max_rounds=2
    )  # wholesale: the rest are built-in defaults
    assert policies["suppresses"] == ToolPolicy()


@pytest.mark.parametrize(
    ("policy", "pointer", "reason"),
    [
        ("{max-rounds: 0}", "/services/bot/x-claw/tool-policy/max-rounds", "greater than 0"),
        (
            "{timeout-per-tool-ms: -5}",
            "/services/bot/x-claw/tool-policy/timeout-per-tool-ms",
            "greater than 0",
        ),
        ("{max-rounds: '4'}", "/services/bot/x-claw/tool-policy/max-rounds", "valid integer"),
        ("{max-rounds: 2.5}", "/services/bot/x-claw/tool-policy/max-rounds", "valid integer"),
        (
            "{timeout-per-tool-ms: 9000, total-timeout-ms: 8000}",
            "/services/bot/x-claw/tool-policy",
            "total-timeout-ms (8000) must be >= timeout-per-tool-ms (9000)",
        ),
        (
            "{max-turns: 3}",
            "/services/bot/x-claw/tool-policy/max-turns",
            "unknown field 'max-turns'",
        ),
    ],
)
def test_policy_validation(pod_dir: PodDir, policy: str, pointer: str, reason: str) -> None:
    error = pod_dir.error(
        "services:\n  bot:\n    image: a\n    x-claw:\n      agent: {}\n"
        f"      tool-policy: {policy}\n"
    )
    assert error.pointer == pointer
    assert reason in error.reason
    assert error.service == "bot"
    assert error.line == 6


def test_pod_policy_defaults_are_validated_too(pod_dir: PodDir) -> None:
    error = pod_dir.error(
        "x-claw:\n  tool-policy-defaults: {max-rounds: 0}\nservices:\n  a: {image: x}\n"
    )
    assert error.pointer == "/x-claw/tool-policy-defaults/max-rounds"
    assert error.line == 2
    assert error.service is None


@pytest.mark.parametrize(
    ("xclaw", "pointer", "reason"),
    [
        ("mode: hybrid", "/x-claw/mode", "Input should be 'mediated' or 'native'"),
        ("on-mixed: ignore", "/x-claw/on-mixed", "Input should be 'refuse' or 'retry'"),
        ("providers: {}", "/x-claw/providers", "at least 1 item"),
        (
            "providers: {p: {api: gemini, base-url: 'https://x', key-env: K, models: ['*']}}",
            "/x-claw/providers/p/api",
            "match pattern",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', key-env: K, models: ['*'], "
            "timeout-ms: 0}}",
            "/x-claw/providers/p/timeout-ms",
            "greater than 0",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', key-env: K, models: ['*'], "
            "stream-tools: sometimes}}",
            "/x-claw/providers/p/stream-tools",
            "Input should be 'auto', True or False",
        ),
        (
            "providers: {p: {api: openai, base-url: 'ftp://x', key-env: K, models: ['*']}}",
            "/x-claw/providers/p/base-url",
            "match pattern",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', key-env: 'a-b', models: ['*']}}",
            "/x-claw/providers/p/key-env",
            "match pattern",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', key-env: K, models: []}}",
            "/x-claw/providers/p/models",
            "at least 1 item",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', models: ['*']}}",
            "/x-claw/providers/p",
            "missing required field 'key-env'",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', key-env: K, models: ['gpt 4']}}",
            "/x-claw/providers/p/models/0",
            "match pattern",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', key-env: K, models: [a, a]}}",
            "/x-claw/providers/p/models",
            "listed twice: a",
        ),
        (
            "providers: {p: {api: openai, base-url: 'https://x', key-env: K, models: ['o[13*']}}",
            "/x-claw/providers/p/models",
            "unbalanced",
        ),
        ("toolz-defaults: []", "/x-claw/toolz-defaults", "unknown field 'toolz-defaults'"),
        ("pod: 'my pod'", "/x-claw/pod", "match pattern"),
    ],
)
def test_pod_x_claw_errors(pod_dir: PodDir, xclaw: str, pointer: str, reason: str) -> None:
    error = pod_dir.error(f"x-claw:\n  {xclaw}\nservices:\n  a: {{image: x}}\n")
    assert error.pointer == pointer
    assert reason in error.reason
    assert error.line == 2
    assert str(error).startswith(f"{pod_dir.root / 'pod.yml'}:2: {pointer}: ")


@pytest.mark.parametrize(
    ("block", "pointer", "reason"),
    [
        ("{tools: [svc]}", "/services/plain/x-claw/tools", "'tools' applies to agents only"),
        ("{mode: native}", "/services/plain/x-claw/mode", "'mode' applies to agents only"),
        (
            "{agent: {}, describe: svc.json}",
            "/services/plain/x-claw/describe",
            "cannot also be a tool service",
        ),
        ("{agent: {count: 0}}", "/services/plain/x-claw/agent/count", "greater than or equal to 1"),
        ("{agent: true}", "/services/plain/x-claw/agent", "valid dictionary"),
        ("{agent: {}, surfaces: ['svc']}", "/services/plain/x-claw/surfaces/0", "match pattern"),
        (
            "{agent: {}, surfaces: ['service://nope']}",
            "/services/plain/x-claw/surfaces/0",
            "names no service",
        ),
        ("{url: 'trading:4000'}", "/services/plain/x-claw/url", "match pattern"),
        (
            "{describe: svc.json, secret: 1}",
            "/services/plain/x-claw/secret",
            "unknown field 'secret'",
        ),
        ("[1]", "/services/plain/x-claw", "x-claw must be a mapping"),
    ],
)
def test_service_x_claw_errors(pod_dir: PodDir, block: str, pointer: str, reason: str) -> None:
    text = "services:\n" + TOOL_SERVICES + f"  plain:\n    image: x\n    x-claw: {block}\n"
    error = pod_dir.error(text)
    assert error.pointer == pointer
    assert reason in error.reason
    assert error.service == "plain"
    assert error.line == pod_dir.line_of("x-claw: " + block)


def test_pod_file_shape_errors(pod_dir: PodDir) -> None:
    assert "needs a 'services' mapping" in str(pod_dir.error("version: '3'\n"))
    assert "a service must be a mapping" in str(pod_dir.error("services:\n  a: 3\n"))
    broken = pod_dir.error("services:\n  a:\n    image: x\n   bad: indent\n")
    assert broken.line == 4 and "invalid YAML" in broken.reason
    reserved = pod_dir.error("services:\n  claw-sidecar: {image: x}\n")
    assert "reserved for the sidecar" in str(reserved) and reserved.line == 2
    network = pod_dir.error("services:\n  a: {image: x}\nnetworks:\n  claw-tools: {}\n")
    assert "'claw-tools' is reserved" in str(network) and network.line == 4


def test_agent_ids_must_not_clash_with_services(pod_dir: PodDir) -> None:
    error = pod_dir.error(
        "services:\n  crew-1: {image: x}\n  crew:\n    image: a\n    x-claw: {agent: {count: 2}}\n"
    )
    assert "agent id 'crew-1' clashes with a service" in str(error)


def test_agents_cannot_choose_their_network_mode(pod_dir: PodDir) -> None:
    error = pod_dir.error(
        "services:\n  bot:\n    image: a\n    network_mode: host\n    x-claw: {agent: {}}\n"
    )
    assert error.pointer == "/services/bot/network_mode" and error.line == 4


@pytest.mark.parametrize(
    ("environment", "variable", "owner"),
    [
        (
            "environment: {OPENAI_API_KEY: sk-live}",
            "OPENAI_API_KEY",
            "the key of provider 'openai'",
        ),
        (
            "environment: [ANTHROPIC_API_KEY=sk-ant]",
            "ANTHROPIC_API_KEY",
            "the key of provider 'anthropic'",
        ),
        ("environment: [OTHER_TOKEN]", "OTHER_TOKEN", "the credential of service 'other'"),
        ("environment: {OPENAI_BASE_URL: 'http://elsewhere'}", "OPENAI_BASE_URL", "set by clawc"),
        ("environment: {CLAW_OPERATOR_TOKEN: op}", "CLAW_OPERATOR_TOKEN", "the operator token"),
        ("environment: [CLAW_AUDIT_KEY=k]", "CLAW_AUDIT_KEY", "the audit key"),
    ],
)
def test_credential_starvation_in_environment(
    pod_dir: PodDir, environment: str, variable: str, owner: str
) -> None:
    text = (
        "services:\n"
        + TOOL_SERVICES
        + f"  bot:\n    image: a\n    {environment}\n    x-claw: {{agent: {{}}}}\n"
    )
    error = pod_dir.error(text)
    assert f"agent sets {variable}, {owner}" in str(error)
    assert error.service == "bot"
    assert error.line == pod_dir.line_of(environment[:14])
    assert "sk-" not in str(error)


def test_credential_starvation_in_env_file(pod_dir: PodDir) -> None:
    (pod_dir.root / "bot.env").write_text(
        "# settings\nLOG_LEVEL=debug\nexport OTHER_TOKEN=s3cret\n"
    )
    text = (
        "services:\n"
        + TOOL_SERVICES
        + "  bot:\n    image: a\n    env_file: bot.env\n    x-claw: {agent: {}}\n"
    )
    error = pod_dir.error(text)
    assert "env_file bot.env sets OTHER_TOKEN, the credential of service 'other'" in str(error)
    assert "s3cret" not in str(error)


def test_custom_provider_key_names_are_starved_too(pod_dir: PodDir) -> None:
    text = """\
    x-claw:
      providers:
        local: {api: openai, base-url: "http://llm/v1", key-env: LOCAL_KEY, models: ["*"]}
    services:
      bot:
        image: a
        environment: {LOCAL_KEY: x}
        x-claw: {agent: {}}
    """
    assert "agent sets LOCAL_KEY, the key of provider 'local'" in str(pod_dir.error(text))


def test_missing_env_file_is_an_error_unless_optional(pod_dir: PodDir) -> None:
    base = "services:\n  bot:\n    image: a\n    x-claw: {agent: {}}\n"
    assert "env_file not found: gone.env" in str(pod_dir.error(base + "    env_file: gone.env\n"))
    pod_dir.compile(base + "    env_file: [{path: gone.env, required: false}]\n")


def test_non_agents_may_hold_credentials(pod_dir: PodDir) -> None:
    text = "services:\n" + TOOL_SERVICES.replace(
        "    image: example/other\n",
        "    image: example/other\n    environment: {OTHER_TOKEN: x}\n",
    )
    pod_dir.compile(text)


@pytest.mark.parametrize(
    ("definition", "port"),
    [
        ({"expose": ["4000"]}, 4000),
        ({"expose": [4001, "5000"]}, 4001),
        ({"expose": ["4002/tcp"]}, 4002),
        ({"ports": ["8080:4003"]}, 4003),
        ({"ports": ["127.0.0.1:8080:4004/tcp"]}, 4004),
        ({"ports": [4005]}, 4005),
        ({"ports": [{"target": 4006, "published": 80}]}, 4006),
        ({"expose": ["4007"], "ports": ["9:9"]}, 4007),
        ({}, 80),
    ],
)
def test_container_port(definition: dict, port: int) -> None:
    assert container_port(definition) == port


def test_base_urls(pod_dir: PodDir) -> None:
    text = "services:\n" + TOOL_SERVICES.replace(
        "x-claw: {describe: other.json}",
        "x-claw: {describe: other.json, url: 'http://127.0.0.1:9999/'}",
    )
    pod = pod_dir.compile(text)
    assert pod.tool_services["svc"].base_url == "http://svc:8000"
    assert pod.tool_services["other"].base_url == "http://127.0.0.1:9999"


@pytest.mark.parametrize(
    ("definition", "pointer", "reason"),
    [
        (
            "environment: 'A=1'",
            "/services/bot/environment",
            "'environment' must be a mapping or a list",
        ),
        (
            "environment: [1]",
            "/services/bot/environment/0",
            "items of 'environment' must be a string",
        ),
        ("env_file: 3", "/services/bot/env_file", "'env_file' must be a string or a list"),
        ("depends_on: 5", "/services/bot/depends_on", "'depends_on' must be a mapping or a list"),
        ("volumes: {a: b}", "/services/bot/volumes", "'volumes' must be a list"),
        ("networks: 3", "/services/bot/networks", "'networks' must be a mapping or a list"),
        ("build: [1]", "/services/bot/build", "'build' must be a string or a mapping"),
        (
            "ports: [true]",
            "/services/bot/ports/0",
            "items of 'ports' must be a string or a number or a mapping",
        ),
    ],
)
def test_compose_values_clawc_rewrites_must_have_a_known_shape(
    pod_dir: PodDir, definition: str, pointer: str, reason: str
) -> None:
    error = pod_dir.error(
        f"services:\n  bot:\n    image: a\n    {definition}\n    x-claw: {{agent: {{}}}}\n"
    )
    assert (error.pointer, error.reason, error.service, error.line) == (pointer, reason, "bot", 4)


def test_duplicate_keys_are_refused_but_merge_keys_work(pod_dir: PodDir) -> None:
    error = pod_dir.error("services:\n  a: {image: x}\n  a: {image: y}\n")
    assert (error.reason, error.line) == ("duplicate key 'a'", 3)
    merged = """\
    x-agent: &agent
      image: example/agent
      x-claw: {agent: {}}
    services:
      one:
        <<: *agent
        image: example/other
      two: *agent
    """
    assert [a.id for a in pod_dir.compile(merged).agents] == ["one", "two"]


def test_agent_count_is_bounded(pod_dir: PodDir) -> None:
    error = pod_dir.error("services:\n  a:\n    image: x\n    x-claw: {agent: {count: 100000}}\n")
    assert error.pointer == "/services/a/x-claw/agent/count"


def test_default_model_globs_are_exact_families(pod_dir: PodDir) -> None:
    from fnmatch import fnmatchcase

    pod = pod_dir.compile("services:\n  a: {image: x}\n")
    openai_globs = pod.providers["openai"].models
    assert "o*" not in openai_globs
    for model in ("gpt-4o", "o1-mini", "o3", "o4-mini", "chatgpt-4o-latest", "codex-mini"):
        assert any(fnmatchcase(model, glob) for glob in openai_globs), model
    for model in ("openrouter/openai/gpt-4o", "ollama/llama3", "claude-sonnet-4-6"):
        assert not any(fnmatchcase(model, glob) for glob in openai_globs), model
    assert pod.providers["anthropic"].models == ["claude-*"]


def test_model_lists_may_hold_exact_ids_and_globs(pod_dir: PodDir) -> None:
    pod = pod_dir.compile(
        "x-claw:\n  providers:\n    local: {api: openai, base-url: 'http://llm/v1', key-env: K,"
        " models: ['llama3:8b', 'qwen/qwen3-32b', 'mistral-*']}\nservices:\n  a: {image: x}\n"
    )
    assert pod.providers["local"].exact_models == ["llama3:8b", "qwen/qwen3-32b"]
