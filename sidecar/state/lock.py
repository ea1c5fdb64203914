"""One sidecar per state directory (SPEC §13.1): an exclusive OS lock on ``<state>/.lock``.

Two sidecars on one directory would interleave their appends to the same audit chains and
journal, which ``clawc audit verify`` cannot tell from tampering. ``flock`` locks belong to the
open file, so the kernel releases them when the holder dies, ``kill -9`` included; the holder
writes its host and pid into the file so the one refused can name it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

LOCK_NAME = ".lock"
INSTANCE_ENV = "CLAW_INSTANCE"


class StateLockError(Exception):
    """The state directory is locked by another sidecar, or cannot be locked at all."""


def instance_name(env: dict[str, str] | os._Environ[str]) -> str:
    """What audit records and the lock file call this sidecar: ``CLAW_INSTANCE`` or the host."""
    return env.get(INSTANCE_ENV) or socket.gethostname()


class StateLock:
    """An exclusive lock held for the life of the process (or until :meth:`release`)."""

    def __init__(self, state_dir: Path, instance: str) -> None:
        self.path = Path(state_dir) / LOCK_NAME
        self.instance = instance
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StateLockError` naming its holder; writes nothing to
        the directory when refused (the lock file of the holder already exists)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateLockError(f"cannot open {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise StateLockError(
                    f"state directory {self.path.parent} is in use by another sidecar "
                    f"({holder or 'holder unknown'}); one sidecar per state directory"
                ) from None
            raise StateLockError(f"cannot lock {self.path}: {exc.strerror}") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"host={self.instance} pid={os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full or read-only disk: no sidecar can keep state here
            os.close(fd)
            raise StateLockError(f"cannot write {self.path}: {exc.strerror}") from None
        self._fd = fd

    def held(self) -> bool:
        """Whether the path still names the file this process locked: a directory replaced or
        a lock file removed under a running sidecar means another one could start beside it."""
        if self._fd is None:
            return False
        try:
            ours = os.fstat(self._fd)
            current = os.stat(self.path)
        except OSError:
            return False
        return (ours.st_dev, ours.st_ino) == (current.st_dev, current.st_ino)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def _read_holder(fd: int) -> str:
    """The holder as its lock file names it, printable characters only (the file is the
    other process's word, and this message goes to a terminal)."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return "".join(c if c.isprintable() else "?" for c in text)
