"""An OpenAPI (3.0, 3.1) or Swagger (2.0) document, read within bounds and validated.

The document is checked by ``openapi-spec-validator`` (docs/openapi-import.md says why that
library), after the bounds that make a hostile file cheap to refuse: its size before it is
read, and its number of operations before it is validated.
"""

from __future__ import annotations

import datetime
import json
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import CompileError, display_path, pointer
from ..pod_file.confined_files import ConfinementError, Tree, resolve_confined
from ..pod_file.documents import parse_document

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
MAX_OPERATIONS = 5_000
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_VARIABLE = re.compile(r"\{([^{}]*)\}")


@dataclass
class Document:
    """A validated document and what the importer reads from it."""

    file: Path
    data: dict[str, Any]
    version: str  # "2.0", "3.0.x" or "3.1.x" as the document states it
    warnings: list[str] = field(default_factory=list)

    @property
    def swagger(self) -> bool:
        return self.version.startswith("2")

    @property
    def legacy_schemas(self) -> bool:
        """Schemas in OpenAPI 3.0's or Swagger's dialect, not JSON Schema 2020-12."""
        return not self.version.startswith("3.1")

    @property
    def title(self) -> str:
        info = self.data.get("info") or {}
        return f"{info.get('title', '')} {info.get('version', '')}".strip()

    def security_schemes(self) -> dict[str, Any]:
        if self.swagger:
            return self.data.get("securityDefinitions") or {}
        return (self.data.get("components") or {}).get("securitySchemes") or {}

    def server_url(self) -> str:
        """The first server's URL, its variables at their defaults ('' when none is given)."""
        if self.swagger:
            host = self.data.get("host")
            base = self.data.get("basePath") or ""
            if not host:
                return base
            scheme = (self.data.get("schemes") or ["https"])[0]
            return f"{scheme}://{host}{base}"
        servers = self.data.get("servers") or []
        if not servers or not isinstance(servers[0], dict):
            return ""
        server = servers[0]
        variables = server.get("variables") or {}

        def default(match: re.Match[str]) -> str:
            return str((variables.get(match.group(1)) or {}).get("default", ""))

        return _VARIABLE.sub(default, str(server.get("url", "")))


def split_server(url: str) -> tuple[str, str]:
    """``https://api.example.com/v1`` -> (``https://api.example.com``, ``/v1``); a relative
    server URL has no origin."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
    return origin, parts.path.rstrip("/")


BUILD_CONTEXT = Tree(
    name="the build context",
    relative_to="the build context",
    advice="a document named with --context is read only from inside it",
)


def locate_in_context(context: Path, named: str) -> Path:
    """The real path of ``named`` inside the build context directory ``context``, confined as a
    pod's descriptor is to the pod's tree (no absolute path, no ``..`` out, no symlink out)."""
    if not context.is_dir():
        raise CompileError("--context is not a directory", file=context)
    try:
        return resolve_confined(context, context, named, BUILD_CONTEXT)
    except ConfinementError as exc:
        raise CompileError(
            f"cannot read {named!r} from the build context: {exc}", file=context
        ) from None


def read_document(path: Path) -> Document:
    """Read, bound, parse and validate ``path``; raise a located :class:`CompileError`."""
    data = parse_document(_read_bounded(path), path, json_first=_looks_like_json(path))[0]
    data = _as_json(data, path)
    if not isinstance(data, dict):
        raise CompileError("an OpenAPI document must be a mapping", file=path)
    version, warnings = _version(data, path)
    _check_operation_count(data, path)
    _check_refs_are_local(data, path)
    _validate(data, path)
    return Document(file=path, data=data, version=version, warnings=warnings)


def _as_json(data: Any, path: Path) -> Any:
    """The document as JSON holds it: YAML's timestamps (an unquoted ``example: 2024-01-01``)
    as ISO text and its integer keys (``200:``) as strings, so every schema the import writes
    is JSON, as a descriptor must be."""

    def plain(value: Any) -> Any:
        if isinstance(value, datetime.date):  # datetime.datetime is a date too
            return value.isoformat()
        raise TypeError(f"a {type(value).__name__} value, which JSON cannot hold")

    try:
        return json.loads(json.dumps(data, default=plain, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise CompileError(f"the document holds {exc}", file=path) from None
    except RecursionError:
        raise CompileError("the document is nested too deeply", file=path) from None


def _read_bounded(path: Path) -> str:
    try:
        info = path.stat()
    except OSError as exc:
        raise CompileError(f"cannot read the document: {exc.strerror}", file=path) from None
    if not stat.S_ISREG(info.st_mode):
        raise CompileError("the document is not a regular file", file=path)
    if info.st_size > MAX_DOCUMENT_BYTES:
        raise CompileError(
            f"the document is {info.st_size:,} bytes; at most {MAX_DOCUMENT_BYTES:,} are read "
            "(split it, or import a smaller document)",
            file=path,
        )
    with path.open("rb") as handle:  # the file may have grown since stat()
        raw = handle.read(MAX_DOCUMENT_BYTES + 1)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise CompileError(f"the document is over {MAX_DOCUMENT_BYTES:,} bytes", file=path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CompileError(f"the document is not UTF-8: {exc.reason}", file=path) from None


def _looks_like_json(path: Path) -> bool:
    return path.suffix.lower() == ".json"


def _version(data: dict[str, Any], path: Path) -> tuple[str, list[str]]:
    openapi, swagger = data.get("openapi"), data.get("swagger")
    if isinstance(openapi, str) and re.match(r"^3\.[01]\.\d+", openapi):
        return openapi, []
    if str(swagger) == "2.0":
        return "2.0", [
            f"{display_path(path)}: Swagger 2.0 is read as far as it maps onto OpenAPI 3.0 "
            "(JSON bodies, path, query and header parameters, basic and API key security); "
            "check the result, or convert the document to OpenAPI 3 first"
        ]
    stated = f"openapi {openapi!r}" if openapi is not None else f"swagger {swagger!r}"
    raise CompileError(
        f"unsupported document version ({stated}); OpenAPI 3.0, 3.1 and Swagger 2.0 are read",
        file=path,
        pointer="/openapi" if openapi is not None else "",
    )


def _check_operation_count(data: dict[str, Any], path: Path) -> None:
    paths = data.get("paths")
    if not isinstance(paths, dict):
        return  # the validator names a missing or malformed paths object
    count = sum(
        1
        for item in paths.values()
        if isinstance(item, dict)
        for method in METHODS
        if method in item
    )
    if count > MAX_OPERATIONS:
        raise CompileError(
            f"the document has {count:,} operations; at most {MAX_OPERATIONS:,} are imported "
            "(split the document by tag or path first)",
            file=path,
            pointer="/paths",
        )


def _check_refs_are_local(data: dict[str, Any], path: Path) -> None:
    """Only ``#/...`` refs are followed: a ref to another file or a URL would make the
    importer (and the validator) read files or fetch from the network on a document's say."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                raise CompileError(
                    f"$ref {ref!r} points outside the document; bundle the document into "
                    "one file first (only '#/...' references are followed)",
                    file=path,
                    pointer=pointer(*where, "$ref"),
                )
            stack.extend((value, (*where, key)) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, (*where, index)) for index, value in enumerate(node))


def _validate(data: dict[str, Any], path: Path) -> None:
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

    try:
        validate(data)
    except OpenAPIValidationError as exc:
        where = pointer(*getattr(exc, "absolute_path", ()))
        raise CompileError(
            f"not a valid OpenAPI document: {_short(exc.message)}", file=path, pointer=where
        ) from None
    except RecursionError:
        raise CompileError(
            "the document's $refs or nesting go too deep to validate", file=path
        ) from None


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
