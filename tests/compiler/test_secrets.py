"""No credential value may appear anywhere in a build, even when it is set at compile time."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawpod.cli.clawc import main
from tests.compiler.conftest import EXAMPLE_POD

SECRETS = {
    "OPENAI_API_KEY": "sk-live-openai-5f1e2d3c4b5a",
    "ANTHROPIC_API_KEY": "sk-ant-live-9a8b7c6d5e4f",
    "TRADING_API_TOKEN": "trading-secret-77c1d2e3",
    "NEWS_API_KEY": "news-secret-0b1c2d3e4f",
}


def test_no_credential_value_reaches_any_build_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "build"
    assert main(["compile", str(EXAMPLE_POD), "-o", str(out)]) == 0
    assert main(["inspect", str(out)]) == 0
    printed = capsys.readouterr()
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 19
    for path in files:
        data = path.read_bytes()
        for name, value in SECRETS.items():
            assert value.encode() not in data, f"{name}'s value leaked into {path.relative_to(out)}"
    for value in SECRETS.values():
        assert value not in printed.out + printed.err


def test_only_agent_env_files_hold_agent_tokens(tmp_path: Path) -> None:
    out = tmp_path / "build"
    assert main(["compile", str(EXAMPLE_POD), "-o", str(out)]) == 0
    tokens = [
        line.split("=", 1)[1]
        for env in (out / "agents").glob("*.env")
        for line in env.read_text().splitlines()
        if line.startswith("CLAW_AGENT_TOKEN=")
    ]
    assert len(tokens) == 2
    for path in out.rglob("*"):
        if path.is_file() and path.parent.name != "agents":
            assert not any(token.encode() in path.read_bytes() for token in tokens), path
