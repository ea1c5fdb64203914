"""One pod file read into memory, with located errors and warnings for everything in it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clawpod.compiler.descriptor import validation_error
from clawpod.compiler.errors import CompileError, pointer
from clawpod.compiler.grants import Grant
from clawpod.compiler.pod_spec import AGENT_ONLY_FIELDS, AgentMarker, PodClaw, ServiceClaw
from clawpod.compiler.yamlload import Lines, load_file

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

    def _located(self, exc: ValidationError, prefix: Where, service: str | None) -> CompileError:
        located = validation_error(exc, str(self.file), self.lines, prefix)
        located.service = service
        return located

    def parse_pod_claw(self) -> PodClaw:
        raw = self.data.get("x-claw") or {}
        if not isinstance(raw, dict):
            raise self.fail("x-claw must be a mapping", ("x-claw",))
        try:
            claw = PodClaw.model_validate(raw)
        except ValidationError as exc:
            raise self._located(exc, ("x-claw",), None) from None
        for index, item in enumerate(claw.tools_defaults or []):
            if not isinstance(item, Grant):
                raise self.fail(
                    "'...' cannot be used inside tools-defaults",
                    ("x-claw", "tools-defaults", index),
                )
        return claw

    def parse_service_claw(self, name: str) -> ServiceClaw | None:
        definition = self.services[name]
        if not isinstance(definition, dict):
            raise self.fail("a service must be a mapping", ("services", name), name)
        if "x-claw" not in definition:
            return None
        prefix = ("services", name, "x-claw")
        raw = definition["x-claw"]
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise self.fail("x-claw must be a mapping", prefix, name)
        try:
            claw = ServiceClaw.model_validate(raw)
        except ValidationError as exc:
            raise self._located(exc, prefix, name) from None
        if claw.is_agent and claw.agent is None:
            claw.agent = AgentMarker()
        if not claw.is_agent:
            for attr, key in AGENT_ONLY_FIELDS.items():
                if attr in claw.model_fields_set:
                    raise self.fail(
                        f"'{key}' applies to agents only (add 'agent: {{}}')", (*prefix, key), name
                    )
        elif claw.describe or claw.url:
            key = "describe" if claw.describe else "url"
            raise self.fail("an agent cannot also be a tool service", (*prefix, key), name)
        return claw
