"""A real redis-server (Debian's package; scripts/install-redis.sh installs it) on 127.0.0.1 at
a random port, for the ``redis`` suite: started, killed (-9) and restarted on the same port and
directory, its append-only file written at every command so a restart keeps every count."""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    def __init__(self, directory: Path, appendfsync: str = "always") -> None:
        """``appendfsync``: ``always`` keeps every count through a kill -9 (the tests);
        ``everysec``, Redis's default, loses up to a second of them (the bench, production)."""
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed: run scripts/install-redis.sh")
        self.binary = binary
        self.directory = directory
        self.port = _free_port()
        self.password = secrets.token_urlsafe(18)
        self.process: subprocess.Popen[bytes] | None = None
        self.appendfsync = appendfsync

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                self.binary,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--requirepass", self.password,
                "--dir", str(self.directory),
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", self.appendfsync,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = Redis(host="127.0.0.1", port=self.port, password=self.password)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except Exception:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.02)
        client.close()
        return self

    def kill(self) -> None:
        """Gone at once, as a crashed server is (SIGKILL)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def client(self) -> Redis:
        return Redis(host="127.0.0.1", port=self.port, password=self.password)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, killed at its end."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.kill()
