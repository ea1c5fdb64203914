"""Where a descriptor comes from: a file beside the pod, or a file inside a local image.

Images name their descriptor with the ``claw.describe`` label; it is read with the docker SDK
from a created (never started) container, which is removed again straight after.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path
from typing import Any, Protocol

from ..errors import CompileError
from ..pod_file.confined_files import (
    MAX_NAMED_FILE_BYTES,
    ConfinementError,
    read_limited,
    resolve_confined,
)

DESCRIBE_LABEL = "claw.describe"


class DescriptorSource(Protocol):
    label: str  # how errors name the descriptor
    is_json: bool

    def read_descriptor(self) -> str: ...
    def read_relative(self, relative: str) -> str: ...


class FileSource:
    """A descriptor file; every file it names must stay inside the directory tree ``root``
    (the pod's; by default the descriptor's own directory)."""

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root or path.parent
        self.label = str(path)
        self.is_json = path.suffix.lower() == ".json"

    def read_descriptor(self) -> str:
        try:
            return read_limited(self.path)
        except ConfinementError as exc:
            raise CompileError(f"cannot read descriptor: {exc}", file=self.path) from None

    def read_relative(self, relative: str) -> str:
        try:
            return read_limited(resolve_confined(self.root, self.path.parent, relative))
        except ConfinementError as exc:
            raise CompileError(f"cannot read {relative!r}: {exc}", file=self.path) from None


class ImageSource:
    """A descriptor inside a local image, found through its ``claw.describe`` label."""

    def __init__(self, image: str, service: str, pod_file: Path) -> None:
        self.image = image
        self.service = service
        self.pod_file = pod_file
        self._client: Any = None
        self._container: Any = None
        self._path = ""
        self.label = f"image {image}"
        self.is_json = False

    def _fail(self, reason: str) -> CompileError:
        return CompileError(
            f"{reason}; set x-claw.describe to the descriptor file instead",
            file=self.pod_file,
            service=self.service,
        )

    def _open(self) -> None:
        import docker  # imported lazily: most compiles never talk to an engine
        from docker.errors import DockerException, ImageNotFound

        try:
            self._client = docker.from_env(timeout=10)
            self._client.ping()
        except DockerException:
            raise self._fail(
                f"no x-claw.describe, and no Docker engine is reachable to read the "
                f"'{DESCRIBE_LABEL}' label of image '{self.image}'"
            ) from None
        try:
            image = self._client.images.get(self.image)
        except ImageNotFound:
            raise self._fail(
                f"no x-claw.describe, and image '{self.image}' is not present locally "
                "(build or pull it first)"
            ) from None
        except DockerException as exc:
            raise self._fail(f"cannot inspect image '{self.image}': {exc}") from None
        named = (image.labels or {}).get(DESCRIBE_LABEL)
        if not named:
            raise self._fail(f"image '{self.image}' has no '{DESCRIBE_LABEL}' label")
        workdir = (image.attrs.get("Config") or {}).get("WorkingDir") or "/"
        self._path = posixpath.normpath(posixpath.join(workdir, named))
        self.label = f"image {self.image}:{self._path}"
        self.is_json = self._path.lower().endswith(".json")
        self._container = self._client.containers.create(self.image, command=["true"])

    def _read(self, path: str) -> str:
        from docker.errors import DockerException

        try:
            stream, stat = self._container.get_archive(path)
            if stat.get("size", 0) > MAX_NAMED_FILE_BYTES:
                raise CompileError(f"'{path}' is larger than 1 MiB", file=self.label)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                member = archive.getmembers()[0]
                extracted = archive.extractfile(member) if member.isfile() else None
                if extracted is None:
                    raise CompileError(f"'{path}' is not a regular file", file=self.label)
                return extracted.read().decode("utf-8")
        except (DockerException, tarfile.TarError, UnicodeDecodeError, IndexError) as exc:
            raise CompileError(
                f"cannot read '{path}' from the image: {exc}", file=self.label
            ) from None

    def read_descriptor(self) -> str:
        self._open()
        return self._read(self._path)

    def read_relative(self, relative: str) -> str:
        """A file beside the descriptor in the image, never above its directory."""
        directory = posixpath.dirname(self._path)
        target = posixpath.normpath(posixpath.join(directory, relative))
        if posixpath.isabs(relative) or not target.startswith(directory.rstrip("/") + "/"):
            raise CompileError(
                f"{relative!r} leaves the descriptor's directory in the image", file=self.label
            )
        return self._read(target)

    def close(self) -> None:
        if self._container is not None:
            self._container.remove(force=True)
            self._container = None
