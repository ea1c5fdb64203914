"""One sidecar per state directory (SPEC §13.1), with real sidecar processes: a second one on
the same directory refuses to start naming the holder and writes nothing; ``kill -9`` of the
holder frees the directory; a sidecar whose directory is replaced under it stops being ready;
audit records name the instance that wrote them; a deleted or planted ``.lock`` changes
nothing (issue 46)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

from clawpod.sidecar.state.lock import INSTANCE_ENV
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.upstream import Reply, StubUpstream, openai_completion

LISTENING = re.compile(rb"^listening on http://127\.0\.0\.1:(\d+)")
OPERATOR_LISTENER = re.compile(rb"^operator listener on http://[^:]+:(\d+)")
GUARD_S = 30  # a deadlock guard for the child process, not a timing assertion


class Sidecar:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.url = ""
        self.admin_url = ""

    async def wait_listening(self) -> None:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), GUARD_S)
        match = LISTENING.search(line)
        assert match, line
        self.url = f"http://127.0.0.1:{int(match.group(1))}"
        line = await asyncio.wait_for(self.process.stdout.readline(), GUARD_S)
        admin = OPERATOR_LISTENER.search(line)
        assert admin, line
        self.admin_url = f"http://127.0.0.1:{int(admin.group(1))}"

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), GUARD_S)


async def spawn(build: Path, state_dir: Path, instance: str | None = None) -> Sidecar:
    env = {**os.environ, **TEST_PROVIDER_KEYS}
    env.pop(INSTANCE_ENV, None)
    if instance is not None:
        env[INSTANCE_ENV] = instance
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "clawpod.sidecar", "--build", str(build), "--host", "127.0.0.1",
        "--port", "0", "--admin-port", "0", "--state-dir", str(state_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    return Sidecar(process)


@pytest.fixture
def build(tmp_path: Path) -> Path:
    """A build whose provider is never reached (these tests send no model request)."""
    root = tmp_path / "build"
    write_build(root, [AgentSpec("agent")], providers_for("http://127.0.0.1:9"))
    return root


async def chat(sidecar: Sidecar, upstream: StubUpstream, token: str) -> None:
    """One chat completion through a sidecar process, answered 200."""
    upstream.enqueue("openai", Reply.json(openai_completion("hi")))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            sidecar.url + "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": []},
            headers={"Authorization": f"Bearer {token}"},
        ) as response,
    ):
        assert response.status == 200


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory`` with its bytes and modification time."""
    return {
        p.relative_to(directory).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


async def test_a_second_sidecar_on_one_directory_refuses_naming_the_holder(
    tmp_path: Path, build: Path
) -> None:
    state = tmp_path / "state"
    first = await spawn(build, state, instance="desk-a")
    await first.wait_listening()
    try:
        before = snapshot(state)
        second = await spawn(build, state, instance="desk-b")
        stdout, stderr = await asyncio.wait_for(second.process.communicate(), GUARD_S)
        assert second.process.returncode == 1
        assert b"listening" not in stdout
        message = stderr.decode()
        assert "refusing to start" in message and "in use by another sidecar" in message
        assert f"host=desk-a pid={first.process.pid}" in message
        assert "Traceback" not in message
        assert snapshot(state) == before  # no audit record, no journal entry, no lock rewrite
    finally:
        assert await first.stop() == 0


async def test_kill_9_frees_the_directory_for_the_next_sidecar(tmp_path: Path, build: Path) -> None:
    state = tmp_path / "state"
    first = await spawn(build, state)
    await first.wait_listening()
    first.process.send_signal(signal.SIGKILL)
    assert await first.stop() == -signal.SIGKILL
    second = await spawn(build, state, instance="after-the-crash")
    await second.wait_listening()
    try:
        assert f"pid={second.process.pid}" in (state / ".lock").read_text()
        async with (
            aiohttp.ClientSession() as session,
            session.get(second.admin_url + "/readyz") as response,
        ):
            assert response.status == 200
    finally:
        assert await second.stop() == 0


async def test_a_replaced_state_directory_stops_the_sidecar(tmp_path: Path, build: Path) -> None:
    """Another volume mounted over the path, or the directory moved away: a new sidecar could
    lock the new one beside this one, so this one stops taking requests and says why."""
    state = tmp_path / "state"
    sidecar = await spawn(build, state)
    await sidecar.wait_listening()
    async with (
        aiohttp.ClientSession() as session,
        session.get(sidecar.admin_url + "/readyz") as response,
    ):
        assert response.status == 200
    state.rename(tmp_path / "state-old")
    state.mkdir()
    try:
        await asyncio.wait_for(sidecar.process.wait(), GUARD_S)
    finally:
        assert await sidecar.stop() == 1
    assert sidecar.process.stderr is not None
    stderr = (await sidecar.process.stderr.read()).decode()
    assert "stopping: the lock on state directory" in stderr and "was lost" in stderr
    assert "Traceback" not in stderr
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session, session.get(sidecar.url + "/healthz"):
            pass


async def test_a_deleted_lock_file_does_not_let_a_second_sidecar_start(
    tmp_path: Path, build: Path
) -> None:
    """The lock is on the directory, which cannot be deleted from under the first sidecar: a
    removed ``.lock`` (once: a second sidecar beside the first, 39 broken links in 40 audit
    records) changes nothing."""
    state = tmp_path / "state"
    first = await spawn(build, state, instance="desk-a")
    await first.wait_listening()
    try:
        (state / ".lock").unlink()
        second = await spawn(build, state, instance="desk-b")
        try:
            await asyncio.wait_for(second.process.wait(), GUARD_S)
        finally:
            assert await second.stop() == 1
        assert second.process.stderr is not None
        message = (await second.process.stderr.read()).decode()
        assert "in use by another sidecar (holder unknown)" in message
        assert not (state / ".lock").exists()  # the refused one wrote nothing
        async with (
            aiohttp.ClientSession() as session,
            session.get(first.admin_url + "/readyz") as response,
        ):
            assert response.status == 200  # the first still holds the directory
    finally:
        assert await first.stop() == 0


@pytest.mark.parametrize("planted", ["symlink", "hardlink", "fifo"])
async def test_a_planted_lock_file_is_refused_and_its_target_untouched(
    tmp_path: Path, build: Path, planted: str
) -> None:
    """``.lock`` is truncated and written by its holder: a link planted there would make the
    sidecar truncate the file it names (it did, following a symlink). It is refused."""
    state = tmp_path / "state"
    state.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    lock = state / ".lock"
    if planted == "symlink":
        lock.symlink_to(precious)
        expected = "is a symbolic link"
    elif planted == "hardlink":
        os.link(precious, lock)
        expected = "has 2 names (a hard link)"
    else:
        os.mkfifo(lock)
        expected = "is not a regular file"
    sidecar = await spawn(build, state)
    try:
        _, stderr = await asyncio.wait_for(sidecar.process.communicate(), GUARD_S)
    finally:
        assert await sidecar.stop() == 1
    assert "refusing to start" in stderr.decode() and expected in stderr.decode()
    assert precious.read_text() == "keep me\n"
    assert not (state / "audit").exists()


async def test_audit_records_name_the_instance(tmp_path: Path, upstream: StubUpstream) -> None:
    build = tmp_path / "build"
    tokens = write_build(
        build, [AgentSpec("agent")], providers_for(upstream.openai_url, upstream.anthropic_url)
    )
    state = tmp_path / "state"
    sidecar = await spawn(build, state, instance="desk-7")
    await sidecar.wait_listening()
    try:
        await chat(sidecar, upstream, tokens["agent"])
    finally:
        assert await sidecar.stop() == 0
    records = [
        orjson.loads(line)
        for line in (state / "audit" / "agent.jsonl").read_bytes().split(b"\n")
        if line
    ]
    assert records and all(record["instance"] == "desk-7" for record in records)


async def test_a_hostile_lock_file_still_names_a_printable_holder(
    tmp_path: Path, build: Path
) -> None:
    """The holder's lock file is the other process's word: its bytes reach the terminal only
    as printable text, and the refusal stays a refusal."""
    state = tmp_path / "state"
    first = await spawn(build, state, instance="desk-a")
    await first.wait_listening()
    try:
        (state / ".lock").write_bytes(b"\x1b]0;owned\x07host=evil\x00" + b"x" * 10_000)
        second = await spawn(build, state)
        _, stderr = await asyncio.wait_for(second.process.communicate(), GUARD_S)
        assert second.process.returncode == 1
        assert b"\x1b" not in stderr and b"\x07" not in stderr
        assert b"in use by another sidecar (?]0;owned?host=evil?xxx" in stderr
    finally:
        assert await first.stop() == 0
