"""The build contract between `clawc compile` and the sidecar.

Every file the compiler writes under ``OUT/`` that the sidecar reads is modelled here, once.
The compiler builds these models and serialises them with :func:`dump_json`; the sidecar
loads them with :func:`load_build`, which refuses a build whose ``digest.json`` does not match.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MANIFEST_VERSION = 1
PRESENTED_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024

Mode = Literal["mediated", "native"]
OnMixed = Literal["refuse", "retry"]
# auto: requests that want data, not actions, get no tools (SPEC §7.3); always: every request.
ToolInjection = Literal["auto", "always"]
HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
# What a request that read untrusted tool output does with its held calls (SPEC §17).
TaintMode = Literal["confirm", "withdraw", "off"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# OAuth 2.1 types (SPEC §21): the sidecar fetches the token it sends (sidecar/identity/).
OAUTH_AUTH_TYPES = frozenset({"oauth2-client-credentials", "token-exchange"})


class ToolAuth(_Model):
    """How the sidecar authenticates to a service; ``env`` (and the OAuth types' ``*-env``)
    name variables, never values."""

    type: Literal[
        "bearer", "header", "query", "basic", "none", "oauth2-client-credentials", "token-exchange"
    ]
    env: str | None = None
    header: str | None = None
    param: str | None = Field(
        default=None, description="query: the query parameter that carries the secret"
    )
    principal: str | None = Field(
        default=None, description="the pod principal whose variable ``env`` is (SPEC §9.1)"
    )
    token_url: str | None = Field(
        default=None,
        alias="token-url",
        description="OAuth: the token endpoint; absent on an MCP service that publishes "
        "RFC 9728 metadata (then discovered, only on `discovery-hosts`)",
    )
    client_id_env: str | None = Field(default=None, alias="client-id-env")
    client_secret_env: str | None = Field(default=None, alias="client-secret-env")
    # None rather than empty, so builds of tools without OAuth keep their bytes.
    scopes: tuple[str, ...] | None = None
    audience: str | None = Field(default=None, description="OAuth: the `audience` parameter")
    resource: str | None = Field(
        default=None, description="OAuth: the RFC 8707 resource indicator (an absolute URI)"
    )
    discovery_hosts: tuple[str, ...] | None = Field(
        default=None,
        alias="discovery-hosts",
        description="OAuth discovery: the hosts (host or host:port) the sidecar may ask for "
        "RFC 9728 and RFC 8414 metadata and tokens",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ToolAuth:
        if self.type in OAUTH_AUTH_TYPES:
            return self._oauth_consistent()
        if self.type != "none" and not self.env:
            raise ValueError(f"auth type {self.type!r} needs 'env'")
        if self.type == "header" and not self.header:
            raise ValueError("auth type 'header' needs 'header'")
        if self.type == "query" and not self.param:
            raise ValueError("auth type 'query' needs 'param'")
        return self

    def _oauth_consistent(self) -> ToolAuth:
        missing = [
            name
            for name, value in (
                ("client-id-env", self.client_id_env),
                ("client-secret-env", self.client_secret_env),
            )
            if not value
        ]
        if not self.token_url and not self.discovery_hosts:
            missing.append("token-url (or discovery-hosts, to discover it)")
        if missing:
            raise ValueError(f"auth type {self.type!r} needs {', '.join(missing)}")
        if self.env or self.header or self.param:
            raise ValueError(f"auth type {self.type!r} takes no 'env', 'header' or 'param'")
        return self

    @property
    def oauth(self) -> bool:
        return self.type in OAUTH_AUTH_TYPES

    @property
    def credential_envs(self) -> tuple[str, ...]:
        """Every variable a credential of this auth is read from."""
        names = (self.env, self.client_id_env, self.client_secret_env)
        return tuple(name for name in names if name)


DEFAULT_MCP_TTL_MS = 300000
# In the sidecar's state dir: the tools it quarantined (§11.2), for `clawc inspect --state-dir`.
QUARANTINE_FILE = "quarantine.json"


class Execution(_Model):
    """Hidden execution metadata: never shown to an agent.

    ``http``: one HTTP request per call (``method``, ``path``, ``body``; ``query`` and ``headers``
    name the arguments sent in the query string beside a JSON body, and as headers). ``mcp``: a
    ``tools/call`` of ``tool`` on the service's MCP endpoint ``base_url`` + ``path`` (Streamable
    HTTP), whose tool list is re-checked against the pins every ``ttl_ms``.
    """

    transport: Literal["http", "mcp"] = "http"
    service: str
    base_url: str
    method: HttpMethod | None = None
    path: str
    body: Literal["json", "none"] | None = None
    body_key: str | None = None
    body_arg: str | None = Field(
        default=None, description="http: the argument whose value is the whole JSON body"
    )
    query: list[str] | None = Field(
        default=None, description="http: arguments sent in the query string beside a JSON body"
    )
    headers: dict[str, str] | None = Field(
        default=None, description="http: argument -> the request header it is sent in"
    )
    tool: str | None = Field(default=None, description="mcp: the tool's name at the service")
    ttl_ms: int | None = Field(default=None, gt=0, description="mcp: drift check interval")
    auth: ToolAuth

    @model_validator(mode="after")
    def _complete(self) -> Execution:
        if self.transport == "http" and (self.method is None or self.body is None):
            raise ValueError("http execution needs 'method' and 'body'")
        if self.transport == "mcp" and self.tool is None:
            raise ValueError("mcp execution needs 'tool'")
        return self

    @property
    def endpoint(self) -> str:
        """The URL a call goes to (for MCP, the service's MCP endpoint)."""
        return self.base_url.rstrip("/") + self.path


class ToolPolicy(_Model):
    max_rounds: int = Field(default=8, gt=0)
    timeout_per_tool_ms: int = Field(default=30000, gt=0)
    total_timeout_ms: int = Field(default=120000, gt=0)
    max_tool_result_bytes: int = Field(default=16384, gt=0)

    @model_validator(mode="after")
    def _total_covers_one_tool(self) -> ToolPolicy:
        if self.total_timeout_ms < self.timeout_per_tool_ms:
            raise ValueError("total_timeout_ms must be >= timeout_per_tool_ms")
        return self


# MCP's defaults for hints a tool does not declare (SPEC §9.3): a tool that says nothing may
# change and destroy data, and repeating it may not be harmless.
MCP_DEFAULT_ANNOTATIONS: Mapping[str, bool] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}


class Effect(StrEnum):
    """What running a tool does to the world, decided once from its MCP annotations."""

    READ_ONLY = "read-only"
    IDEMPOTENT = "idempotent"
    """Changes data, never destructively; running it again changes nothing more."""
    ADDITIVE = "additive"
    """Changes data, never destructively; running it again changes it again."""
    DESTRUCTIVE = "destructive"
    """May destroy or overwrite data (MCP's default for a tool that is not read-only)."""

    @property
    def repeatable(self) -> bool:
        """Running it twice with the same arguments is harmless."""
        return self is Effect.READ_ONLY or self is Effect.IDEMPOTENT


def effect_of(annotations: Mapping[str, Any]) -> Effect:
    """The effect of a tool with these annotations, absent (or null) hints at MCP's defaults."""

    def hint(name: str) -> bool:
        value = annotations.get(name)
        return MCP_DEFAULT_ANNOTATIONS[name] if value is None else bool(value)

    if hint("readOnlyHint"):
        return Effect.READ_ONLY
    if hint("destructiveHint"):
        return Effect.DESTRUCTIVE
    return Effect.IDEMPOTENT if hint("idempotentHint") else Effect.ADDITIVE


class ManagedTool(_Model):
    # The sidecar keys a tool by its name, unique in an agent's build and the same in every
    # copy of it (``id()`` is not: a copied build lost its grants).
    name: str = Field(description="canonical name <service>.<tool>")
    presented: str = Field(pattern=PRESENTED_NAME_PATTERN, description="what the model sees")
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")
    annotations: dict[str, Any] = Field(default_factory=dict)
    execution: Execution
    pin: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the service's definition (name, description, schema, annotations)",
    )
    untrusted_output: bool | None = Field(
        default=None,
        description="true: its results are open-world content that taints a request (SPEC §17)",
    )
    long_running: bool | None = Field(
        default=None,
        description="true: its calls may outlive the tool timeout; a mediated round with one "
        "waits up to the request's tool budget (SPEC §22)",
    )
    effect: Effect = Field(
        description="what running it does, from its annotations (MCP's defaults)"
    )

    @model_validator(mode="before")
    @classmethod
    def _effect_stated(cls, data: Any) -> Any:
        """``clawc`` writes the effect into the build; a build from before it had none, and a
        tool made in code states only its annotations: both get it from the one rule."""
        if isinstance(data, dict) and data.get("effect") is None:
            return {**data, "effect": effect_of(data.get("annotations") or {})}
        return data

    @property
    def untrusted(self) -> bool:
        return bool(self.untrusted_output)


class ToolsManifest(_Model):
    """``context/<agent>/tools.json``."""

    version: Literal[1] = MANIFEST_VERSION
    agent: str
    tools: list[ManagedTool]
    policy: ToolPolicy

    @model_validator(mode="after")
    def _unique_names(self) -> ToolsManifest:
        for attr in ("name", "presented"):
            values = [getattr(tool, attr) for tool in self.tools]
            if len(values) != len(set(values)):
                raise ValueError(f"duplicate tool {attr} in manifest of {self.agent!r}")
        return self


class AgentManifest(_Model):
    """``context/<agent>/agent.json``: identity and policy, with the token only as a hash."""

    id: str
    mode: Mode
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    on_mixed: OnMixed = "refuse"
    tool_injection: ToolInjection = "auto"
    policy: ToolPolicy
    names: dict[str, str] = Field(description="presented name -> canonical name")
    deferred: list[str] | None = Field(
        default=None,
        description="canonical names of the tools offered only once found (SPEC §23); "
        "None: every tool is offered",
    )


# A provider's ``models`` holds exact ids and fnmatch globs; these characters make a glob.
MODEL_GLOB_CHARACTERS = frozenset("*?[")


def is_model_glob(model: str) -> bool:
    return not MODEL_GLOB_CHARACTERS.isdisjoint(model)


class Price(_Model):
    """USD per million tokens of one model (SPEC §14)."""

    input: float = Field(ge=0)
    cached_input: float = Field(ge=0, description="input read from the provider's prompt cache")
    output: float = Field(ge=0)
    cache_write: float | None = Field(
        default=None, ge=0, description="input written to the prompt cache; default: input"
    )


# ``auto``: stream, and learn from the first empty or refused stream that the provider cannot.
StreamTools = Literal["auto", True, False]


# Headers that choose which account, project or tier pays for a request (contract §14): never
# taken from an agent, set per provider by the pod file (``headers:``). Anthropic binds a
# workspace to its key, so only its beta header can bill differently.
BILLING_HEADERS: dict[str, tuple[str, ...]] = {
    "openai": ("openai-organization", "openai-project"),
    "anthropic": ("anthropic-beta",),
}
# Anthropic betas billed at other prices (long context, fast mode, hour-long cache writes):
# an agent's ``anthropic-beta`` goes upstream without them.
BILLING_BETAS: tuple[str, ...] = ("context-1m-", "fast-mode-", "extended-cache-ttl-")


def without_billing_betas(value: str) -> str:
    """An agent's ``anthropic-beta`` list without the betas that bill differently."""
    kept = [b for b in (part.strip() for part in value.split(",")) if b]
    return ",".join(b for b in kept if not b.lower().startswith(BILLING_BETAS))


Protocol = Literal["chat", "responses", "messages"]
# The protocols (codec names) each API's providers serve unless told otherwise.
API_PROTOCOLS: dict[str, tuple[Protocol, ...]] = {
    "openai": ("chat", "responses"),
    "anthropic": ("messages",),
}


class Provider(_Model):
    api: Literal["openai", "anthropic"]
    base_url: str
    key_env: str | list[str] = Field(description="one key's variable, or a pool of keys")
    models: list[str] = Field(description="exact model ids and globs")
    timeout_ms: int = Field(default=600000, gt=0)
    """Bound of one model call of a mediated request (contract §8.2); builds without it load."""
    first_byte_timeout_ms: int | None = Field(
        default=None, gt=0, description="no first byte in time: the route's next target (§14)"
    )
    # None, not {}, when unset (likewise routes, usd_budgets): a build that uses none of SPEC
    # §14 stays loadable by a sidecar that predates it.
    prices: dict[str, Price] | None = Field(
        default=None, description="model glob -> price, before the built-in table"
    )

    headers: dict[str, str] | None = Field(
        default=None, description="billing headers the pod sets (``BILLING_HEADERS``)"
    )
    max_output_tokens: int | None = Field(
        default=None, gt=0, description="held against a budget for a request without a cap"
    )

    stream_tools: StreamTools = "auto"
    """Whether a streamed request that offers tools gets an answer from it (contract §7.4)."""
    protocols: list[Protocol] | None = None
    """The protocols it serves when not all of its API's (a Chat-only local server); None:
    all of them. A request in another protocol is translated (contract §18)."""

    @property
    def served(self) -> tuple[Protocol, ...]:
        return tuple(self.protocols) if self.protocols else API_PROTOCOLS[self.api]

    @property
    def key_envs(self) -> list[str]:
        """The variables of the provider's keys, in rotation order."""
        return [self.key_env] if isinstance(self.key_env, str) else list(self.key_env)

    @property
    def exact_models(self) -> list[str]:
        """The concrete ids a client may pick from a list (globs name no model)."""
        return [model for model in self.models if not is_model_glob(model)]


class RouteTarget(_Model):
    """One target of a fallback route: a provider, and the model id it knows the model by."""

    provider: str
    model: str | None = Field(default=None, description="default: the model the client named")


class Listen(_Model):
    host: str = "0.0.0.0"
    port: int = Field(default=8080, gt=0, lt=65536)


RateUnit = Literal["second", "minute", "hour"]
RATE_PERIOD_S: dict[str, int] = {"second": 1, "minute": 60, "hour": 3600}
RuleEffect = Literal["allow", "deny", "confirm"]
# Who decides a ``confirm`` rule's call: the pod's operator, or the agent's own user in the
# client's protocol where it has an approval item (SPEC §16, docs/approvals.md).
Approver = Literal["operator", "client"]
ApprovalRequirement = Literal["none", "destructive", "non-read-only"]


class Rate(_Model):
    count: int = Field(gt=0)
    per: RateUnit

    @property
    def period_s(self) -> int:
        return RATE_PERIOD_S[self.per]


class ToolRule(_Model):
    """One ``x-claw.tool-rules`` entry (SPEC §9.2); ``when`` is CEL text, checked by clawc."""

    tool: str = Field(description="canonical name or glob")
    when: str | None = None
    effect: RuleEffect = "allow"
    reason: str | None = None
    rate: Rate | None = None
    approver: Approver = "operator"
    source: str = Field(description="pod file and line of the rule, for messages")


DEFAULT_MAX_OPEN_APPROVALS = 32


class Approvals(_Model):
    require: ApprovalRequirement | list[str] = "none"
    timeout_ms: int = Field(default=300000, gt=0)
    webhook: str | None = None
    max_open_per_agent: int | None = Field(default=None, gt=0)
    """Approvals one agent may have open (pending or approved, unused); past it, refused.
    None: ``DEFAULT_MAX_OPEN_APPROVALS`` (and ``sidecar.json`` without the field)."""


class BudgetGroup(_Model):
    """One ``x-claw.budget-groups`` entry (SPEC §24): agents of this pod whose spending counts
    together, with that of the same group in every pod that shares the store."""

    agents: list[str] = Field(min_length=1)
    tokens_per_day: int | None = Field(default=None, gt=0)
    usd_per_day: float | None = Field(default=None, gt=0)
    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)


class EndUserLimits(_Model):
    """``x-claw.end-user-limits``: what each end user may spend per UTC day, across the pod's
    agents (and across pods when the pod shares its limits, SPEC §24)."""

    tokens_per_day: int | None = Field(default=None, gt=0)
    usd_per_day: float | None = Field(default=None, gt=0)
    requests: Rate | None = None
    """Each end user's requests (LLM requests and ``/mcp`` calls), across the pod's agents."""


class Governance(_Model):
    """Policy on arguments, rate limits, budgets and approvals (SPEC §9)."""

    rules: dict[str, list[ToolRule]] = Field(
        default_factory=dict, description="agent -> its rules in evaluation order (pod's first)"
    )
    approvals: Approvals = Approvals()
    budgets: dict[str, int] = Field(
        default_factory=dict, description="agent or '*' -> tokens per UTC day"
    )
    usd_budgets: dict[str, float] | None = Field(
        default=None, description="agent or '*' -> USD per UTC day (SPEC §14)"
    )
    budget_groups: dict[str, BudgetGroup] | None = Field(
        default=None, description="group name -> its agents and daily budget (SPEC §24)"
    )
    end_user_limits: EndUserLimits | None = None
    """None: end users are audited but not budgeted (SPEC §21)."""


OnUnreachable = Literal["fail-closed", "fail-local"]


class SharedLimits(_Model):
    """``x-claw.shared-limits`` (SPEC §24): rates and budgets counted in Redis/Valkey."""

    url_env: str = Field(description="the variable holding the server's redis:// URL")
    on_unreachable: OnUnreachable = "fail-closed"


DEFAULT_JWKS_REFRESH_MS = 60000


class TokenIssuer(_Model):
    """An identity provider whose JWTs the sidecar verifies (SPEC §21): who signs them, for
    whom, and where its public keys are. ``jwks_url`` is fetched by the sidecar (cached,
    refreshed on an unknown ``kid`` at most once per ``jwks_refresh_ms``); ``jwks`` is the key
    set clawc read from the pod's ``jwks-file``, carried in the build (public keys only)."""

    issuer: str = Field(min_length=1)
    audience: str = Field(min_length=1)
    jwks_url: str | None = None
    jwks: dict[str, Any] | None = None
    claim: str = Field(default="sub", min_length=1)
    """The claim that names the agent (``agent-claim``) or the end user (``user-claim``)."""
    jwks_refresh_ms: int = Field(default=DEFAULT_JWKS_REFRESH_MS, gt=0)

    @model_validator(mode="after")
    def _one_key_source(self) -> TokenIssuer:
        if (self.jwks_url is None) == (self.jwks is None):
            raise ValueError("exactly one of jwks_url and jwks")
        return self


class EndUsers(TokenIssuer):
    """``x-claw.end-users``: the header a runner passes its end user's token in."""

    header: str = Field(default="x-end-user-token", min_length=1)


class Taint(_Model):
    """What a request does once untrusted tool output entered it (SPEC §17)."""

    mode: TaintMode = "off"
    egress_allow: list[str] = Field(
        default_factory=list, description="hosts (or *.suffix) any service's arguments may name"
    )
    service_egress_allow: dict[str, list[str]] = Field(
        default_factory=dict, description="service -> hosts its tools' arguments may also name"
    )


class AdminListen(_Model):
    """The operator listener (``/metrics``, ``/readyz``, ``/operator/*``); port 0 = any port."""

    host: str = "0.0.0.0"
    port: int = Field(default=9090, ge=0, lt=65536)


SIDECAR_SERVICE = "claw-sidecar"  # the sidecar's compose service name
# Host names ``/mcp`` answers to (any port): DNS rebinding cannot make a page's origin one of
# these.
DEFAULT_ALLOWED_HOSTS = (SIDECAR_SERVICE, "localhost", "127.0.0.1", "[::1]")


class EdgeConfig(_Model):
    """The agents' listener's bounds besides ``max_connections`` (``x-claw.edge``, SPEC §10)."""

    max_connections_per_peer: int = Field(default=1024, gt=0)
    head_timeout_ms: int = Field(default=10000, gt=0)
    """A new connection's first request head, and every later head from its first byte."""
    body_idle_timeout_ms: int = Field(default=30000, gt=0)
    keepalive_timeout_ms: int = Field(default=75000, gt=0)


class SidecarConfig(_Model):
    """``sidecar.json``."""

    version: Literal[1] = MANIFEST_VERSION
    pod: str
    providers: dict[str, Provider]
    routes: dict[str, list[RouteTarget]] | None = Field(
        default=None,
        description="model glob -> ordered fallback targets; first matching glob wins (§14)",
    )
    agents: list[str]
    listen: Listen = Listen()
    state_dir: str = "/var/lib/claw"
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    upstream_timeout_ms: int = Field(default=600000, gt=0)
    governance: Governance | None = None
    retry_window_ms: int = Field(default=600000, gt=0)
    """How long a failed mediated request can be resumed by an identical retry (contract §8.2)."""
    admin_listen: AdminListen = AdminListen()
    max_connections: int = Field(default=4096, gt=0)
    edge: EdgeConfig | None = None
    """None: every bound at its default (and ``sidecar.json`` without the block)."""
    allowed_hosts: tuple[str, ...] = DEFAULT_ALLOWED_HOSTS
    taint: Taint | None = None
    """None: no tool of the pod returns untrusted output and none of it applies."""
    shared_limits: SharedLimits | None = None
    """None: rates and budgets are this sidecar's own, kept in its state directory."""
    identity: TokenIssuer | None = None
    """None: agents present only their static tokens (SPEC §21)."""
    end_users: EndUsers | None = None
    """None: no end user's token is read; requests are the agent's alone."""


class Digest(_Model):
    """``digest.json``: sha256 of every file under ``context/`` and of ``sidecar.json``."""

    version: Literal[1] = MANIFEST_VERSION
    files: dict[str, str]


class BuildError(Exception):
    """The build directory is missing, malformed or tampered with."""


class AgentBuild(_Model):
    agent: AgentManifest
    tools: ToolsManifest


class Build(_Model):
    root: Path
    config: SidecarConfig
    agents: dict[str, AgentBuild]
    digest_sha256: str = Field(default="", description="of digest.json: names this exact build")
    digest_json: bytes = Field(
        default=b"", repr=False, description="digest.json as read once: what a signature covers"
    )


def dump_json(model: BaseModel | dict[str, Any]) -> str:
    """Canonical JSON text for build files: stable key order, 2-space indent, trailing newline."""
    data = (
        model.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(model, BaseModel)
        else model
    )
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_build_file(path: Path) -> bytes:
    """The bytes of ``path``, which must be a regular file: a FIFO or device could answer each
    read differently (one digest for the check, another for the signature) or block startup.
    The type is checked on the open descriptor, so it is the file that is then read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise BuildError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise BuildError(f"{path}: not a regular file")
        return file.read()


def _covered_files(root: Path) -> dict[str, bytes]:
    """The contents of every file the digest covers, keyed by POSIX path relative to ``root``."""
    paths = [
        root / "sidecar.json",
        *sorted(p for p in (root / "context").rglob("*") if not p.is_dir()),
    ]
    return {p.relative_to(root).as_posix(): read_build_file(p) for p in paths if p.exists()}


def digest_files(root: Path) -> dict[str, str]:
    """Hash every file the digest covers, keyed by POSIX path relative to ``root``."""
    return {name: sha256_hex(data) for name, data in _covered_files(root).items()}


def verify_digest(root: Path, digest_json: bytes) -> dict[str, bytes]:
    """Check the build against ``digest_json`` (``digest.json`` as read once); return the
    verified contents, so callers parse exactly the bytes that were checked (no second read
    that could differ)."""
    digest_path = root / "digest.json"
    try:
        digest = Digest.model_validate_json(digest_json)
    except ValueError as exc:
        raise BuildError(f"{digest_path}: cannot read digest: {exc}") from exc
    contents = _covered_files(root)
    actual = {name: sha256_hex(data) for name, data in contents.items()}
    problems = [
        f"{name}: {'missing' if name not in actual else 'modified'}"
        for name, expected in digest.files.items()
        if actual.get(name) != expected
    ]
    problems += [f"{name}: not in digest" for name in actual if name not in digest.files]
    if problems:
        raise BuildError(f"{root}: build does not match digest.json ({'; '.join(problems)})")
    return contents


def _parse(root: Path, contents: dict[str, bytes], name: str, model: type[_Model]) -> Any:
    if name not in contents:
        raise BuildError(f"{root / name}: missing from the build")
    try:
        return model.model_validate_json(contents[name])
    except ValueError as exc:
        raise BuildError(f"{root / name}: {exc}") from exc


def load_build(root: Path | str) -> Build:
    """Load and verify a build directory; raise :class:`BuildError` on any problem."""
    root = Path(root)
    digest_json = read_build_file(root / "digest.json")
    contents = verify_digest(root, digest_json)
    config: SidecarConfig = _parse(root, contents, "sidecar.json", SidecarConfig)
    agents: dict[str, AgentBuild] = {}
    for agent_id in config.agents:
        directory = f"context/{agent_id}"
        agent = _parse(root, contents, f"{directory}/agent.json", AgentManifest)
        tools = _parse(root, contents, f"{directory}/tools.json", ToolsManifest)
        if agent.id != agent_id or tools.agent != agent_id:
            raise BuildError(
                f"{root / directory}: agent id does not match sidecar.json ({agent_id!r})"
            )
        if agent.policy != tools.policy:
            # Mediated mode and MCP both read tools.json; agent.json repeats it for people.
            raise BuildError(f"{root / directory}: agent.json and tools.json disagree on policy")
        agents[agent_id] = AgentBuild(agent=agent, tools=tools)
    return Build(
        root=root,
        config=config,
        agents=agents,
        digest_sha256=sha256_hex(digest_json),
        digest_json=digest_json,
    )


def write_digest(root: Path) -> None:
    """Write ``digest.json`` for the files currently in ``root`` (the compiler's last step)."""
    (root / "digest.json").write_text(dump_json(Digest(files=digest_files(root))))


def token_sha256(token: str) -> str:
    return sha256_hex(token.encode())


def definition_pin(
    name: str, description: str | None, input_schema: Any, annotations: dict[str, Any] | None
) -> str:
    """The pin of a tool definition as its service states it (§11.2): canonical JSON of the four
    parts a model is told, so any change to them changes the pin. Absent annotation values
    (``null``) count as not stated."""
    stated = {k: v for k, v in (annotations or {}).items() if v is not None}
    canonical = json.dumps(
        [name, description or "", input_schema, stated],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return sha256_hex(canonical.encode())
