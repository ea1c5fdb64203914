"""A real sidecar process on 127.0.0.1 (random ports), for tests that judge it from outside:
its memory from /proc, its listeners over TCP, its exit."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

LISTENING = re.compile(rb"^listening on http://127\.0\.0\.1:(\d+)")
OPERATOR_LISTENER = re.compile(rb"^operator listener on http://[^:]+:(\d+)")
GUARD_S = 60.0  # against a hang, never a timing assertion


@dataclass
class SidecarProcess:
    process: asyncio.subprocess.Process
    url: str
    admin_url: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def memory(self) -> tuple[int, int]:
        """(resident bytes now, high-water mark since the last reset)."""
        lines = Path(f"/proc/{self.pid}/status").read_text().splitlines()
        fields = dict(line.split(":", 1) for line in lines)
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024

    def reset_high_water(self) -> None:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")


@asynccontextmanager
async def sidecar_process(
    build: Path, state_dir: Path, env: Mapping[str, str]
) -> AsyncIterator[SidecarProcess]:
    """The sidecar of ``build`` with ``env`` over this process's environment; stopped with
    SIGTERM at the end. Its stderr goes to ``sidecar.stderr`` beside ``state_dir`` (a pipe
    nobody reads would fill and stall it)."""
    stderr_path = state_dir.parent / "sidecar.stderr"
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "clawpod.sidecar", "--build", str(build), "--host", "127.0.0.1",
            "--port", "0", "--admin-host", "127.0.0.1", "--admin-port", "0",
            "--state-dir", str(state_dir),
            stdout=asyncio.subprocess.PIPE, stderr=stderr, env={**os.environ, **env},
        )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), GUARD_S)
        listening = LISTENING.search(line)
        assert listening, line + stderr_path.read_bytes()
        line = await asyncio.wait_for(process.stdout.readline(), GUARD_S)
        admin = OPERATOR_LISTENER.search(line)
        assert admin, line
        yield SidecarProcess(
            process,
            f"http://127.0.0.1:{int(listening.group(1))}",
            f"http://127.0.0.1:{int(admin.group(1))}",
        )
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), GUARD_S)
