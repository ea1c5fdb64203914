"""Files a pod or descriptor names (``describe``, ``skill``) are read only from inside the pod's
directory tree: relative, no ``..`` escape, no symlink out, regular files of at most 1 MiB.
``clawc import openapi --context`` confines its document to a build context by the same rules.

A skill file is rendered into the agent-facing ``CONTEXT.md``; without these rules a descriptor
could copy ``../.env`` (provider keys) to the agent, or hang the compiler on ``/dev/zero``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

MAX_NAMED_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Tree:
    """How refusals name the tree a file must stay in, and what the user can do about it."""

    name: str
    relative_to: str
    advice: str


POD_TREE = Tree(
    name="the pod directory tree",
    relative_to="the file that names it",
    advice="files a pod names are read only from inside that tree: move the file in, or widen "
    "the tree with x-claw.root (a directory that holds both, relative to the pod file)",
)


class ConfinementError(Exception):
    """A named file that may not be read; ``str()`` is the reason."""


def _is_env_file(path: Path) -> bool:
    # compose's env files hold the keys and agent tokens; they are never descriptors or skills
    return path.name == ".env" or path.name.endswith(".env")


def resolve_confined(root: Path, base: Path, named: str, tree: Tree = POD_TREE) -> Path:
    """The real path of ``named`` (relative to directory ``base``), which must lie in ``root``."""
    if not named or PurePosixPath(named).is_absolute() or PureWindowsPath(named).is_absolute():
        raise ConfinementError(
            f"absolute paths are not allowed (give a path relative to {tree.relative_to})"
        )
    root = root.resolve()
    spelled = Path(os.path.normpath(base.resolve() / named))
    if not spelled.is_relative_to(root):
        raise ConfinementError(f"it leaves {tree.name} ({root}); {tree.advice}")
    real = spelled.resolve()
    if not real.is_relative_to(root):
        raise ConfinementError(f"a symlink on the way points outside {tree.name}")
    if _is_env_file(real):
        raise ConfinementError("it is an env file (env files hold secrets)")
    return real


def read_limited(path: Path) -> str:
    """The UTF-8 text of the regular file ``path`` (at most 1 MiB)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfinementError("not found") from None
    except OSError as exc:
        raise ConfinementError(str(exc.strerror or exc)) from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfinementError("not a regular file")
    if info.st_size > MAX_NAMED_FILE_BYTES:
        raise ConfinementError(f"larger than 1 MiB ({info.st_size} bytes)")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_NAMED_FILE_BYTES + 1)  # the file may grow after stat
    except OSError as exc:
        raise ConfinementError(str(exc.strerror or exc)) from None
    if len(data) > MAX_NAMED_FILE_BYTES:
        raise ConfinementError("larger than 1 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfinementError("not UTF-8 text") from None
