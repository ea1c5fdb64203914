"""A signed build (contract §10): digest.json alone detects accidents, not an editor who re-runs
the digest writer; with --verify-key-env the sidecar refuses a build whose signature is missing
or was not made by the operator's key."""

from __future__ import annotations

import asyncio
import base64
import errno
import io
import os
import sys
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from clawpod.cli.clawc import main as clawc
from clawpod.sidecar.manifest import write_digest
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.sidecar import TEST_PROVIDER_KEYS

STARTUP_GUARD_S = 30  # a deadlock guard for the child process, not a timing assertion
ANSWER_GAP_S = 0.2


def keypair() -> tuple[str, str]:
    """(private PEM, public as base64 of the raw key): both forms the options accept."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return private, base64.b64encode(public).decode()


async def start(root: Path, state: Path, public_key: str | None) -> tuple[int | None, bytes]:
    """Start the sidecar; its exit code (None: it came up and was stopped) and stderr."""
    env = {**os.environ, **TEST_PROVIDER_KEYS, "BUILD_PUBLIC_KEY": public_key or ""}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "clawpod.sidecar", "--build", str(root), "--port", "0",
        "--host", "127.0.0.1", "--admin-host", "127.0.0.1", "--admin-port", "0",
        "--state-dir", str(state), "--verify-key-env", "BUILD_PUBLIC_KEY",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), STARTUP_GUARD_S)
    if line.startswith(b"listening on"):
        process.terminate()
        await process.wait()
        return None, b""
    _, stderr = await asyncio.wait_for(process.communicate(), STARTUP_GUARD_S)
    return process.returncode, stderr


@pytest.fixture
def signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A build signed by ``clawc compile --sign-key-env``, and the public key."""
    private, public = keypair()
    monkeypatch.setenv("BUILD_SIGNING_KEY", private)
    pod = tmp_path / "pod.yml"
    pod.write_text("services:\n  bot:\n    image: x\n    x-claw:\n      agent: {}\n")
    out = io.StringIO()
    code = clawc(["compile", str(pod), "-o", str(tmp_path / "build"), "--sign-key-env",
                  "BUILD_SIGNING_KEY"], out, out)  # fmt: skip
    assert code == 0, out.getvalue()
    assert (tmp_path / "build" / "digest.sig").is_file()
    return tmp_path / "build", public


async def test_a_signed_build_starts(signed: tuple[Path, str], tmp_path: Path) -> None:
    root, public = signed
    assert await start(root, tmp_path / "state", public) == (None, b"")


async def test_an_edit_with_a_recomputed_digest_is_refused(
    signed: tuple[Path, str], tmp_path: Path
) -> None:
    root, public = signed
    tools = root / "context" / "bot" / "tools.json"
    tools.write_text(tools.read_text().replace('"tools": []', '"tools": [ ]'))
    write_digest(root)  # what an editor who knows the format does: the digest matches again
    code, stderr = await start(root, tmp_path / "state", public)
    assert code == 1 and b"signature does not match digest.json" in stderr


async def test_an_unsigned_build_and_a_foreign_key_are_refused(
    signed: tuple[Path, str], tmp_path: Path
) -> None:
    root, _ = signed
    _, other_public = keypair()
    code, stderr = await start(root, tmp_path / "s1", other_public)
    assert code == 1 and b"signature does not match" in stderr
    (root / "digest.sig").unlink()
    unsigned = write_build(tmp_path / "b2", [AgentSpec("a")], providers_for("http://127.0.0.1:9"))
    assert unsigned
    code, stderr = await start(tmp_path / "b2", tmp_path / "s2", other_public)
    assert code == 1 and b"not signed" in stderr and b"Traceback" not in stderr


async def test_a_missing_key_is_a_clear_error(signed: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = signed
    code, stderr = await start(root, tmp_path / "state", None)
    assert code == 1 and b"BUILD_PUBLIC_KEY is not set" in stderr


def test_signing_without_the_key_set_is_an_input_error(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yml"
    pod.write_text("services:\n  bot:\n    image: x\n    x-claw:\n      agent: {}\n")
    out = io.StringIO()
    code = clawc(["compile", str(pod), "--sign-key-env", "NOT_SET_ANYWHERE"], out, out)
    assert code == 1 and "NOT_SET_ANYWHERE is not set" in out.getvalue()


class _SwappingFifo(threading.Thread):
    """A writer behind a FIFO that answers the n-th open with ``answers[n]`` (the last one
    thereafter): what an attacker with write access to the build uses to show one digest to the
    digest check and another to the signature check."""

    def __init__(self, path: Path, answers: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.path, self.answers, self.opens = path, answers, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:  # non-blocking: ENXIO until a reader has the FIFO open, so the thread can stop
                descriptor = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                self.stopped.wait(0.005)
                continue
            os.set_blocking(descriptor, True)
            try:
                os.write(descriptor, self.answers[min(self.opens, len(self.answers) - 1)])
            except BrokenPipeError:
                pass  # the reader looked at the file's type and left
            finally:
                os.close(descriptor)
                self.opens += 1
            # A reader that has seen EOF may not have closed yet; opening again now would append
            # the next answer to this read. The next reader's open blocks until ours, so waiting
            # changes no outcome, it only keeps answers apart.
            self.stopped.wait(ANSWER_GAP_S)


async def test_a_digest_served_by_a_fifo_cannot_swap_between_the_checks(
    signed: tuple[Path, str], tmp_path: Path
) -> None:
    root, public = signed
    signed_digest = (root / "digest.json").read_bytes()
    tools = root / "context" / "bot" / "tools.json"
    tools.write_text(tools.read_text().replace('"tools": []', '"tools": [ ]'))
    write_digest(root)
    tampered_digest = (root / "digest.json").read_bytes()
    (root / "digest.json").unlink()
    os.mkfifo(root / "digest.json")
    # before the fix: the file check read the tampered digest, the signature check the signed one
    writer = _SwappingFifo(root / "digest.json", [tampered_digest, tampered_digest, signed_digest])
    writer.start()
    try:
        code, stderr = await start(root, tmp_path / "state", public)
    finally:
        writer.stopped.set()
        writer.join()
    assert code == 1, "a tampered build started"
    assert b"digest.json: not a regular file" in stderr and b"Traceback" not in stderr


async def test_a_fifo_among_the_covered_files_is_refused_without_blocking(
    signed: tuple[Path, str], tmp_path: Path
) -> None:
    root, public = signed
    (root / "sidecar.json").unlink()
    os.mkfifo(root / "sidecar.json")  # no writer: a blocking read would hang startup
    code, stderr = await start(root, tmp_path / "state", public)
    assert code == 1 and b"sidecar.json: not a regular file" in stderr
