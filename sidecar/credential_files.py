"""Credentials from files: ``NAME_FILE`` names a file holding the value of ``NAME`` (SPEC §13.2).

Swarm and Kubernetes mount secrets as files; the convention of official images (``_FILE``
suffix) lets the same build read them without the value ever sitting in the environment. Only
the variables the sidecar reads as credentials are looked up this way, so an unrelated
``SSL_CERT_FILE`` is never read as a secret.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping

from .manifest import Build

FILE_SUFFIX = "_FILE"
MAX_CREDENTIAL_BYTES = 64 * 1024  # a key or token; a larger file is a wrong mount


class CredentialFileError(Exception):
    """A ``NAME_FILE`` cannot be read, or both ``NAME`` and ``NAME_FILE`` are set."""


def credential_names(build: Build, extra: Iterable[str] = ()) -> set[str]:
    """Every environment variable ``build`` reads a credential from, plus ``extra``."""
    names = {name for provider in build.config.providers.values() for name in provider.key_envs}
    if build.config.shared_limits is not None:
        names.add(build.config.shared_limits.url_env)  # may carry the store's password
    for agent in build.agents.values():
        for tool in agent.tools.tools:
            names.update(tool.execution.auth.credential_envs)
    return names | set(extra)


def with_credential_files(env: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    """``env`` plus the value of each ``NAME`` in ``names`` read from ``NAME_FILE``.

    One trailing newline is dropped (``echo value > file`` and ``docker secret create`` both
    leave one). Raises :class:`CredentialFileError` naming the variable, never the value.
    """
    resolved = dict(env)
    for name in sorted(names):
        path = env.get(name + FILE_SUFFIX)
        if not path:
            continue
        if env.get(name):
            raise CredentialFileError(f"both {name} and {name}{FILE_SUFFIX} are set; set one")
        resolved[name] = _read(name, path)
    return resolved


def _read(name: str, path: str) -> str:
    # Non-blocking open, then regular files only: a FIFO or a device named by mistake (or
    # malice) must not hang the start or feed it endless bytes.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CredentialFileError(
            f"{name}{FILE_SUFFIX}: cannot read {path}: {exc.strerror}"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CredentialFileError(f"{name}{FILE_SUFFIX}: {path} is not a regular file")
        data = handle.read(MAX_CREDENTIAL_BYTES + 1)
    if len(data) > MAX_CREDENTIAL_BYTES:
        raise CredentialFileError(f"{name}{FILE_SUFFIX}: {path} is larger than a credential")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialFileError(f"{name}{FILE_SUFFIX}: {path} is not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise CredentialFileError(f"{name}{FILE_SUFFIX}: {path} is empty")
    return text
