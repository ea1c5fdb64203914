"""Each operation of a document as one descriptor tool, or the reason it is skipped.

Arguments are placed where descriptor v2 can send them: path parameters fill the path
template; query parameters go to the query string (``http.query`` beside a JSON body); header
parameters to ``http.headers``; a POST's, PUT's or PATCH's JSON object body is flattened into
the arguments (the sidecar sends what remains as that body). What a descriptor cannot send
(cookies, a form or file body, a header the sidecar sets) is dropped and named when it is
optional, and skips the operation when it is required: a tool that cannot make the request
the service expects is not guessed at. A JSON body that is not one plain object (an array, a
string, alternatives, a property named like a parameter) is one argument, ``body``, that the
sidecar sends as the whole body (``http.body_arg``).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompileError
from ..services.descriptors import RESERVED_HEADERS, load_descriptor
from ..services.schemas import SchemaProblem, normalise_schema
from .document import METHODS, Document, split_server
from .resolve import Budget, Unsupported, follow, inline

DESCRIPTOR_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
QUERY_METHODS = ("GET", "DELETE")
MAX_NAME = 64
MAX_DESCRIPTION = 2000
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_JSON_TYPE = re.compile(r"^application/(?:[\w.+-]+\+)?json(?:;.*)?$", re.IGNORECASE)
# Headers a parameter may not set: HTTP itself and the descriptor's auth own them.
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
# The annotations of each effect an operation may be given (docs/compiler.md: effects).
EFFECTS: dict[str, dict[str, bool]] = {
    "read-only": {"readOnlyHint": True},
    "idempotent": {"destructiveHint": False, "idempotentHint": True},
    "additive": {"destructiveHint": False},
    "destructive": {"destructiveHint": True},
}
# By method: GET reads; PUT and DELETE replace or remove, the same each time; POST and PATCH
# change state in ways a repeat may not undo.
BY_METHOD: dict[str, dict[str, bool]] = {
    "GET": {"readOnlyHint": True},
    "PUT": {"destructiveHint": True, "idempotentHint": True},
    "DELETE": {"destructiveHint": True, "idempotentHint": True},
    "POST": {"destructiveHint": True},
    "PATCH": {"destructiveHint": True},
}
# Where a parameter may be that a descriptor cannot send to, and why.
_UNSENT = {
    "cookie": "cookies are not sent",
    "formData": "form and file bodies are not sent (only JSON bodies are)",
}
_SWAGGER_PARAMETER_FIELDS = frozenset(
    {"name", "in", "required", "description", "allowEmptyValue", "collectionFormat"}
)
_MERGEABLE_BODY = frozenset(
    {"type", "properties", "required", "description", "title", "additionalProperties"}
)


@dataclass(frozen=True)
class ImportOptions:
    service: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    effects: tuple[tuple[str, str], ...] = ()  # (pattern, effect), the last match wins
    auth_env: str | None = None


@dataclass
class Operation:
    method: str  # upper case
    path: str
    item: dict[str, Any]
    spec: dict[str, Any]
    name: str

    @property
    def label(self) -> str:
        operation_id = self.spec.get("operationId")
        return f"{self.method} {self.path}" + (f" ({operation_id})" if operation_id else "")

    def matches(self, pattern: str) -> bool:
        keys = (self.name, str(self.spec.get("operationId", "")), f"{self.method} {self.path}")
        return any(fnmatch.fnmatchcase(key, pattern) for key in keys)


@dataclass
class ImportedTool:
    operation: Operation
    entry: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass
class Skipped:
    operation: Operation
    reason: str


@dataclass
class Imported:
    document: Document
    service_url: str
    base_path: str
    auth: dict[str, Any]
    auth_notes: list[str]
    tools: list[ImportedTool]
    skipped: list[Skipped]


def safe_name(raw: str) -> str:
    """A tool name clawc and every provider accept: ``[A-Za-z0-9_-]``, at most 64 long."""
    name = _UNSAFE.sub("_", raw).strip("_")
    return re.sub("_{2,}", "_", name)[:MAX_NAME].rstrip("_") or "operation"


def _claw(spec: dict[str, Any]) -> dict[str, Any]:
    claw = spec.get("x-claw")
    return claw if isinstance(claw, dict) else {}


def operations(document: Document) -> Iterator[Operation]:
    """Every operation in document order (paths as written, methods in the spec's order)."""
    for path, raw in (document.data.get("paths") or {}).items():
        try:
            item = follow(document.data, raw)  # a path item may be a $ref (3.1, Swagger)
        except Unsupported:
            item = None  # the validator has named a broken ref already
        if not isinstance(item, dict):
            continue
        for method in METHODS:
            spec = item.get(method)
            if isinstance(spec, dict):
                raw = _claw(spec).get("name") or spec.get("operationId") or f"{method}_{path}"
                yield Operation(method.upper(), path, item, spec, safe_name(str(raw)))


def select(document: Document, options: ImportOptions) -> list[Operation]:
    """The operations --include/--exclude keep; names that collide are an error."""
    chosen = [
        op
        for op in operations(document)
        if (not options.include or any(op.matches(p) for p in options.include))
        and not any(op.matches(p) for p in options.exclude)
    ]
    first: dict[str, Operation] = {}
    for op in chosen:
        if op.name in first:
            raise CompileError(
                f"operations {first[op.name].label} and {op.label} both become tool "
                f"'{op.name}'; give one an x-claw: {{name: ...}} in the document, or leave one "
                "out with --exclude",
                file=document.file,
                pointer=f"/paths/{_escape(op.path)}/{op.method.lower()}",
            )
        first[op.name] = op
    return chosen


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def import_operations(document: Document, options: ImportOptions) -> Imported:
    origin, base_path = split_server(document.server_url())
    auth, auth_notes, scheme = _auth(document, options)
    tools: list[ImportedTool] = []
    skipped: list[Skipped] = []
    for op in select(document, options):
        try:
            tool = _tool(document, op, base_path, auth, scheme, options)
            check_tool(tool.entry)
            tools.append(tool)
        except Unsupported as exc:
            skipped.append(Skipped(op, str(exc)))
    return Imported(document, origin, base_path, auth, auth_notes, tools, skipped)


def _tool(
    document: Document,
    op: Operation,
    base_path: str,
    auth: dict[str, Any],
    scheme: str | None,
    options: ImportOptions,
) -> ImportedTool:
    if op.method not in DESCRIPTOR_METHODS:
        raise Unsupported(
            f"{op.method} is not a descriptor method ({', '.join(DESCRIPTOR_METHODS)})"
        )
    notes: list[str] = []
    if op.spec.get("callbacks"):
        notes.append("callbacks (requests the service makes back) are not imported")
    arguments = _Arguments(document, auth)
    for parameter in _parameters(document, op):
        arguments.add_parameter(parameter, op, notes)
    _add_body(document, op, arguments, notes)
    entry: dict[str, Any] = {
        "name": op.name,
        "description": _description(op),
        "inputSchema": arguments.schema(),
        "annotations": _annotations(op, options),
        "http": arguments.http(op.method, base_path + op.path),
    }
    if _claw(op.spec).get("untrusted-output") is True:
        entry["x-claw"] = {"untrusted-output": True}
    notes += _security_notes(document, op, scheme)
    return ImportedTool(op, entry, notes)


class TextSource:
    """A descriptor held in memory: what clawc compile would read from the written file."""

    is_json = True

    def __init__(self, text: str, label: str) -> None:
        self.text = text
        self.label = label

    def read_descriptor(self) -> str:
        return self.text

    def read_relative(self, relative: str) -> str:
        raise CompileError(f"an imported descriptor names no file ({relative!r})")


def check_tool(entry: dict[str, Any]) -> None:
    """Every check ``clawc compile`` makes of the tool (schema, names, path template), so no
    written tool fails to compile; a failure skips the operation with the compiler's reason."""
    text = json.dumps({"version": 2, "tools": [entry]})
    try:
        load_descriptor(TextSource(text, "imported tool"))
    except CompileError as exc:
        where = (exc.pointer or "").removeprefix("/tools/0")
        shown = f"{where}: " if where else ""
        raise Unsupported(f"clawc compile refuses it: {shown}{exc.reason}") from None


class _Arguments:
    """The tool's input schema as parameters and the body add to it."""

    def __init__(self, document: Document, auth: dict[str, Any]) -> None:
        self.document = document
        # Where the descriptor's auth puts the credential: no argument may go there too.
        self.credential: tuple[str, str] | None = None
        if auth.get("type") in ("header", "query"):
            self.credential = (auth["type"], str(auth.get("header") or auth.get("param")).lower())
        self.budget = Budget()
        self.properties: dict[str, Any] = {}
        self.required: list[str] = []
        self.origin: dict[str, str] = {}
        self.additional: Any = None
        self.body_arg: str | None = None
        self.query: list[str] = []  # beside a JSON body (a GET's or DELETE's go there anyway)
        self.headers: dict[str, str] = {}

    def inline(self, schema: Any) -> Any:
        return inline(self.document.data, schema, self.budget, legacy=self.document.legacy_schemas)

    def add(self, name: str, schema: Any, required: bool, origin: str) -> None:
        if name == "claw_id":
            raise Unsupported("'claw_id' is reserved for the calling agent's id")
        if name in self.properties:
            raise Unsupported(
                f"{origin} '{name}' has the same name as {self.origin[name]} '{name}'"
            )
        self.properties[name] = schema
        self.origin[name] = origin
        if required:
            self.required.append(name)

    def add_parameter(self, parameter: dict[str, Any], op: Operation, notes: list[str]) -> None:
        name, where = str(parameter.get("name")), parameter.get("in")
        required = parameter.get("required") is True or where == "path"
        if where == "body" or (where == "header" and name.lower() in _IGNORED_HEADERS):
            return  # a Swagger body is the request body; these headers are HTTP's own
        unsent = _UNSENT.get(str(where))
        if where == "header" and name.lower() in RESERVED_HEADERS:
            unsent = "the sidecar sets this header itself"
        if self.credential == (where, name.lower()):
            unsent = "the service credential is sent there"
        if unsent is not None:
            if required:
                raise Unsupported(f"required {where} parameter '{name}': {unsent}")
            notes.append(f"optional {where} parameter '{name}' left out: {unsent}")
            return
        if where not in ("path", "query", "header"):
            raise Unsupported(f"parameter '{name}' in {where!r} is not supported")
        schema = self.inline(_parameter_schema(parameter, self.document))
        if parameter.get("description") and isinstance(schema, dict):
            schema = {"description": str(parameter["description"]), **schema}
        self.add(name, schema, required, f"{where} parameter")
        if where == "header":
            self.headers[name] = name
        elif where == "query" and op.method not in QUERY_METHODS:
            self.query.append(name)

    def http(self, method: str, path: str) -> dict[str, Any]:
        """The execution entry: query and header placement only where it is needed."""
        http: dict[str, Any] = {"method": method, "path": path}
        if self.query:
            http["query"] = self.query
        if self.headers:
            http["headers"] = self.headers
        if self.body_arg:
            http["body_arg"] = self.body_arg
        return http

    def add_body(self, schema: Any, required: bool, notes: list[str]) -> None:
        """A plain object body becomes arguments, one per property; any other body (an array,
        a string, alternatives, a property named like a parameter) is one argument whose
        value the sidecar sends as the whole body."""
        schema = self.inline(schema)
        flat, why = self._flattened(schema)
        if flat is not None:
            body_required = set(flat.get("required") or []) if required else set()
            for name, value in (flat.get("properties") or {}).items():
                self.add(name, value, name in body_required, "body property")
            if "additionalProperties" in flat:
                self.additional = flat["additionalProperties"]
            return
        name = next((n for n in ("body", "request_body") if n not in self.properties), None)
        if name is None:
            raise Unsupported("parameters named 'body' and 'request_body' leave no name for it")
        if isinstance(schema, dict):
            schema = _without_read_only(schema)
        self.add(name, schema, required, "request body")
        self.body_arg = name
        self.additional = False  # the sidecar refuses arguments the request has no place for
        notes.append(f"the request body is the argument '{name}' ({why})")

    def _flattened(self, schema: Any) -> tuple[dict[str, Any] | None, str]:
        """The body as an object whose properties can be arguments, or why it is not one."""
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            kind = schema.get("type") if isinstance(schema, dict) else type(schema).__name__
            return None, f"it is {kind!r}, not an object"
        try:
            flat = _without_read_only(normalise_schema(schema))
        except SchemaProblem as exc:
            return None, f"its schema is not one plain object: {exc.reason}"
        if not set(flat) <= _MERGEABLE_BODY:
            return None, f"its schema uses {', '.join(sorted(set(flat) - _MERGEABLE_BODY))}"
        for name in flat.get("properties") or {}:
            if name in self.properties:
                where = self.origin[name]
                return None, f"its property '{name}' has the same name as a {where}"
        return flat, ""

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = self.required
        if self.additional is not None:
            schema["additionalProperties"] = self.additional
        return schema


def _without_read_only(schema: dict[str, Any]) -> dict[str, Any]:
    """A request never sends properties the document marks readOnly (a pet's server id)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    kept = {k: v for k, v in properties.items() if not (isinstance(v, dict) and v.get("readOnly"))}
    if len(kept) == len(properties):
        return schema
    result = {**schema, "properties": kept}
    if "required" in schema:
        result["required"] = [n for n in schema["required"] if n in kept]
    return result


def _parameters(document: Document, op: Operation) -> list[dict[str, Any]]:
    """Path-level parameters overridden by the operation's own (same name and location)."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*(op.item.get("parameters") or []), *(op.spec.get("parameters") or [])]:
        parameter = follow(document.data, raw)
        if isinstance(parameter, dict):
            merged[(str(parameter.get("name")), str(parameter.get("in")))] = parameter
    return list(merged.values())


def _parameter_schema(parameter: dict[str, Any], document: Document) -> Any:
    if "schema" in parameter:
        return parameter["schema"]
    if "content" in parameter:  # 3.x: a parameter serialised as a media type
        raise Unsupported(f"parameter '{parameter.get('name')}' is serialised with 'content'")
    if document.swagger:
        return {k: v for k, v in parameter.items() if k not in _SWAGGER_PARAMETER_FIELDS}
    return {}


def _add_body(document: Document, op: Operation, arguments: _Arguments, notes: list[str]) -> None:
    body, required = _body(document, op)
    if body is None:
        return
    kind, schema = body
    if op.method in QUERY_METHODS or kind != "json":
        why = (
            f"a {op.method} sends no body"
            if op.method in QUERY_METHODS
            else f"its body ({kind}) is not sent (only JSON bodies are)"
        )
        if required:
            raise Unsupported(f"required request body: {why}")
        notes.append(f"optional request body left out: {why}")
        return
    arguments.add_body(schema, required, notes)


def _body(document: Document, op: Operation) -> tuple[tuple[str, Any] | None, bool]:
    """(kind, schema) of the request body and whether it is required; kind is ``json`` or the
    media types it offers instead."""
    if document.swagger:
        consumes = op.spec.get("consumes") or document.data.get("consumes") or ["application/json"]
        json_body = any(_JSON_TYPE.match(str(t)) for t in consumes)
        for raw in [*(op.item.get("parameters") or []), *(op.spec.get("parameters") or [])]:
            parameter = follow(document.data, raw)
            if isinstance(parameter, dict) and parameter.get("in") == "body":
                kind = "json" if json_body else _kinds(consumes)
                return (kind, parameter.get("schema") or {}), parameter.get("required") is True
        return None, False
    request = follow(document.data, op.spec.get("requestBody"))
    if not isinstance(request, dict):
        return None, False
    content = request.get("content") or {}
    required = request.get("required") is True
    for media_type, media in content.items():
        if _JSON_TYPE.match(media_type):
            return ("json", (media or {}).get("schema") or {}), required
    return (_kinds(content), None), required


def _kinds(media_types: Any) -> str:
    """The media types a body is offered in, when none is JSON."""
    kinds = ", ".join(sorted(map(str, media_types))) or "empty"
    if any(t.startswith("multipart/") or t == "application/octet-stream" for t in media_types):
        kinds += " (a file upload)"
    return kinds


def _description(op: Operation) -> str:
    parts = [
        "\n".join(line.rstrip() for line in str(op.spec[k]).strip().split("\n"))
        for k in ("summary", "description")
        if op.spec.get(k)
    ]
    text = "\n\n".join(dict.fromkeys(p for p in parts if p)) or f"{op.method} {op.path}"
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 3] + "..."


def _annotations(op: Operation, options: ImportOptions) -> dict[str, bool]:
    chosen: dict[str, bool] = BY_METHOD[op.method]
    stated = _claw(op.spec).get("effect")
    if stated is not None:
        if stated not in EFFECTS:
            raise Unsupported(f"x-claw effect {stated!r} is not one of {', '.join(EFFECTS)}")
        chosen = EFFECTS[stated]
    for pattern, effect in options.effects:
        if op.matches(pattern):
            chosen = EFFECTS[effect]
    return dict(chosen)


# ---- auth -------------------------------------------------------------------------------------


def _env_name(service: str, suffix: str) -> str:
    stem = re.sub(r"[^A-Z0-9]+", "_", service.upper()).strip("_") or "SERVICE"
    if stem[0].isdigit():
        stem = "SVC_" + stem
    return f"{stem}_{suffix}"


def _scheme_auth(scheme: dict[str, Any], options: ImportOptions) -> dict[str, Any]:
    """The descriptor auth of one security scheme, or :class:`Unsupported` saying why not."""
    kind = scheme.get("type")
    where = scheme.get("in")
    if kind == "http" and str(scheme.get("scheme", "")).lower() == "bearer":
        return {"type": "bearer", "env": options.auth_env or _env_name(options.service, "TOKEN")}
    if (kind == "http" and str(scheme.get("scheme", "")).lower() == "basic") or kind == "basic":
        env = options.auth_env or _env_name(options.service, "CREDENTIALS")
        return {"type": "basic", "env": env}
    if kind == "apiKey" and where in ("header", "query"):
        env = options.auth_env or _env_name(options.service, "API_KEY")
        if where == "query":
            return {"type": "query", "param": str(scheme.get("name")), "env": env}
        return {"type": "header", "header": str(scheme.get("name")), "env": env}
    if kind == "apiKey":
        raise Unsupported(f"an API key in a {where} is not supported (header or query only)")
    if kind == "oauth2":
        raise Unsupported("OAuth 2.0 is not supported yet (client credentials come with SPEC §21)")
    raise Unsupported(f"{kind!r} security is not supported")


def _referenced_schemes(document: Document) -> list[str]:
    names: list[str] = []
    requirements = list(document.data.get("security") or [])
    for op in operations(document):
        requirements += op.spec.get("security") or []
    for requirement in requirements:
        for name in requirement if isinstance(requirement, dict) else ():
            if name not in names:
                names.append(name)
    return names


def _auth(
    document: Document, options: ImportOptions
) -> tuple[dict[str, Any], list[str], str | None]:
    """The descriptor's one auth: the first supported scheme the operations ask for (else the
    first defined), with the variable that holds the secret named, never a value."""
    schemes = document.security_schemes()
    referenced = _referenced_schemes(document)
    order = [n for n in referenced if n in schemes] + [n for n in schemes if n not in referenced]
    notes: list[str] = []
    for name in order:
        scheme = follow(document.data, schemes[name])
        try:
            auth = _scheme_auth(scheme if isinstance(scheme, dict) else {}, options)
        except Unsupported as exc:
            notes.append(f"security scheme '{name}' not used: {exc}")
            continue
        return auth, notes, name
    return {"type": "none"}, notes, None


def _security_notes(document: Document, op: Operation, scheme: str | None) -> list[str]:
    requirements = op.spec.get("security")
    if requirements is None:
        requirements = document.data.get("security")
    if not requirements or scheme is None:
        return []
    if any(not r or (isinstance(r, dict) and set(r) == {scheme}) for r in requirements):
        return []
    asked = " or ".join(sorted({" + ".join(r) for r in requirements if isinstance(r, dict)}))
    return [f"the document asks for {asked} here; the descriptor authenticates with '{scheme}'"]
