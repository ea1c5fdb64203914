"""The clawc command line: exit codes 0/1/2, messages without tracebacks, help with examples."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from clawpod.cli.clawc import _parser, main
from tests.compiler.conftest import EXAMPLE_POD, REPO


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clawpod.cli.clawc", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=60,
    )


def test_compile_then_inspect(tmp_path: Path) -> None:
    out = tmp_path / "build"
    result = run("compile", str(EXAMPLE_POD), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert (
        "compiled pod trading-desk: analyst (mediated, 5 tools), trader (native, 7 tools)"
        in result.stdout
    )
    shown = run("inspect", str(out))
    assert shown.returncode == 0
    assert "agent analyst" in shown.stdout and "agent trader" in shown.stdout
    assert "trading-api_execute_trade" in shown.stdout
    assert "POST http://trading-api:4000/api/v1/trades (JSON under 'trade')" in shown.stdout
    assert "native: the runner calls these tools over MCP" in shown.stdout
    # Each agent's trading calls carry its principal's credential; the MCP service's tool too.
    assert "bearer $TRADING_RO_TOKEN (principal desk-readonly)" in shown.stdout
    assert "bearer $TRADING_RW_TOKEN (principal desk-trader)" in shown.stdout
    assert "MCP tools/call get_fundamentals at http://research-mcp:4200/mcp" in shown.stdout
    only = run("inspect", str(out), "--agent", "analyst")
    assert "agent trader" not in only.stdout and "agent analyst" in only.stdout
    missing = run("inspect", str(out), "--agent", "nobody")
    assert missing.returncode == 1 and "no agent 'nobody'" in missing.stderr


def test_inspect_refuses_a_tampered_build(tmp_path: Path) -> None:
    out = tmp_path / "build"
    assert main(["compile", str(EXAMPLE_POD), "-o", str(out)]) == 0
    tools = out / "context" / "analyst" / "tools.json"
    tools.write_text(tools.read_text().replace("get_quote", "get_quota"))
    result = run("inspect", str(out))
    assert result.returncode == 1
    assert "context/analyst/tools.json: modified" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_writes_nothing(tmp_path: Path) -> None:
    result = run("validate", str(EXAMPLE_POD))
    assert result.returncode == 0
    assert "valid (pod trading-desk, 2 agents, 3 tool services, 10 tools)" in result.stdout


def test_invalid_input_exits_1_with_a_located_message(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yml"
    pod.write_text(
        "services:\n  bot:\n    image: x\n    x-claw:\n      agent: {}\n      tools: [nowhere]\n"
    )
    for command in ("compile", "validate"):
        result = run(command, str(pod), cwd=tmp_path)
        assert result.returncode == 1
        assert result.stderr.startswith(
            "clawc: error: pod.yml:6: service 'bot': /services/bot/x-claw/tools/0: "
        )
        assert "unknown service 'nowhere'" in result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "build").exists()


def test_missing_and_unreadable_inputs_exit_1(tmp_path: Path) -> None:
    assert run("compile", str(tmp_path / "nope.yml")).returncode == 1
    result = run("inspect", str(tmp_path))
    assert result.returncode == 1 and "digest" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "pod.yml").write_bytes(b"\xff\xfe\x00")
    assert run("validate", str(tmp_path / "pod.yml")).returncode == 1


@pytest.mark.parametrize(
    "args",
    [[], ["frobnicate"], ["compile"], ["schema", "everything"], ["compile", "p.yml", "--bogus"]],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert "usage: clawc" in result.stderr


def test_help_teaches_with_examples() -> None:
    top = run("--help")
    assert top.returncode == 0
    assert "clawc compile compose/examples/trading-desk/pod.yml" in top.stdout
    assert "exit status: 0 ok, 1 invalid input, 2 usage error" in top.stdout
    for command in ("compile", "validate", "inspect", "schema", "audit"):
        helped = run(command, "--help")
        assert helped.returncode == 0 and "example" in helped.stdout


def test_every_argument_of_every_command_is_explained() -> None:
    """``clawc validate --help`` used to show ``POD`` and nothing about it."""
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    unexplained = [
        f"{name} {action.metavar or action.dest}"
        for name, parser in commands.choices.items()
        for action in parser._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert unexplained == []


def test_compile_help_ends_with_a_run_command_that_starts() -> None:
    """The sidecar refuses to start without CLAW_AUDIT_KEY; the run command sets it first."""
    epilog = run("compile", "--help").stdout.partition("Run the result with")[2]
    run_line = epilog.index("docker compose -f OUT/compose.yml up")
    assert epilog.index("export CLAW_AUDIT_KEY=") < run_line


def test_the_audit_example_keeps_the_state_dir_out_of_the_build() -> None:
    top = run("--help").stdout
    assert "clawc audit verify" in top
    assert "build/state" not in top


def test_schemas_are_valid_json_schema_and_accept_the_examples() -> None:
    for kind in ("descriptor", "pod"):
        result = run("schema", kind)
        assert result.returncode == 0
        schema = json.loads(result.stdout)
        Draft202012Validator.check_schema(schema)
        if kind == "pod":
            Draft202012Validator(schema).validate(yaml.safe_load(EXAMPLE_POD.read_text()))
        else:
            Draft202012Validator(schema).validate(
                json.loads((REPO / "descriptors" / "trading-api.json").read_text())
            )
            Draft202012Validator(schema).validate(
                yaml.safe_load((REPO / "descriptors" / "market-news.yaml").read_text())
            )


def test_audit_dispatches_to_the_audit_module(tmp_path: Path) -> None:
    pytest.importorskip("clawpod.cli.audit")
    for action in ("verify", "show"):
        result = run("audit", action, str(tmp_path))
        assert result.returncode in (0, 1)
        assert "Traceback" not in result.stderr
