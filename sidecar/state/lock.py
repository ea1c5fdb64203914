"""One sidecar per state directory (SPEC §13.1): an exclusive OS lock on the directory itself,
and on ``<state>/.lock``, which names the holder.

Two sidecars on one directory would interleave their appends to the same audit chains and
journal, which ``clawc audit verify`` cannot tell from tampering. ``flock`` locks belong to the
open file, so the kernel releases them when the holder dies, ``kill -9`` included. The lock is
taken on the directory because a directory cannot be deleted while the sidecar's files are in
it: a ``.lock`` file can, and a second sidecar then locked a new one beside the first (issue
46). The ``.lock`` file is locked too (sidecars before it locked only the file) and holds the
holder's host and pid, so the one refused can name it; it is opened without following a link
and must be a regular file of one link, since the sidecar truncates it. Where the file system
cannot lock a directory (NFS), the file's lock is the only one, and a lost file is found by
:meth:`StateLock.held` (the sidecar then stops taking requests).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from pathlib import Path

LOCK_NAME = ".lock"
INSTANCE_ENV = "CLAW_INSTANCE"
_BUSY = (errno.EWOULDBLOCK, errno.EACCES)


class StateLockError(Exception):
    """The state directory is locked by another sidecar, or cannot be locked at all."""


def instance_name(env: dict[str, str] | os._Environ[str]) -> str:
    """What audit records and the lock file call this sidecar: ``CLAW_INSTANCE`` or the host."""
    return env.get(INSTANCE_ENV) or socket.gethostname()


class StateLock:
    """An exclusive lock held for the life of the process (or until :meth:`release`)."""

    def __init__(self, state_dir: Path, instance: str) -> None:
        self.directory = Path(state_dir)
        self.path = self.directory / LOCK_NAME
        self.instance = instance
        self._directory_fd: int | None = None  # None where the file system cannot lock it
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StateLockError` naming its holder; writes nothing to
        the directory when refused (the lock file of the holder already exists)."""
        self._directory_fd = self._lock_directory()
        try:
            self._fd = self._lock_file()
        except StateLockError:
            self._close_directory()
            raise

    def _lock_directory(self) -> int | None:
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StateLockError(f"cannot open {self.directory}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _BUSY:
                raise self._in_use() from None
            return None  # e.g. NFS (EBADF): the file's lock alone, watched by held()
        return fd

    def _lock_file(self) -> int:
        # O_NOFOLLOW: a link planted as .lock is refused, never followed to a file it would
        # truncate; O_NONBLOCK: opening a FIFO planted there does not hang.
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StateLockError(
                    f"{self.path} is a symbolic link: it is not followed; remove it"
                ) from None
            raise StateLockError(f"cannot open {self.path}: {exc.strerror}") from None
        try:
            _check_regular(fd, self.path)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except StateLockError:
            os.close(fd)
            raise
        except OSError as exc:
            os.close(fd)
            if exc.errno in _BUSY:
                raise self._in_use() from None
            raise StateLockError(f"cannot lock {self.path}: {exc.strerror}") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"host={self.instance} pid={os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full or read-only disk: no sidecar can keep state here
            os.close(fd)
            raise StateLockError(f"cannot write {self.path}: {exc.strerror}") from None
        return fd

    def _in_use(self) -> StateLockError:
        holder = _read_holder(self.path)
        return StateLockError(
            f"state directory {self.directory} is in use by another sidecar "
            f"({holder or 'holder unknown'}); one sidecar per state directory"
        )

    def held(self) -> bool:
        """Whether the paths still name what this process locked: a directory replaced (or,
        where only the file is locked, a lock file removed) under a running sidecar means
        another one could start beside it."""
        if self._fd is None:
            return False
        locked = self._fd if self._directory_fd is None else self._directory_fd
        path = self.path if self._directory_fd is None else self.directory
        try:
            ours = os.fstat(locked)
            current = os.stat(path)
        except OSError:
            return False
        return (ours.st_dev, ours.st_ino) == (current.st_dev, current.st_ino)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None
        self._close_directory()

    def _close_directory(self) -> None:
        if self._directory_fd is not None:
            os.close(self._directory_fd)
            self._directory_fd = None


def _check_regular(fd: int, path: Path) -> None:
    """The lock file is truncated and written: only a regular file of its own (a hard link
    would make the sidecar truncate the other name's file)."""
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        raise StateLockError(f"{path} is not a regular file: remove it")
    if status.st_nlink != 1:
        raise StateLockError(f"{path} has {status.st_nlink} names (a hard link): remove it")


def _read_holder(path: Path) -> str:
    """The holder as its lock file names it, printable characters only (the file is the
    other process's word, and this message goes to a terminal); never follows a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)
    return "".join(c if c.isprintable() else "?" for c in text)
