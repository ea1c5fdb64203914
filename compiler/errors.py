"""The one error type of the compiler: bad input, located as precisely as the input allows."""

from __future__ import annotations

import os
from pathlib import Path


def display_path(path: Path | str) -> str:
    """A path as the user would recognise it: relative to the working directory when inside it."""
    path = Path(path)
    try:
        return os.path.relpath(path) if Path.cwd() in path.resolve().parents else str(path)
    except (OSError, ValueError):
        return str(path)


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) from path parts."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class CompileError(Exception):
    """Invalid input. ``str()`` is the single message shown to the user.

    ``file`` is the pod file or descriptor, ``pointer`` the JSON pointer of the offending value,
    ``service`` the compose service concerned and ``line`` the 1-based line when known.
    """

    def __init__(
        self,
        reason: str,
        *,
        file: Path | str | None = None,
        pointer: str | None = None,
        service: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.file = file
        self.pointer = pointer
        self.service = service
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = display_path(self.file) + (f":{self.line}" if self.line else "") + ": "
        if self.service is not None:
            where += f"service '{self.service}': "
        if self.pointer:
            where += f"{self.pointer}: "
        return where + self.reason
