"""Tool services of a pod: where each one's descriptor comes from and the base URL it gets."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...sidecar.manifest import ToolAuth
from ..pod_file.confined_files import ConfinementError, resolve_confined
from ..pod_file.reader import PodReader
from ..pod_file.spec import ServiceClaw
from .descriptors import LoadedDescriptor, load_descriptor
from .sources import DescriptorSource, FileSource, ImageSource

# Cloud instance metadata services answer here; a tool pointed at one leaks the host's role.
METADATA_NETWORKS = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fd00:ec2::254"))


@dataclass
class ToolService:
    name: str
    loaded: LoadedDescriptor
    base_url: str
    principal: str | None = None
    principal_env: str | None = None
    principal_auth: ToolAuth | None = None

    @property
    def auth(self) -> ToolAuth:
        """The descriptor's auth, with a grant's principal's variable when it names one, or
        the principal's own OAuth auth."""
        auth = self.loaded.descriptor.auth
        if self.principal is None:
            return auth
        if self.principal_auth is not None:
            return self.principal_auth.model_copy(update={"principal": self.principal})
        return auth.model_copy(update={"env": self.principal_env, "principal": self.principal})

    def as_principal(
        self, principal: str, env: str | None, auth: ToolAuth | None = None
    ) -> ToolService:
        return dataclasses.replace(
            self, principal=principal, principal_env=env, principal_auth=auth
        )


def container_port(definition: dict[str, Any]) -> int:
    """First exposed, else first published container port, else 80."""
    for entry in definition.get("expose") or []:
        match = re.match(r"^(\d+)", str(entry))
        if match:
            return int(match.group(1))
    for entry in definition.get("ports") or []:
        if isinstance(entry, dict) and entry.get("target"):
            return int(entry["target"])
        text = str(entry).split("/")[0].rsplit(":", 1)[-1]
        match = re.match(r"^(\d+)", text)
        if match:
            return int(match.group(1))
    return 80


def _is_metadata_address(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in METADATA_NETWORKS)


class ToolServices:
    """The pod's tool services, each loaded once, with descriptors confined to ``root``."""

    def __init__(self, reader: PodReader, root: Path) -> None:
        self.reader = reader
        self.root = root
        self.by_name: dict[str, ToolService] = {}
        self._descriptors: dict[Path, LoadedDescriptor] = {}

    def _source(self, name: str, claw: ServiceClaw | None) -> DescriptorSource:
        """x-claw.describe first, else the claw.describe label of the service's image."""
        if claw is not None and claw.describe:
            try:
                path = resolve_confined(self.root, self.reader.directory, claw.describe)
            except ConfinementError as exc:
                raise self.reader.fail(
                    f"cannot use descriptor {claw.describe!r}: {exc}",
                    ("services", name, "x-claw", "describe"),
                    name,
                ) from None
            if not path.exists():
                raise self.reader.fail(
                    f"descriptor file not found: {claw.describe}",
                    ("services", name, "x-claw", "describe"),
                    name,
                )
            return FileSource(path, self.root)
        image = self.reader.services[name].get("image")
        if isinstance(image, str):
            return ImageSource(image, name, self.reader.file)
        raise self.reader.fail(
            "no descriptor: set x-claw.describe, or use an image labelled 'claw.describe'",
            ("services", name),
            name,
        )

    def _load(self, source: DescriptorSource) -> LoadedDescriptor:
        if isinstance(source, ImageSource):
            try:
                return load_descriptor(source)
            finally:
                source.close()
        assert isinstance(source, FileSource)
        if source.path not in self._descriptors:  # services may share one descriptor file
            self._descriptors[source.path] = load_descriptor(source)
        return self._descriptors[source.path]

    def _base_url(self, name: str, claw: ServiceClaw | None) -> str:
        if claw is None or not claw.url:
            return f"http://{name}:{container_port(self.reader.services[name])}"
        where = ("services", name, "x-claw", "url")
        try:
            parts = urlsplit(claw.url)
            host = parts.hostname or ""
        except ValueError as exc:
            raise self.reader.fail(f"not a valid URL: {exc}", where, name) from None
        if parts.username is not None or parts.password is not None:
            raise self.reader.fail(
                "url must not carry credentials (user:password@); "
                "give the service an auth.env in its descriptor instead",
                where,
                name,
            )
        if _is_metadata_address(host):
            self.reader.warn(
                f"url points at {host}, a link-local / cloud metadata address; "
                "tool calls will reach it with the sidecar's network identity",
                where,
                name,
            )
        return claw.url.rstrip("/")

    def get(self, name: str, claw: ServiceClaw | None) -> ToolService:
        if name not in self.by_name:
            loaded = self._load(self._source(name, claw))
            base_url = self._base_url(name, claw)
            self.by_name[name] = ToolService(name=name, loaded=loaded, base_url=base_url)
        return self.by_name[name]
