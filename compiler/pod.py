"""Pod files (docs/contract.md §2): the ``x-claw`` models, resolved into a compiled pod."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from clawpod.compiler.descriptor import ENV_NAME, CompiledTool, LoadedDescriptor, load_descriptor
from clawpod.compiler.descriptor import validation_error as _validation_error
from clawpod.compiler.errors import CompileError, pointer
from clawpod.compiler.grants import Grant, GrantItem, ServiceGrant, expand, union
from clawpod.compiler.policy import PolicySpec, effective_policy
from clawpod.compiler.sources import DescriptorSource, FileSource, ImageSource
from clawpod.compiler.yamlload import Lines, load_file
from clawpod.sidecar.manifest import Mode, OnMixed, Provider, ToolAuth, ToolPolicy

SIDECAR_SERVICE = "claw-sidecar"
SIDECAR_HOST_URL = f"http://{SIDECAR_SERVICE}:8080"
NETWORKS = ("claw-agents", "claw-tools", "claw-egress")
STATE_VOLUME = "claw-state"
AGENT_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
SURFACE = re.compile(r"^service://(.+)$")
# Variables clawc writes into agents/<id>.env; an agent's own environment must not override them.
AGENT_ENV_NAMES = (
    "CLAW_AGENT_TOKEN",
    "CLAW_MCP_URL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
)
_AGENT_ONLY = {
    "mode": "mode",
    "tools": "tools",
    "tool_policy": "tool-policy",
    "surfaces": "surfaces",
}


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ProviderSpec(_Spec):
    api: Annotated[str, Field(pattern="^(openai|anthropic)$")] = Field(
        description="wire protocol: openai | anthropic"
    )
    base_url: str = Field(alias="base-url", pattern=r"^https?://[^\s]+$")
    key_env: str = Field(alias="key-env", pattern=ENV_NAME.pattern)
    models: list[str] = Field(min_length=1, description="model name globs routed here")

    def to_provider(self) -> Provider:
        return Provider(
            api=self.api, base_url=self.base_url, key_env=self.key_env, models=self.models
        )


DEFAULT_PROVIDERS = {
    "openai": Provider(
        api="openai",
        base_url="https://api.openai.com/v1",
        key_env="OPENAI_API_KEY",
        models=["gpt-*", "o*"],
    ),
    "anthropic": Provider(
        api="anthropic",
        base_url="https://api.anthropic.com",
        key_env="ANTHROPIC_API_KEY",
        models=["claude-*"],
    ),
}


class PodClaw(_Spec):
    """Top-level ``x-claw`` of a pod file."""

    pod: str | None = Field(
        default=None, pattern=AGENT_ID.pattern, description="default: directory name"
    )
    mode: Mode = "mediated"
    on_mixed: OnMixed = Field(default="refuse", alias="on-mixed")
    providers: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")], ProviderSpec] | None = (
        Field(default=None, min_length=1, description="default: openai and anthropic")
    )
    tools_defaults: list[GrantItem] | None = Field(default=None, alias="tools-defaults")
    tool_policy_defaults: PolicySpec | None = Field(default=None, alias="tool-policy-defaults")
    max_body_bytes: Annotated[int, Strict(), Field(gt=0)] | None = Field(
        default=None, alias="max-body-bytes"
    )
    upstream_timeout_ms: Annotated[int, Strict(), Field(gt=0)] | None = Field(
        default=None, alias="upstream-timeout-ms"
    )


class AgentMarker(_Spec):
    count: Annotated[int, Strict(), Field(ge=1, le=1000)] | None = Field(
        default=None, description="N agents with ids <service>-0 .. <service>-N-1"
    )


class ServiceClaw(_Spec):
    """``x-claw`` of a service: a tool service (``describe``/``url``) or an agent (``agent``)."""

    describe: str | None = Field(
        default=None, description="descriptor path, relative to the pod file"
    )
    url: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$", description="base URL override"
    )
    agent: AgentMarker | None = Field(default=None, description="marks an agent: {} or {count: N}")
    mode: Mode | None = None
    tools: list[GrantItem] | None = None
    tool_policy: PolicySpec | None = Field(default=None, alias="tool-policy")
    surfaces: list[Annotated[str, Field(pattern=SURFACE.pattern)]] | None = None


@dataclass
class ToolService:
    name: str
    loaded: LoadedDescriptor
    base_url: str

    @property
    def auth(self) -> ToolAuth:
        return self.loaded.descriptor.auth


@dataclass
class AgentPlan:
    id: str
    service: str
    mode: Mode
    policy: ToolPolicy
    tools: list[tuple[ToolService, CompiledTool]]
    surfaces: list[str]


@dataclass
class CompiledPod:
    file: Path
    name: str
    compose: dict[str, Any]
    claw: PodClaw
    providers: dict[str, Provider]
    agents: list[AgentPlan]
    agent_ids: dict[str, list[str]]  # agent service -> ids
    tool_services: dict[str, ToolService]

    @property
    def directory(self) -> Path:
        return self.file.parent

    @property
    def credential_envs(self) -> list[str]:
        names = [p.key_env for p in self.providers.values()]
        names += [s.auth.env for s in self.tool_services.values() if s.auth.env]
        return sorted(set(names))


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


def _env_file_entries(value: Any) -> list[tuple[str, bool]]:
    entries = value if isinstance(value, list) else [value] if value else []
    result = []
    for entry in entries:
        if isinstance(entry, dict):
            result.append((str(entry.get("path", "")), bool(entry.get("required", True))))
        else:
            result.append((str(entry), True))
    return result


def _env_names_in_file(path: Path) -> list[str]:
    names = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name = line.removeprefix("export ").split("=", 1)[0].strip()
        names.append(name)
    return names


class _Resolver:
    """Walks one pod file; every failure is a located :class:`CompileError`."""

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
        self.descriptors: dict[Path, LoadedDescriptor] = {}
        self.tool_services: dict[str, ToolService] = {}

    def fail(
        self, reason: str, path: tuple[str | int, ...], service: str | None = None
    ) -> CompileError:
        return CompileError(
            reason,
            file=self.file,
            pointer=pointer(*path),
            service=service,
            line=self.lines.line(path),
        )

    def failer(self, service: str | None) -> Callable[[str, tuple[str | int, ...]], CompileError]:
        return lambda reason, path: self.fail(reason, path, service)

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

    def _located(
        self, exc: ValidationError, prefix: tuple[str | int, ...], service: str | None
    ) -> CompileError:
        located = _validation_error(exc, str(self.file), self.lines, prefix)
        located.service = service
        return located

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
        is_agent = "agent" in claw.model_fields_set
        if is_agent and claw.agent is None:
            claw.agent = AgentMarker()
        if not is_agent:
            for attr, key in _AGENT_ONLY.items():
                if attr in claw.model_fields_set:
                    raise self.fail(
                        f"'{key}' applies to agents only (add 'agent: {{}}')", (*prefix, key), name
                    )
        elif claw.describe or claw.url:
            key = "describe" if claw.describe else "url"
            raise self.fail("an agent cannot also be a tool service", (*prefix, key), name)
        return claw

    def _source(self, name: str, claw: ServiceClaw | None) -> DescriptorSource:
        """x-claw.describe first, else the claw.describe label of the service's image."""
        if claw is not None and claw.describe:
            path = (self.file.parent / claw.describe).resolve()
            if not path.is_file():
                raise self.fail(
                    f"descriptor file not found: {claw.describe}",
                    ("services", name, "x-claw", "describe"),
                    name,
                )
            return FileSource(path)
        image = self.services[name].get("image")
        if isinstance(image, str):
            return ImageSource(image, name, self.file)
        raise self.fail(
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
        if source.path not in self.descriptors:  # services may share one descriptor file
            self.descriptors[source.path] = load_descriptor(source)
        return self.descriptors[source.path]

    def tool_service(self, name: str, claw: ServiceClaw | None) -> ToolService:
        if name not in self.tool_services:
            loaded = self._load(self._source(name, claw))
            default_url = f"http://{name}:{container_port(self.services[name])}"
            base_url = (claw.url if claw is not None and claw.url else default_url).rstrip("/")
            self.tool_services[name] = ToolService(name=name, loaded=loaded, base_url=base_url)
        return self.tool_services[name]


# Compose keys clawc reads or rewrites, with the shapes it accepts (checked before any use).
_SERVICE_SHAPES: dict[str, tuple[tuple[type, ...], tuple[type, ...]]] = {
    # key: (accepted container types, accepted item types when it is a list)
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


def _check_shapes(resolver: _Resolver) -> None:
    """Reject compose values of a shape clawc cannot rewrite, before it touches them."""
    for section in ("networks", "volumes", "configs", "secrets"):
        value = resolver.data.get(section)
        if value is not None and not isinstance(value, dict):
            raise resolver.fail(f"'{section}' must be a mapping", (section,))
    for name, definition in resolver.services.items():
        if not isinstance(definition, dict):
            raise resolver.fail("a service must be a mapping", ("services", name), name)
        for key, (shapes, items) in _SERVICE_SHAPES.items():
            value = definition.get(key)
            if value is None:
                continue
            expected = " or ".join(_TYPE_NAMES[t] for t in shapes)
            if not isinstance(value, shapes) or isinstance(value, bool):
                raise resolver.fail(f"'{key}' must be {expected}", ("services", name, key), name)
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if not isinstance(item, items) or isinstance(item, bool):
                        allowed = " or ".join(_TYPE_NAMES[t] for t in items)
                        raise resolver.fail(
                            f"items of '{key}' must be {allowed}",
                            ("services", name, key, index),
                            name,
                        )


def _agent_ids(name: str, marker: AgentMarker) -> list[str]:
    return [name] if marker.count is None else [f"{name}-{i}" for i in range(marker.count)]


def _check_reserved(resolver: _Resolver) -> None:
    if SIDECAR_SERVICE in resolver.services:
        raise resolver.fail(
            f"'{SIDECAR_SERVICE}' is reserved for the sidecar", ("services", SIDECAR_SERVICE)
        )
    for section, names in (("networks", NETWORKS), ("volumes", (STATE_VOLUME,))):
        for reserved in names:
            if reserved in (resolver.data.get(section) or {}):
                raise resolver.fail(f"'{reserved}' is reserved by clawc", (section, reserved))


def _resolve_grants(
    resolver: _Resolver,
    grants: list[ServiceGrant],
    claws: dict[str, ServiceClaw | None],
    agent_services: set[str],
    service: str | None,
) -> list[tuple[ToolService, CompiledTool]]:
    tools: list[tuple[ToolService, CompiledTool]] = []
    for grant in grants:
        if grant.service not in resolver.services:
            known = ", ".join(sorted(s for s in resolver.services if s not in agent_services))
            raise resolver.fail(
                f"unknown service '{grant.service}' (services: {known})", grant.path, service
            )
        if grant.service in agent_services:
            raise resolver.fail(
                f"'{grant.service}' is an agent, not a tool service", grant.path, service
            )
        target = resolver.tool_service(grant.service, claws.get(grant.service))
        available = target.loaded.tools_by_name
        if not available:
            raise resolver.fail(f"service '{grant.service}' declares no tools", grant.path, service)
        if grant.all:
            tools += [(target, tool) for tool in target.loaded.tools]
            continue
        for name in grant.names:
            if name not in available:
                raise resolver.fail(
                    f"unknown tool '{name}' of service '{grant.service}' "
                    f"(tools: {', '.join(available)})",
                    grant.name_paths[name],
                    service,
                )
            tools.append((target, available[name]))
    return tools


def _starvation(resolver: _Resolver, name: str, forbidden: dict[str, str]) -> None:
    definition = resolver.services[name]
    environment = definition.get("environment") or {}
    keys = (
        list(environment)
        if isinstance(environment, dict)
        else [str(item).split("=", 1)[0] for item in environment]
    )
    for key in keys:
        if key in forbidden:
            raise resolver.fail(
                f"agent sets {key}, {forbidden[key]}; agents must not hold credentials",
                (
                    "services",
                    name,
                    "environment",
                    key if isinstance(environment, dict) else keys.index(key),
                ),
                name,
            )
    for entry, required in _env_file_entries(definition.get("env_file")):
        path = resolver.file.parent / entry
        if not path.is_file():
            if required:
                raise resolver.fail(
                    f"env_file not found: {entry}", ("services", name, "env_file"), name
                )
            continue
        for key in _env_names_in_file(path):
            if key in forbidden:
                raise resolver.fail(
                    f"agent env_file {entry} sets {key}, {forbidden[key]}; "
                    "agents must not hold credentials",
                    ("services", name, "env_file"),
                    name,
                )


def _claim_agent_ids(
    resolver: _Resolver, name: str, marker: AgentMarker, taken: set[str]
) -> list[str]:
    """The agent ids of service ``name``, each valid and new; they join ``taken``."""
    pointer = ("services", name, "x-claw", "agent")
    ids = _agent_ids(name, marker)
    for agent_id in ids:
        if not AGENT_ID.match(agent_id):
            raise resolver.fail(f"'{agent_id}' is not a valid agent id", pointer, name)
        if agent_id != name and agent_id in taken:
            raise resolver.fail(f"agent id '{agent_id}' clashes with a service", pointer, name)
        taken.add(agent_id)
    return ids


def _surfaces(
    resolver: _Resolver, name: str, service_claw: ServiceClaw, agent_services: set[str]
) -> list[str]:
    """The tool services agent ``name`` may reach directly."""
    surfaces = []
    for index, surface in enumerate(service_claw.surfaces or []):
        target = SURFACE.match(surface).group(1)  # type: ignore[union-attr]
        if target not in resolver.services or target in agent_services:
            raise resolver.fail(
                f"surface '{surface}' names no service",
                ("services", name, "x-claw", "surfaces", index),
                name,
            )
        surfaces.append(target)
    return surfaces


def _check_agent_definition(resolver: _Resolver, name: str, marker: AgentMarker) -> None:
    """Compose settings that would defeat the networks and ids clawc gives agents."""
    if "network_mode" in resolver.services[name]:
        raise resolver.fail(
            "agents cannot set network_mode: clawc places them on claw-agents",
            ("services", name, "network_mode"),
            name,
        )
    if marker.count and "container_name" in resolver.services[name]:
        raise resolver.fail(
            "container_name cannot be combined with agent count", ("services", name), name
        )


def compile_pod(path: Path | str) -> CompiledPod:
    """Resolve a pod file into agents, their tools and policies; raise :class:`CompileError`."""
    resolver = _Resolver(Path(path))
    _check_shapes(resolver)
    _check_reserved(resolver)
    claw = resolver.parse_pod_claw()
    claws = {name: resolver.parse_service_claw(name) for name in resolver.services}
    agent_services = {
        n for n, c in claws.items() if c is not None and "agent" in c.model_fields_set
    }
    for name, service_claw in claws.items():
        if service_claw is not None and service_claw.describe:
            resolver.tool_service(name, service_claw)

    defaults_path = ("x-claw", "tools-defaults")
    defaults = claw.tools_defaults
    default_grants = expand(None, (), defaults, defaults_path, resolver.failer(None))
    _resolve_grants(resolver, union(default_grants), claws, agent_services, None)

    agents: list[AgentPlan] = []
    agent_ids: dict[str, list[str]] = {}
    taken = set(resolver.services)
    for name in sorted(agent_services, key=list(resolver.services).index):
        service_claw = claws[name]
        assert service_claw is not None and service_claw.agent is not None
        prefix = ("services", name, "x-claw")
        ids = _claim_agent_ids(resolver, name, service_claw.agent, taken)
        declared = service_claw.tools if "tools" in service_claw.model_fields_set else None
        if "tools" in service_claw.model_fields_set and declared is None:
            raise resolver.fail("tools must be a list ([] for no tools)", (*prefix, "tools"), name)
        grants = expand(
            declared, (*prefix, "tools"), defaults, defaults_path, resolver.failer(name)
        )
        tools = _resolve_grants(resolver, union(grants), claws, agent_services, name)
        policy = effective_policy(
            claw.tool_policy_defaults,
            service_claw.tool_policy,
            "tool_policy" in service_claw.model_fields_set,
        )
        surfaces = _surfaces(resolver, name, service_claw, agent_services)
        _check_agent_definition(resolver, name, service_claw.agent)
        mode = service_claw.mode or claw.mode
        agent_ids[name] = ids
        agents += [AgentPlan(i, name, mode, policy, tools, surfaces) for i in ids]

    providers = (
        {n: p.to_provider() for n, p in claw.providers.items()}
        if claw.providers
        else dict(DEFAULT_PROVIDERS)
    )
    forbidden = {name: "set by clawc in the agent's env file" for name in AGENT_ENV_NAMES}
    for service in resolver.tool_services.values():
        if service.auth.env:
            forbidden[service.auth.env] = f"the credential of service '{service.name}'"
    for provider_name, provider in providers.items():
        forbidden[provider.key_env] = f"the key of provider '{provider_name}'"
    for name in agent_ids:
        _starvation(resolver, name, forbidden)
    pod_name = claw.pod or resolver.file.resolve().parent.name
    return CompiledPod(
        file=resolver.file,
        name=pod_name,
        compose=resolver.data,
        claw=claw,
        providers=providers,
        agents=agents,
        agent_ids=agent_ids,
        tool_services=resolver.tool_services,
    )
