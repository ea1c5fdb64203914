"""``python -m clawpod.sidecar`` as a real process: the listening line, serving, clean SIGTERM
shutdown with the audit on disk, and refusal of a tampered or missing build."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson

from clawpod.compiler.pod_file.reserved import ADMIN_HOST
from clawpod.sidecar.manifest import AdminListen
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.upstream import Reply, StubUpstream, openai_completion

LISTENING = re.compile(rb"^listening on http://127\.0\.0\.1:(\d+)")
OPERATOR_LISTENER = re.compile(rb"^operator listener on http://[^:]+:(\d+)")
STARTUP_GUARD_S = 30  # a deadlock guard for the child process, not a timing assertion


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, **TEST_PROVIDER_KEYS}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "clawpod.sidecar",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def test_serves_and_shuts_down_cleanly(tmp_path: Path, upstream: StubUpstream) -> None:
    tokens = write_build(
        tmp_path / "build",
        [AgentSpec("agent", mode="native")],
        providers_for(upstream.openai_url, upstream.anthropic_url),
    )
    state_dir = tmp_path / "state"
    process = await _spawn(
        "--build", str(tmp_path / "build"), "--host", "127.0.0.1", "--port", "0",
        "--admin-port", "0", "--state-dir", str(state_dir),
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), STARTUP_GUARD_S)
        match = LISTENING.search(line)
        assert match, line
        url = f"http://127.0.0.1:{int(match.group(1))}"
        line = await asyncio.wait_for(process.stdout.readline(), STARTUP_GUARD_S)
        admin = OPERATOR_LISTENER.search(line)
        assert admin, line
        admin_url = f"http://127.0.0.1:{int(admin.group(1))}"
        upstream.enqueue("openai", Reply.json(openai_completion("from the real process")))
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/healthz") as response:
                assert response.status == 200
            async with session.get(url + "/metrics") as response:
                assert response.status == 404  # operators only
            async with session.get(admin_url + "/metrics") as response:
                assert response.status == 200
            async with session.post(
                url + "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": []},
                headers={"Authorization": f"Bearer {tokens['agent']}"},
            ) as response:
                assert response.status == 200
                body = await response.json()
        assert body["choices"][0]["message"]["content"] == "from the real process"
        assert upstream.received[-1].headers["Authorization"] == (
            f"Bearer {TEST_PROVIDER_KEYS['OPENAI_API_KEY']}"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), STARTUP_GUARD_S)
    assert code == 0
    records = (state_dir / "audit" / "agent.jsonl").read_text().splitlines()
    assert orjson.loads(records[-1])["http_status"] == 200


async def test_tampered_build_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "build"
    write_build(root, [AgentSpec("agent")], providers_for("http://127.0.0.1:9/v1"))
    tools = root / "context" / "agent" / "tools.json"
    tools.write_text(tools.read_text().replace('"tools": []', '"tools": [ ]'))
    process = await _spawn(
        "--build", str(root), "--port", "0", "--admin-port", "0", "--state-dir", str(tmp_path / "s")
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), STARTUP_GUARD_S)
    assert process.returncode == 1
    assert b"does not match digest" in stderr
    assert b"context/agent/tools.json: modified" in stderr
    assert b"listening" not in stdout


async def test_missing_build_is_refused(tmp_path: Path) -> None:
    process = await _spawn("--build", str(tmp_path / "nothing"), "--port", "0", "--admin-port", "0")
    _, stderr = await asyncio.wait_for(process.communicate(), STARTUP_GUARD_S)
    assert process.returncode == 1
    assert b"refusing to start" in stderr
    assert b"Traceback" not in stderr


async def test_usage_error_exits_2(tmp_path: Path) -> None:
    process = await _spawn("--port", "0", "--admin-port", "0")
    _, stderr = await asyncio.wait_for(process.communicate(), STARTUP_GUARD_S)
    assert process.returncode == 2
    assert b"--build" in stderr


def _pod_build(tmp_path: Path) -> Path:
    """A build as clawc writes it: its operator listener on the pod's admin alias."""
    write_build(
        tmp_path / "build",
        [AgentSpec("agent", mode="native")],
        providers_for("http://127.0.0.1:9/v1"),
        admin_listen=AdminListen(host=ADMIN_HOST, port=9090),
    )
    return tmp_path / "build"


async def test_outside_a_pod_the_operator_listener_takes_the_host_address(
    tmp_path: Path,
) -> None:
    process = await _spawn(
        "--build", str(_pod_build(tmp_path)), "--host", "127.0.0.1", "--port", "0",
        "--admin-port", "0", "--state-dir", str(tmp_path / "state"),
    )  # fmt: skip
    try:
        assert process.stdout is not None
        await asyncio.wait_for(process.stdout.readline(), STARTUP_GUARD_S)
        line = await asyncio.wait_for(process.stdout.readline(), STARTUP_GUARD_S)
        assert line.startswith(b"operator listener on http://127.0.0.1:"), line
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), STARTUP_GUARD_S)


async def test_an_operator_address_that_cannot_be_bound_names_the_option(
    tmp_path: Path,
) -> None:
    process = await _spawn(
        "--build", str(_pod_build(tmp_path)), "--host", "127.0.0.1", "--port", "0",
        # Not on this machine (TEST-NET-1): resolves at once, cannot be bound.
        "--admin-host", "192.0.2.1", "--admin-port", "0",
        "--state-dir", str(tmp_path / "state"),
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(process.communicate(), STARTUP_GUARD_S)
    assert process.returncode == 1
    assert b"(the operator listener)" in stderr
    assert b"set its address with --admin-host" in stderr


def test_help_is_written_for_people() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "clawpod.sidecar", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "``" not in done.stdout  # no reST markup from a docstring
    assert "Serve a build made by `clawc compile`" in done.stdout
    assert "CLAW_AUDIT_KEY" in done.stdout
