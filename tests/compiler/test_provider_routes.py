"""Pod grammar of SPEC §14: key pools, fallback routes, prices, USD budgets; the compiler
refuses a route to an unknown provider, and keeps every pooled key out of
agents and in the sidecar's environment."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from clawpod.cli.inspect import render
from clawpod.compiler.output.build import write_build
from clawpod.sidecar.manifest import Price, RouteTarget, load_build
from tests.compiler.conftest import PodDir

PROVIDERS = """\
x-claw:
  providers:
    openai: {api: openai, base-url: "https://api.openai.com/v1",
             key-env: [OPENAI_KEY_A, OPENAI_KEY_B], models: ["gpt-*"], first-byte-timeout-ms: 20000,
             prices: {"gpt-4o*": {input: 2.50, cached-input: 1.25, output: 10.00}}}
    azure-east: {api: openai, base-url: "https://azure.example/v1", key-env: AZURE_KEY, models: []}
    anthropic: {api: anthropic, base-url: "https://api.anthropic.com", key-env: ANTHROPIC_API_KEY,
                models: ["claude-*"]}
  routes:
    "gpt-4o*": [openai, {provider: azure-east, model: gpt-4o-2024-11-20}]
  budgets: {bot: {usd-per-day: 20}, "*": {tokens-per-day: 1000000}}
"""
ROUTE = '"gpt-4o*": [openai, {provider: azure-east, model: gpt-4o-2024-11-20}]'
AGENT = "services:\n  bot:\n    image: example/agent\n    x-claw: {agent: {}}\n"


def test_the_spec_example_compiles_into_the_build(pod_dir: PodDir) -> None:
    pod = pod_dir.compile(PROVIDERS + AGENT)
    openai = pod.providers["openai"]
    assert openai.key_envs == ["OPENAI_KEY_A", "OPENAI_KEY_B"]
    assert openai.first_byte_timeout_ms == 20000
    assert openai.prices == {"gpt-4o*": Price(input=2.5, cached_input=1.25, output=10.0)}
    assert pod.routes == {
        "gpt-4o*": [
            RouteTarget(provider="openai"),
            RouteTarget(provider="azure-east", model="gpt-4o-2024-11-20"),
        ]
    }
    assert pod.governance is not None
    assert pod.governance.usd_budgets == {"bot": 20}
    assert pod.governance.budgets == {"*": 1000000}
    # Every pooled key goes to the sidecar's environment, none to an agent's.
    assert {"OPENAI_KEY_A", "OPENAI_KEY_B", "AZURE_KEY"} <= set(pod.credential_envs)
    out = pod_dir.root / "out"
    write_build(pod, out)
    config = load_build(out).config
    assert config.routes == pod.routes
    compose = yaml.safe_load((out / "compose.yml").read_text())
    sidecar_env = compose["services"]["claw-sidecar"]["environment"]
    assert {"OPENAI_KEY_A", "OPENAI_KEY_B", "AZURE_KEY"} <= set(sidecar_env)
    shown = render(load_build(out))
    assert "key $OPENAI_KEY_A $OPENAI_KEY_B" in shown
    assert "route gpt-4o*: openai > azure-east (gpt-4o-2024-11-20)" in shown


def test_an_agent_holding_a_pooled_key_is_refused(pod_dir: PodDir) -> None:
    own_key = "{agent: {}}\n    environment: {OPENAI_KEY_B: x}"
    text = PROVIDERS + AGENT.replace("{agent: {}}", own_key)
    error = pod_dir.error(text)
    assert "OPENAI_KEY_B" in error.reason and "provider 'openai'" in error.reason


def test_a_route_may_cross_protocols_and_a_provider_may_serve_one(pod_dir: PodDir) -> None:
    """Contract §18: a fallback may speak another protocol; ``api: chat-completions`` is a
    Chat-only server (requests in other protocols are translated for it)."""
    local = (
        '    local: {api: chat-completions, base-url: "http://llm:8000/v1", key-env: LOCAL_KEY,\n'
        '           models: ["local-*"]}\n'
    )
    crossing = '\n    "claude-*": [anthropic, {provider: local, model: local-model}]'
    text = PROVIDERS.replace("  routes:\n", local + "  routes:\n").replace(ROUTE, ROUTE + crossing)
    pod = pod_dir.compile(text + AGENT)
    assert pod.providers["local"].api == "openai"
    assert pod.providers["local"].served == ("chat",)
    assert pod.providers["openai"].served == ("chat", "responses")
    out = pod_dir.root / "out"
    write_build(pod, out)
    config = load_build(out).config
    assert config.providers["local"].served == ("chat",)
    assert [t.provider for t in config.routes["claude-*"]] == ["anthropic", "local"]


@pytest.mark.parametrize(
    ("routes", "reason"),
    [
        ('"gpt-*": [openai, nowhere]', "no provider 'nowhere'"),
        ('"gpt-*": [{provider: openai, model: "gpt-*"}]', "not a pattern"),
        ('"gpt-*": []', "at least 1 item"),
        ('"gpt-[4": [openai]', "unbalanced"),
        ('"gpt-*": [{provider: openai, modle: x}]', "modle"),
    ],
)
def test_a_bad_route_is_a_compile_error(pod_dir: PodDir, routes: str, reason: str) -> None:
    text = PROVIDERS.replace(ROUTE, routes)
    error = pod_dir.error(text + AGENT)
    assert reason in str(error)


@pytest.mark.parametrize(
    ("key_env", "reason"),
    [("[]", "at least one"), ("[A, A]", "listed twice"), ("[A, 'b-c']", "match pattern")],
)
def test_a_bad_key_pool_is_a_compile_error(pod_dir: PodDir, key_env: str, reason: str) -> None:
    text = (
        "x-claw:\n  providers:\n    p: {api: openai, base-url: 'https://x', "
        f"key-env: {key_env}, models: [m]}}\n"
    )
    error = pod_dir.error(text + AGENT)
    assert error.pointer == "/x-claw/providers/p/key-env"
    assert reason in error.reason


def test_a_provider_without_models_must_be_a_route_target(pod_dir: PodDir) -> None:
    text = PROVIDERS.replace(ROUTE, '"gpt-4o*": [openai]')
    error = pod_dir.error(text + AGENT)
    assert error.pointer == "/x-claw/providers/azure-east/models"


@pytest.mark.parametrize(
    ("budget", "reason"),
    [("{}", "set tokens-per-day, usd-per-day or both"), ("{usd-per-day: 0}", "greater than 0")],
)
def test_a_bad_budget_is_a_compile_error(pod_dir: PodDir, budget: str, reason: str) -> None:
    error = pod_dir.error(f"x-claw:\n  budgets: {{bot: {budget}}}\n" + AGENT)
    assert reason in error.reason


def test_every_example_of_the_providers_doc_compiles(pod_dir: PodDir) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "providers.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    assert len(examples) == 5
    for example in examples:
        assert pod_dir.compile(textwrap.dedent(example) + AGENT).providers


def test_the_pod_sets_billing_headers_per_provider(pod_dir: PodDir) -> None:
    text = PROVIDERS.replace(
        'models: ["gpt-*"], first-byte',
        'models: ["gpt-*"], headers: {OpenAI-Organization: org-pod, OpenAI-Project: proj_a},\n'
        "             first-byte",
    ).replace('models: ["claude-*"]', 'models: ["claude-*"], headers: {anthropic-beta: b-1}')
    pod = pod_dir.compile(text + AGENT)
    assert pod.providers["openai"].headers == {
        "openai-organization": "org-pod",
        "openai-project": "proj_a",
    }
    assert pod.providers["anthropic"].headers == {"anthropic-beta": "b-1"}
    out = pod_dir.root / "out"
    write_build(pod, out)
    assert load_build(out).config.providers["openai"].headers == pod.providers["openai"].headers


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ("{Authorization: x}", "not a billing header"),
        ("{anthropic-beta: x}", "not a billing header"),  # an openai provider
        ("{OpenAI-Organization: a, openai-organization: b}", "set twice"),
        ('{OpenAI-Project: "a\\r\\nX-Injected: 1"}', "should match pattern"),
    ],
)
def test_a_bad_billing_header_is_a_compile_error(
    pod_dir: PodDir, headers: str, reason: str
) -> None:
    text = (
        "x-claw:\n  providers:\n    p: {api: openai, base-url: 'https://x', "
        f"key-env: K, models: [m], headers: {headers}}}\n"
    )
    error = pod_dir.error(text + AGENT)
    assert reason in str(error)


def test_under_a_usd_budget_unpriced_models_are_warned_of(pod_dir: PodDir) -> None:
    local = (
        '    local: {api: chat-completions, base-url: "http://llm:8000/v1", key-env: LOCAL_KEY,\n'
        '           models: ["llama-*", mistral-large]}\n'
    )
    text = PROVIDERS.replace("  routes:\n", local + "  routes:\n")
    pod = pod_dir.compile(text + AGENT)
    unpriced = [w for w in pod.warnings if "no price for" in w]
    assert len(unpriced) == 2
    assert any("llama-*" in w for w in unpriced) and any("mistral-large" in w for w in unpriced)
    assert all("/x-claw/providers/local/models" in w for w in unpriced)
    # A default price covers them; without a USD budget nothing is said.
    priced = text.replace(
        'models: ["llama-*", mistral-large]}',
        'models: ["llama-*", mistral-large],\n           prices: {default: {input: 0, output: 0}}}',
    )
    assert not [w for w in pod_dir.compile(priced + AGENT).warnings if "no price" in w]
    no_usd = text.replace("bot: {usd-per-day: 20}, ", "")
    assert not [w for w in pod_dir.compile(no_usd + AGENT).warnings if "no price" in w]
