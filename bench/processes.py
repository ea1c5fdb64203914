"""Start, watch and stop the bench's server processes; read their CPU time and memory from /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def process_tree(pid: int) -> list[int]:
    """The process and all its live descendants (LiteLLM's CLI may run workers as children)."""
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending.extend(_children(current))
    return tree


def _stat_fields(pid: int) -> list[str]:
    # Fields after the parenthesised command name; utime/stime are fields 14/15 of the file.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process tree, from the kernel's accounting."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            fields = _stat_fields(member)
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{member}/statm").read_text().split()[1]) * PAGE_SIZE
    return total


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        # Each server runs in its own session (start_new_session): signal only that group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)


def start_server(
    name: str,
    argv: list[str],
    port: int,
    log_dir: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    ready_timeout_s: float = 30.0,
) -> Server:
    log = log_dir / f"{name}.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    server = Server(name, process, port, log)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}; see {log}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(
        f"{name} did not listen on port {port} within {ready_timeout_s:.0f} s; see {log}"
    )
