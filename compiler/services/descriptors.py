"""Service descriptors (version 2, docs/contract.md §1): models, validation and compiled tools."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, SchemaError
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from ...sidecar.manifest import DEFAULT_MCP_TTL_MS, HttpMethod, ToolAuth, definition_pin
from ...sidecar.path_template import (
    PathTemplateError,
    check_path_template,
    placeholder_names,
)
from ..errors import CompileError, pointer
from ..pod_file.documents import Lines, parse_document, validation_error
from ..pod_file.reserved import ENV_NAME
from .schemas import SchemaProblem, normalise_schema, schema_key
from .sources import DescriptorSource

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Headers the sidecar or HTTP itself sets on a tool call; an argument never replaces them.
RESERVED_HEADERS = frozenset(
    {
        "accept",
        "authorization",
        "connection",
        "content-length",
        "content-type",
        "host",
        "idempotency-key",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
TOOL_NAME = r"^[A-Za-z0-9_.-]{1,128}$"
CLAW_ID = "claw_id"
BODY_METHODS = ("POST", "PUT", "PATCH")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _case_insensitive(words: tuple[str, ...]) -> str:
    return "^(" + "|".join("".join(f"[{c.upper()}{c.lower()}]" for c in w) for w in words) + ")$"


class Annotations(_Spec):
    """MCP tool annotations; ``readOnly`` is accepted for ``readOnlyHint``."""

    model_config = ConfigDict(
        json_schema_extra=lambda schema: schema["properties"].update(
            readOnly={"type": "boolean", "description": "alias of readOnlyHint"}
        )
    )

    title: str | None = None
    readOnlyHint: StrictBool | None = Field(
        default=None, validation_alias=AliasChoices("readOnlyHint", "readOnly")
    )
    destructiveHint: StrictBool | None = None
    idempotentHint: StrictBool | None = None
    openWorldHint: StrictBool | None = None


class HttpSpec(_Spec):
    method: Annotated[
        HttpMethod,
        WithJsonSchema({"type": "string", "pattern": _case_insensitive(METHODS)}),
    ] = Field(description="GET, POST, PUT, PATCH or DELETE (any case)")
    path: str = Field(
        pattern=r"^/", description="origin-form path starting with '/'; {name} placeholders"
    )
    body: Literal["json", "none"] | None = Field(
        default=None, description="json (default for POST/PUT/PATCH) or none"
    )
    body_key: str | None = Field(default=None, min_length=1)
    body_arg: str | None = Field(
        default=None,
        min_length=1,
        description="the argument whose value is the whole JSON body (an array, a string, or an "
        "object sent as it is); every other argument is placed in the path, query or headers",
    )
    query: list[str] | None = Field(
        default=None,
        description="arguments sent in the query string beside a JSON body (GET and DELETE "
        "send every argument not in the path there anyway)",
    )
    headers: dict[str, str] | None = Field(
        default=None, description="argument -> the request header it is sent in"
    )

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class McpSpec(_Spec):
    """The service speaks MCP (Streamable HTTP) at ``path``; tools without ``http`` run there."""

    path: str = Field(default="/mcp", pattern=r"^/", description="the service's MCP endpoint")
    ttl_ms: int = Field(
        default=DEFAULT_MCP_TTL_MS,
        gt=0,
        alias="ttl-ms",
        description="how often the sidecar re-checks the tool definitions against their pins",
    )


class ToolClaw(_Spec):
    """A tool's ``x-claw`` block: what the operator knows about it that MCP hints do not say."""

    untrusted_output: StrictBool = Field(
        default=False,
        alias="untrusted-output",
        description="its results carry open-world content (SPEC §17), as openWorldHint: true",
    )
    long_running: StrictBool = Field(
        default=False,
        alias="long-running",
        description="its calls may outlive the tool timeout: a mediated round with one waits "
        "up to the request's tool budget, and an MCP service may run it as a task (SPEC §22)",
    )


class ToolSpec(_Spec):
    name: str = Field(pattern=TOOL_NAME)
    description: str = Field(min_length=1)
    inputSchema: dict[str, Any] = Field(description="JSON Schema 2020-12 with type 'object'")
    annotations: Annotations = Annotations()
    http: HttpSpec | None = Field(
        default=None, description="HTTP execution; without it the tool runs over the service's mcp"
    )
    x_claw: ToolClaw = Field(default=ToolClaw(), alias="x-claw")

    @property
    def untrusted_output(self) -> bool:
        return self.annotations.openWorldHint is True or self.x_claw.untrusted_output


class Endpoint(_Spec):
    method: str
    path: str
    description: str = ""


class Descriptor(_Spec):
    """A service descriptor (``version: 2``; version 1 descriptors have no ``tools``)."""

    version: Literal[1, 2] = 1
    description: str = ""
    auth: ToolAuth = ToolAuth(type="none")
    mcp: McpSpec | None = None
    skill: str | None = Field(
        default=None, description="path of a skill file, relative to this file"
    )
    tools: list[ToolSpec] | None = None
    endpoints: list[Endpoint] = []


@dataclass(frozen=True)
class CompiledTool:
    """One descriptor tool, validated and normalised once, ready to put into any manifest."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    pin: str
    """sha256 of the definition as the descriptor states it (before normalisation)."""
    transport: Literal["http", "mcp"]
    path: str
    method: str | None = None
    body: Literal["json", "none"] | None = None
    body_key: str | None = None
    body_arg: str | None = None
    query: list[str] | None = None
    headers: dict[str, str] | None = None
    ttl_ms: int | None = None
    untrusted_output: bool = False
    long_running: bool = False


@dataclass
class LoadedDescriptor:
    source: str
    descriptor: Descriptor
    tools: list[CompiledTool]
    skill_text: str | None
    tools_by_name: dict[str, CompiledTool] = field(init=False)

    def __post_init__(self) -> None:
        self.tools_by_name = {tool.name: tool for tool in self.tools}


_checked_schemas: dict[str, tuple[dict[str, Any] | None, SchemaError | SchemaProblem | None]] = {}


def _check_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Metaschema check and normalisation, once per distinct schema text."""
    key = schema_key(schema)
    if key not in _checked_schemas:
        try:
            Draft202012Validator.check_schema(schema)
            normalised = normalise_schema(schema)
            Draft202012Validator.check_schema(normalised)
            _checked_schemas[key] = (normalised, None)
        except (SchemaError, SchemaProblem) as exc:
            _checked_schemas[key] = (None, exc)
    normalised, problem = _checked_schemas[key]
    if problem is not None:
        raise problem
    assert normalised is not None
    return normalised


def _compile_tool(
    spec: ToolSpec, index: int, file: str, lines: Lines, mcp: McpSpec | None
) -> CompiledTool:
    base = ("tools", index)

    def fail(reason: str, *where: str | int) -> CompileError:
        return CompileError(
            reason, file=file, pointer=pointer(*base, *where), line=lines.line((*base, *where))
        )

    if spec.inputSchema.get("type") != "object":
        raise fail("inputSchema must have type 'object'", "inputSchema")
    try:
        schema = _check_schema(spec.inputSchema)
    except SchemaError as exc:
        inner = list(exc.absolute_path)
        raise fail(
            f"not a valid JSON Schema (2020-12): {exc.message}", "inputSchema", *inner
        ) from None
    except SchemaProblem as exc:
        where = f"{pointer(*base, 'inputSchema')}{exc.where}"
        raise CompileError(
            f"cannot normalise schema: {exc.reason}",
            file=file,
            pointer=where,
            line=lines.line((*base, "inputSchema")),
        ) from None
    properties = schema.get("properties") or {}
    if CLAW_ID in properties:
        raise fail(
            f"'{CLAW_ID}' is reserved (filled with the agent id) and cannot be an argument",
            "inputSchema",
            "properties",
            CLAW_ID,
        )
    if CLAW_ID in (schema.get("required") or []):
        raise fail(
            f"'{CLAW_ID}' is reserved (filled with the agent id) and cannot be required",
            "inputSchema",
            "required",
        )
    annotations = spec.annotations.model_dump(exclude_none=True)
    pin = definition_pin(spec.name, spec.description, spec.inputSchema, annotations)
    compiled = partial(
        CompiledTool,
        name=spec.name,
        description=spec.description,
        input_schema=schema,
        annotations=annotations,
        pin=pin,
        untrusted_output=spec.untrusted_output,
        long_running=spec.x_claw.long_running,
    )
    http = spec.http
    if http is None:
        if mcp is None:
            raise fail("a tool needs 'http', or the descriptor needs 'mcp' to run it over MCP")
        return compiled(transport="mcp", path=mcp.path, ttl_ms=mcp.ttl_ms)
    try:
        check_path_template(http.path)
    except PathTemplateError as exc:
        raise fail(f"invalid path template {http.path!r}: {exc}", "http", "path") from None
    for name in placeholder_names(http.path):
        if name == CLAW_ID:
            continue
        if name not in properties:
            raise fail(
                f"path placeholder {{{name}}} is not a property of inputSchema", "http", "path"
            )
        if name not in schema.get("required", []):
            raise fail(f"path placeholder {{{name}}} must be a required property", "http", "path")
    body = http.body or ("json" if http.method in BODY_METHODS else "none")
    if body == "json" and http.method not in BODY_METHODS:
        raise fail(
            f"{http.method} sends its arguments as a query string; body must be 'none'",
            "http",
            "body",
        )
    if http.body_key and body != "json":
        raise fail("body_key is only valid with a JSON body", "http", "body_key")
    if http.body_arg is not None:
        if body != "json" or http.body_key:
            raise fail("body_arg needs a JSON body and no body_key", "http", "body_arg")
        if http.body_arg not in properties:
            raise fail(
                f"body_arg '{http.body_arg}' is not a property of inputSchema", "http", "body_arg"
            )
    _check_placement(http, properties, fail)
    return compiled(
        transport="http",
        method=http.method,
        path=http.path,
        body=body,
        body_key=http.body_key,
        body_arg=http.body_arg,
        query=http.query or None,
        headers=http.headers or None,
    )


def _check_placement(
    http: HttpSpec, properties: dict[str, Any], fail: Callable[..., CompileError]
) -> None:
    """``query`` and ``headers`` name arguments: each a property, none placed twice, and no
    header the sidecar sets itself (an argument must not replace the credential or the
    Idempotency-Key)."""
    placed: dict[str, str] = {name: "path" for name in placeholder_names(http.path)}
    if http.body_arg is not None:
        if http.body_arg in placed:
            raise fail(
                f"body_arg '{http.body_arg}' is already sent in the path", "http", "body_arg"
            )
        placed[http.body_arg] = "body"

    def misplaced(name: str) -> str | None:
        if name not in properties:
            return "is not a property of inputSchema"
        return f"is already sent in the {placed[name]}" if name in placed else None

    for index, name in enumerate(http.query or []):
        if why := misplaced(name):
            raise fail(f"query argument '{name}' {why}", "http", "query", index)
        placed[name] = "query"
    for name, header in (http.headers or {}).items():
        if why := misplaced(name):
            raise fail(f"header argument '{name}' {why}", "http", "headers", name)
        if not HEADER_NAME.match(header) or header.lower() in RESERVED_HEADERS:
            raise fail(
                f"'{header}' cannot carry an argument (not a header name, or one the sidecar "
                f"sets: {', '.join(sorted(RESERVED_HEADERS))})",
                "http",
                "headers",
                name,
            )
        placed[name] = "header"


def _check_auth(auth: ToolAuth, mcp: McpSpec | None, file: str, lines: Lines) -> None:
    if auth.env is not None and not ENV_NAME.match(auth.env):
        raise CompileError(
            f"'{auth.env}' is not a valid environment variable name",
            file=file,
            pointer="/auth/env",
            line=lines.line(("auth", "env")),
        )
    if auth.header is not None and not HEADER_NAME.match(auth.header):
        raise CompileError(
            f"'{auth.header}' is not a valid HTTP header name",
            file=file,
            pointer="/auth/header",
            line=lines.line(("auth", "header")),
        )
    if auth.type == "query" and mcp is not None:
        raise CompileError(
            "an MCP service's credential is sent in a header (bearer or header), not the query",
            file=file,
            pointer="/auth/type",
            line=lines.line(("auth", "type")),
        )
    if auth.oauth:
        problem = oauth_problem(auth, mcp is not None)
        if problem is not None:
            field_name, message = problem
            raise CompileError(
                message,
                file=file,
                pointer=f"/auth/{field_name}",
                line=lines.line(("auth", field_name)),
            )


SCOPE_TOKEN = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+$")  # RFC 6749 §3.3 scope-token


def oauth_problem(auth: ToolAuth, mcp: bool) -> tuple[str, str] | None:
    """The first OAuth field of ``auth`` that is wrong (its name as written, and why), for a
    descriptor's or a principal's auth (SPEC §21); the model already named missing fields."""
    for field_name in ("client-id-env", "client-secret-env"):
        value = getattr(auth, field_name.replace("-", "_"))
        if not ENV_NAME.match(value or ""):
            return field_name, f"'{value}' is not a valid environment variable name"
    for field_name in ("token-url", "resource"):
        value = getattr(auth, field_name.replace("-", "_"))
        if value is not None and not _absolute_http_url(value):
            return field_name, f"{field_name} '{value}' must be an absolute http(s) URL"
    for scope in auth.scopes or ():
        if not SCOPE_TOKEN.match(scope):
            return "scopes", f"scope {scope!r} is not one scope token (no spaces or quotes)"
    if auth.token_url is None and not mcp:
        return "token-url", (
            "an HTTP service's token endpoint is named (token-url); discovery from RFC 9728 "
            "metadata is for MCP services"
        )
    for host in auth.discovery_hosts or ():
        if not re.match(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$", host):
            return "discovery-hosts", f"'{host}' is not a host or host:port"
    return None


def _absolute_http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not parts.fragment


def _check_mcp_path(path: str, file: str, lines: Lines) -> None:
    """The MCP endpoint is a fixed origin-form path: the template grammar, and no placeholders
    (nothing fills them; a ``?``, ``#``, ``..`` or control character would redirect the call)."""
    try:
        check_path_template(path)
        if placeholder_names(path):
            raise PathTemplateError("placeholders are not allowed in the MCP endpoint's path")
    except PathTemplateError as exc:
        raise CompileError(
            f"invalid mcp.path {path!r}: {exc}",
            file=file,
            pointer="/mcp/path",
            line=lines.line(("mcp", "path")),
        ) from None


def load_descriptor(source: DescriptorSource) -> LoadedDescriptor:
    """Read, validate and compile one descriptor; raise a located :class:`CompileError`."""
    text = source.read_descriptor()
    file = source.label  # known only once read: an image source resolves its label path first
    data, lines = parse_document(text, file, json_first=source.is_json)
    if not isinstance(data, dict):
        raise CompileError("a descriptor must be a mapping", file=file, pointer="")
    if data.get("version", 1) == 1 and "tools" not in data:
        # Version 1 descriptors carried fields this version no longer reads; they stay valid.
        data = {k: v for k, v in data.items() if k in Descriptor.model_fields}
    elif data.get("version") != 2 and "tools" in data:
        raise CompileError(
            "descriptors with 'tools' must declare version: 2",
            file=file,
            pointer="/version",
            line=lines.line(("version",)),
        )
    try:
        descriptor = Descriptor.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, file, lines) from None
    _check_auth(descriptor.auth, descriptor.mcp, file, lines)
    if descriptor.mcp is not None:
        _check_mcp_path(descriptor.mcp.path, file, lines)
    seen: dict[str, int] = {}
    tools: list[CompiledTool] = []
    for index, spec in enumerate(descriptor.tools or []):
        if spec.name in seen:
            raise CompileError(
                f"duplicate tool name '{spec.name}' (first at /tools/{seen[spec.name]})",
                file=file,
                pointer=pointer("tools", index, "name"),
                line=lines.line(("tools", index, "name")),
            )
        seen[spec.name] = index
        tools.append(_compile_tool(spec, index, file, lines, descriptor.mcp))
    skill_text = None
    if descriptor.skill:
        try:
            skill_text = source.read_relative(descriptor.skill)
        except CompileError as exc:
            raise CompileError(
                f"skill file: {exc.reason}",
                file=file,
                pointer="/skill",
                line=lines.line(("skill",)),
            ) from None
    return LoadedDescriptor(source=file, descriptor=descriptor, tools=tools, skill_text=skill_text)
