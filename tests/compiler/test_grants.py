"""The grant grammar of tools: / tools-defaults: (docs/contract.md §2), through real pod files."""

from __future__ import annotations

import pytest

from tests.compiler.conftest import TOOL_SERVICES, PodDir, granted


def pod_text(defaults: str | None, agent_tools: str | None) -> str:
    head = "x-claw:\n  tools-defaults:\n" + defaults if defaults is not None else ""
    agent = "  bot:\n    image: example/agent\n    x-claw:\n      agent: {}\n"
    if agent_tools is not None:
        agent += "      tools:\n" + agent_tools
    return head + "services:\n" + TOOL_SERVICES + agent


def tools_of(pod_dir: PodDir, defaults: str | None, agent_tools: str | None) -> list[str]:
    return granted(pod_dir.compile(pod_text(defaults, agent_tools)), "bot")


def test_scalar_grant_means_every_tool_of_the_service(pod_dir: PodDir) -> None:
    assert tools_of(pod_dir, None, "        - svc\n") == ["svc.a", "svc.b", "svc.c"]


def test_mapping_without_allow_and_allow_all_mean_every_tool(pod_dir: PodDir) -> None:
    assert tools_of(pod_dir, None, "        - service: svc\n") == ["svc.a", "svc.b", "svc.c"]
    assert tools_of(pod_dir, None, "        - {service: other, allow: all}\n") == [
        "other.x",
        "other.y",
    ]


def test_allow_list_grants_exactly_those_tools_in_order(pod_dir: PodDir) -> None:
    assert tools_of(pod_dir, None, "        - {service: svc, allow: [c, a]}\n") == [
        "svc.c",
        "svc.a",
    ]


def test_agent_without_tools_inherits_defaults(pod_dir: PodDir) -> None:
    assert tools_of(pod_dir, "    - {service: svc, allow: [b]}\n", None) == ["svc.b"]


def test_declared_tools_replace_defaults(pod_dir: PodDir) -> None:
    tools = tools_of(pod_dir, "    - {service: svc, allow: [b]}\n", "        - other\n")
    assert tools == ["other.x", "other.y"]


def test_empty_tools_means_no_tools_even_with_defaults(pod_dir: PodDir) -> None:
    assert tools_of(pod_dir, "    - svc\n", None) == ["svc.a", "svc.b", "svc.c"]
    assert tools_of(pod_dir, "    - svc\n", "        []\n") == []
    text = pod_text("    - svc\n", None).replace("agent: {}\n", "agent: {}\n      tools: []\n")
    assert granted(pod_dir.compile(text), "bot") == []


def test_deny_by_default_without_tools_and_without_defaults(pod_dir: PodDir) -> None:
    assert tools_of(pod_dir, None, None) == []


def test_spread_splices_defaults_at_its_position(pod_dir: PodDir) -> None:
    defaults = "    - {service: svc, allow: [b]}\n"
    before = tools_of(pod_dir, defaults, "        - other\n        - ...\n")
    after = tools_of(pod_dir, defaults, "        - ...\n        - other\n")
    assert before == ["other.x", "other.y", "svc.b"]
    assert after == ["svc.b", "other.x", "other.y"]


def test_union_all_wins_and_duplicates_collapse_at_first_place(pod_dir: PodDir) -> None:
    tools = tools_of(
        pod_dir,
        "    - {service: svc, allow: [c]}\n",
        "        - {service: svc, allow: [b]}\n"
        "        - ...\n"
        "        - {service: svc, allow: [b, a]}\n",
    )
    assert tools == ["svc.b", "svc.c", "svc.a"]
    everything = tools_of(pod_dir, None, "        - {service: svc, allow: [b]}\n        - svc\n")
    assert everything == ["svc.a", "svc.b", "svc.c"]


def test_grants_of_several_services_keep_first_occurrence_order(pod_dir: PodDir) -> None:
    tools = tools_of(pod_dir, None, "        - {service: other, allow: [y]}\n        - svc\n")
    assert tools == ["other.y", "svc.a", "svc.b", "svc.c"]


@pytest.mark.parametrize(
    ("agent_tools", "needle", "reason"),
    [
        ("        - nosuch\n", "- nosuch", "unknown service 'nosuch'"),
        (
            "        - {service: svc, allow: [a, zz]}\n",
            "allow: [a, zz]",
            "unknown tool 'zz' of service 'svc'",
        ),
        ("        - {service: svc, allow: []}\n", "allow: []", "allow is empty"),
        ("        - {service: svc, allow: [all, a]}\n", "allow: [all", "cannot be combined"),
        ("        - {service: svc, allow: a}\n", "allow: a}", "allow must be 'all' or a list"),
        ("        - {service: svc, deny: [a]}\n", "deny", "unknown field 'deny'"),
        ("        - 42\n", "- 42", "a grant is '...', a service name, or a mapping"),
        ("        - {allow: [a]}\n", "- {allow", "needs 'service: NAME'"),
        ("        - bot\n", "- bot", "'bot' is an agent, not a tool service"),
        ("        - ...\n        - ...\n", "- ...", "'...' may appear only once"),
    ],
)
def test_grant_errors_name_file_service_pointer_and_line(
    pod_dir: PodDir, agent_tools: str, needle: str, reason: str
) -> None:
    defaults = "    - svc\n" if "..." in agent_tools else None
    error = pod_dir.error(pod_text(defaults, agent_tools))
    message = str(error)
    assert reason in message
    assert "pod.yml" in message
    assert "service 'bot'" in message
    assert "/services/bot/x-claw/tools/" in message
    lines = (pod_dir.root / "pod.yml").read_text().splitlines()
    expected = [i for i, line in enumerate(lines, 1) if needle in line]
    assert error.line in expected


def test_spread_without_defaults_is_an_error(pod_dir: PodDir) -> None:
    error = pod_dir.error(pod_text(None, "        - ...\n"))
    assert "splices tools-defaults, but the pod declares none" in str(error)
    assert error.pointer == "/services/bot/x-claw/tools/0"
    assert error.line == pod_dir.line_of("- ...")


def test_spread_inside_defaults_is_an_error(pod_dir: PodDir) -> None:
    error = pod_dir.error(pod_text("    - ...\n", None))
    assert "'...' cannot be used inside tools-defaults" in str(error)
    assert error.pointer == "/x-claw/tools-defaults/0"
    assert error.line == pod_dir.line_of("- ...")


def test_unknown_names_in_defaults_are_errors_even_without_agents(pod_dir: PodDir) -> None:
    text = (
        "x-claw:\n  tools-defaults:\n    - {service: svc, allow: [nope]}\nservices:\n"
        + TOOL_SERVICES
    )
    error = pod_dir.error(text)
    assert "unknown tool 'nope' of service 'svc' (tools: a, b, c)" in str(error)
    assert error.pointer == "/x-claw/tools-defaults/0/allow/0"
    assert error.line == pod_dir.line_of("allow: [nope]")


def test_tools_null_is_an_error(pod_dir: PodDir) -> None:
    error = pod_dir.error(pod_text(None, None).replace("agent: {}\n", "agent: {}\n      tools:\n"))
    assert "tools must be a list" in str(error)


def test_service_without_tools_cannot_be_granted(pod_dir: PodDir) -> None:
    pod_dir.descriptor("v1.json", {"version": 1, "description": "old style"})
    text = pod_text(None, "        - old\n").replace(
        "services:\n",
        "services:\n  old:\n    image: example/old\n    x-claw: {describe: v1.json}\n",
    )
    assert "service 'old' declares no tools" in str(pod_dir.error(text))


def test_granted_service_without_descriptor_is_an_error(pod_dir: PodDir) -> None:
    text = pod_text(None, "        - plain\n").replace(
        "services:\n", "services:\n  plain:\n    build: .\n"
    )
    error = pod_dir.error(text)
    assert "no descriptor: set x-claw.describe" in str(error)
    assert error.service == "plain"
