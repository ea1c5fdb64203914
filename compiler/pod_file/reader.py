"""One pod file read into memory, with located errors and warnings for everything in it, and the
compose values clawc reads or rewrites checked first for a shape it understands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CompileError, pointer
from .documents import Lines, load_file

Where = tuple[str | int, ...]
Fail = Callable[[str, Where], CompileError]


class PodReader:
    """The parsed pod file; every failure is a :class:`CompileError` naming file, service, line."""

    def __init__(self, path: Path) -> None:
        self.file = path
        data, lines = load_file(path, "pod file")
        self.lines: Lines = lines
        if not isinstance(data, dict):
            raise CompileError("a pod file must be a compose mapping", file=path, line=1)
        self.data: dict[str, Any] = data
        services = data.get("services")
        if not isinstance(services, dict) or not services:
            raise CompileError(
                "a pod file needs a 'services' mapping", file=path, pointer="/services"
            )
        self.services: dict[str, Any] = services
        self.warnings: list[str] = []

    @property
    def directory(self) -> Path:
        return self.file.parent

    def fail(self, reason: str, path: Where, service: str | None = None) -> CompileError:
        return CompileError(
            reason,
            file=self.file,
            pointer=pointer(*path),
            service=service,
            line=self.lines.line(path),
        )

    def failer(self, service: str | None) -> Fail:
        return lambda reason, path: self.fail(reason, path, service)

    def warn(self, reason: str, path: Where, service: str | None = None) -> None:
        """Record a warning, located like an error; the caller shows it and carries on."""
        self.warnings.append(str(self.fail(reason, path, service)))


# key: (accepted container types, accepted item types when it is a list)
_SERVICE_SHAPES: dict[str, tuple[tuple[type, ...], tuple[type, ...]]] = {
    "environment": ((dict, list), (str,)),
    "env_file": ((str, list), (str, dict)),
    "depends_on": ((dict, list), (str,)),
    "volumes": ((list,), (str, dict)),
    "networks": ((dict, list), (str,)),
    "build": ((str, dict), ()),
    "expose": ((list,), (str, int)),
    "ports": ((list,), (str, int, dict)),
}
_TYPE_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "a number"}


def check_shapes(reader: PodReader) -> None:
    """Reject compose values of a shape clawc cannot rewrite, before it touches them."""
    for section in ("networks", "volumes", "configs", "secrets"):
        value = reader.data.get(section)
        if value is not None and not isinstance(value, dict):
            raise reader.fail(f"'{section}' must be a mapping", (section,))
    for name, definition in reader.services.items():
        if not isinstance(definition, dict):
            raise reader.fail("a service must be a mapping", ("services", name), name)
        for key, (shapes, items) in _SERVICE_SHAPES.items():
            value = definition.get(key)
            if value is None:
                continue
            expected = " or ".join(_TYPE_NAMES[t] for t in shapes)
            if not isinstance(value, shapes) or isinstance(value, bool):
                raise reader.fail(f"'{key}' must be {expected}", ("services", name, key), name)
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if not isinstance(item, items) or isinstance(item, bool):
                        allowed = " or ".join(_TYPE_NAMES[t] for t in items)
                        raise reader.fail(
                            f"items of '{key}' must be {allowed}",
                            ("services", name, key, index),
                            name,
                        )
