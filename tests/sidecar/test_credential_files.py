"""Credentials read from ``NAME_FILE`` (SPEC §13.2; swarm and Kubernetes mount secrets as
files): a real sidecar process takes its provider key and audit key from files, and a wrong
file is a clear refusal that names the variable, never a value."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clawpod.sidecar.audit.log import AUDIT_KEY_ENV
from clawpod.sidecar.credential_files import CredentialFileError, with_credential_files
from tests.sidecar.test_state_lock import GUARD_S, Sidecar, chat
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.sidecar import TEST_AUDIT_KEY, TEST_PROVIDER_KEYS
from tests.support.upstream import StubUpstream


@pytest.fixture
def mounted() -> Iterator[Path]:
    """Where the secret files go: like a secrets mount, outside the build and state dirs (the
    suite's credential sweep reads every file under pytest's temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="claw-secrets-") as directory:
        yield Path(directory)


def _spawn_env(mounted: Path, files: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (AUDIT_KEY_ENV, *TEST_PROVIDER_KEYS)}
    for name, value in files.items():
        path = mounted / f"{name.lower()}.secret"
        path.write_text(value + "\n")  # what `docker secret create` from `echo` leaves
        env[name + "_FILE"] = str(path)
    return env


async def _spawn(build: Path, state: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "clawpod.sidecar", "--build", str(build), "--host", "127.0.0.1",
        "--port", "0", "--admin-port", "0", "--state-dir", str(state),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


async def test_keys_come_from_files(tmp_path: Path, mounted: Path, upstream: StubUpstream) -> None:
    build = tmp_path / "build"
    tokens = write_build(
        build, [AgentSpec("agent")], providers_for(upstream.openai_url, upstream.anthropic_url)
    )
    env = _spawn_env(mounted, {**TEST_PROVIDER_KEYS, AUDIT_KEY_ENV: TEST_AUDIT_KEY})
    sidecar = Sidecar(await _spawn(build, tmp_path / "state", env))
    await sidecar.wait_listening()
    try:
        await chat(sidecar, upstream, tokens["agent"])
    finally:
        assert await sidecar.stop() == 0
    # The value from the file, without the file's trailing newline.
    sent = upstream.received[-1].headers["Authorization"]
    assert sent == f"Bearer {TEST_PROVIDER_KEYS['OPENAI_API_KEY']}"
    assert (tmp_path / "state" / "audit" / "agent.head").exists()  # keyed audit started


async def test_an_unreadable_file_is_a_refusal_naming_the_variable(
    tmp_path: Path, mounted: Path
) -> None:
    build = tmp_path / "build"
    write_build(build, [AgentSpec("agent")], providers_for("http://127.0.0.1:9"))
    env = _spawn_env(mounted, {AUDIT_KEY_ENV: TEST_AUDIT_KEY}) | TEST_PROVIDER_KEYS
    env["OPENAI_API_KEY_FILE"] = str(tmp_path / "missing")
    env.pop("OPENAI_API_KEY")
    process = await _spawn(build, tmp_path / "state", env)
    stdout, stderr = await asyncio.wait_for(process.communicate(), GUARD_S)
    assert process.returncode == 1 and b"listening" not in stdout
    assert b"refusing to start: OPENAI_API_KEY_FILE: cannot read" in stderr
    assert not (tmp_path / "state" / "audit").exists()


def test_both_a_value_and_a_file_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("from-the-file")
    with pytest.raises(CredentialFileError, match="both KEY and KEY_FILE are set") as caught:
        with_credential_files({"KEY": "from-the-env", "KEY_FILE": str(secret)}, {"KEY"})
    assert "from-the" not in str(caught.value)


def test_only_credential_variables_are_read_from_files(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    env = with_credential_files({"SSL_CERT_FILE": str(bundle)}, {"OPENAI_API_KEY"})
    assert env == {"SSL_CERT_FILE": str(bundle)}


@pytest.mark.parametrize("content", ["", "\n", "x" * (64 * 1024 + 1), b"\xff\xfe"])
def test_empty_huge_or_binary_files_are_refused(tmp_path: Path, content: str | bytes) -> None:
    secret = tmp_path / "key"
    if isinstance(content, bytes):
        secret.write_bytes(content)
    else:
        secret.write_text(content)
    with pytest.raises(CredentialFileError, match="KEY_FILE"):
        with_credential_files({"KEY_FILE": str(secret)}, {"KEY"})


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "key"
    os.mkfifo(fifo)
    with pytest.raises(CredentialFileError, match="is not a regular file"):
        with_credential_files({"KEY_FILE": str(fifo)}, {"KEY"})
