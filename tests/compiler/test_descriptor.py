"""Descriptor v2 validation (docs/contract.md §1): every rule, JSON and YAML, located errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from clawpod.compiler.errors import CompileError
from clawpod.compiler.pod import compile_pod
from clawpod.compiler.services.descriptors import load_descriptor
from clawpod.compiler.services.sources import FileSource
from tests.compiler.conftest import REPO, PodDir, descriptor, tool

BASE = descriptor(
    tool(
        "get_item",
        path="/items/{item_id}",
        inputSchema={
            "type": "object",
            "properties": {"item_id": {"type": "string"}},
            "required": ["item_id"],
        },
    ),
    tool("create_item", "POST", "/items"),
    auth={"type": "bearer", "env": "SVC_TOKEN"},
)


def load(tmp_path: Path, data: dict[str, Any] | str, name: str = "svc.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return load_descriptor(FileSource(path))


def error(tmp_path: Path, data: dict[str, Any] | str, name: str = "svc.json") -> CompileError:
    with pytest.raises(CompileError) as caught:
        load(tmp_path, data, name)
    assert name in str(caught.value)
    return caught.value


def changed(path: str, value: Any) -> dict[str, Any]:
    """BASE with the value at a slash-separated path replaced (None deletes it)."""
    data = copy.deepcopy(BASE)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split("/")]
    target = data
    for part in parents:
        target = target[part]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return data


def test_example_descriptors_are_valid() -> None:
    trading = load_descriptor(FileSource(REPO / "descriptors" / "trading-api.json"))
    news = load_descriptor(FileSource(REPO / "descriptors" / "market-news.yaml"))
    assert [t.name for t in trading.tools][:2] == ["get_market_context", "get_quote"]
    assert trading.skill_text and "Trading policy" in trading.skill_text
    assert news.descriptor.auth.type == "header"
    assert news.descriptor.auth.header == "X-News-Key"


def test_read_only_alias_method_case_and_body_defaults(tmp_path: Path) -> None:
    data = changed("tools/0/annotations", {"readOnly": True, "title": "Get"})
    data["tools"][0]["http"]["method"] = "get"
    loaded = load(tmp_path, data)
    first, second = loaded.tools
    assert first.annotations == {"title": "Get", "readOnlyHint": True}
    assert first.method == "GET" and first.body == "none"
    assert second.method == "POST" and second.body == "json"


def test_yaml_descriptor_equals_json_descriptor(tmp_path: Path) -> None:
    import yaml

    from_json = load(tmp_path, BASE)
    from_yaml = load(tmp_path, yaml.safe_dump(BASE), "svc.yaml")
    assert from_json.tools == from_yaml.tools


def test_version_1_descriptor_without_tools_stays_valid(tmp_path: Path) -> None:
    loaded = load(tmp_path, {"version": 1, "description": "old", "feeds": [{"name": "x"}]})
    assert loaded.tools == []


def test_endpoints_are_documentation_only(tmp_path: Path) -> None:
    data = dict(BASE, endpoints=[{"method": "GET", "path": "/healthz", "description": "probe"}])
    assert [t.name for t in load(tmp_path, data).tools] == ["get_item", "create_item"]


@pytest.mark.parametrize(
    ("path", "value", "pointer", "reason"),
    [
        ("tools/0/inputSchema/type", "array", "/tools/0/inputSchema", "type 'object'"),
        (
            "tools/0/inputSchema/properties/item_id/type",
            "strng",
            "/tools/0/inputSchema/properties/item_id/type",
            "not a valid JSON Schema (2020-12)",
        ),
        (
            "tools/0/inputSchema/required",
            "item_id",
            "/tools/0/inputSchema/required",
            "not a valid JSON Schema (2020-12)",
        ),
        (
            "tools/0/http/path",
            "/items/{nope}",
            "/tools/0/http/path",
            "{nope} is not a property of inputSchema",
        ),
        (
            "tools/0/inputSchema/required",
            None,
            "/tools/0/http/path",
            "{item_id} must be a required property",
        ),
        ("tools/0/http/path", "/items/{item_id", "/tools/0/http/path", "unbalanced braces"),
        ("tools/0/http/path", "items", "/tools/0/http/path", "String should match pattern '^/'"),
        ("tools/0/http/method", "FETCH", "/tools/0/http/method", "Input should be 'GET', 'POST'"),
        (
            "tools/0/http/body",
            "json",
            "/tools/0/http/body",
            "GET sends its arguments as a query string",
        ),
        ("tools/1/http/body", "xml", "/tools/1/http/body", "Input should be 'json' or 'none'"),
        (
            "tools/0/http/body_key",
            "wrap",
            "/tools/0/http/body_key",
            "body_key is only valid with a JSON body",
        ),
        (
            "tools/0/annotations",
            {"readonly": True},
            "/tools/0/annotations/readonly",
            "unknown field 'readonly'",
        ),
        (
            "tools/0/annotations",
            {"destructiveHint": "yes"},
            "/tools/0/annotations/destructiveHint",
            "valid boolean",
        ),
        (
            "tools/1/name",
            "get_item",
            "/tools/1/name",
            "duplicate tool name 'get_item' (first at /tools/0)",
        ),
        ("tools/1/name", "bad name!", "/tools/1/name", "String should match pattern"),
        ("tools/1/description", None, "/tools/1", "missing required field 'description'"),
        (
            "tools/1/http",
            None,
            "/tools/1",
            "a tool needs 'http', or the descriptor needs 'mcp' to run it over MCP",
        ),
        ("tools/0/extra", 1, "/tools/0/extra", "unknown field 'extra'"),
        (
            "tools/0/http/query",
            ["nope"],
            "/tools/0/http/query/0",
            "query argument 'nope' is not a property of inputSchema",
        ),
        (
            "tools/0/http/query",
            ["item_id"],
            "/tools/0/http/query/0",
            "query argument 'item_id' is already sent in the path",
        ),
        (
            "tools/0/http/headers",
            {"item_id": "X-Item"},
            "/tools/0/http/headers/item_id",
            "header argument 'item_id' is already sent in the path",
        ),
        ("auth", {"type": "query", "env": "K"}, "/auth", "auth type 'query' needs 'param'"),
        (
            "tools/0/http/body_arg",
            "item_id",
            "/tools/0/http/body_arg",
            "body_arg needs a JSON body and no body_key",
        ),
        (
            "tools/1/http/body_arg",
            "nope",
            "/tools/1/http/body_arg",
            "body_arg 'nope' is not a property of inputSchema",
        ),
        ("auth", {"type": "header", "env": "X"}, "/auth", "auth type 'header' needs 'header'"),
        ("auth", {"type": "bearer"}, "/auth", "auth type 'bearer' needs 'env'"),
        (
            "auth",
            {"type": "oauth", "env": "X"},
            "/auth/type",
            "Input should be 'bearer', 'header', 'query', 'basic', 'none', "
            "'oauth2-client-credentials' or 'token-exchange'",
        ),
        (
            "auth",
            {"type": "bearer", "env": "1BAD"},
            "/auth/env",
            "not a valid environment variable name",
        ),
        (
            "auth",
            {"type": "header", "env": "K", "header": "Bad Header"},
            "/auth/header",
            "not a valid HTTP header",
        ),
        (
            "skill",
            "skills/missing.md",
            "/skill",
            "skill file: cannot read 'skills/missing.md': not found",
        ),
        ("version", 3, "/version", "descriptors with 'tools' must declare version: 2"),
    ],
)
def test_descriptor_errors_name_file_pointer_and_reason(
    tmp_path: Path, path: str, value: Any, pointer: str, reason: str
) -> None:
    caught = error(tmp_path, changed(path, value))
    assert caught.pointer == pointer
    assert reason in caught.reason
    # JSON is read on the fast path; an error still finds the line of what it points at
    assert caught.line is not None
    assert f"svc.json:{caught.line}: {pointer}: " in str(caught)


@pytest.mark.parametrize("header", ["Authorization", "Idempotency-Key", "host", "Bad Header"])
def test_an_argument_cannot_be_sent_in_a_header_the_sidecar_sets(
    tmp_path: Path, header: str
) -> None:
    data = changed("tools/1/inputSchema", {"type": "object", "properties": {"qty": {}}})
    data["tools"][1]["http"]["headers"] = {"qty": header}
    caught = error(tmp_path, data)
    assert caught.pointer == "/tools/1/http/headers/qty"
    assert f"'{header}' cannot carry an argument" in caught.reason


def test_query_and_header_arguments_reach_the_build(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"dry_run": {}, "request_id": {}, "name": {}}}
    data = changed("tools/1/inputSchema", schema)
    data["tools"][1]["http"].update(query=["dry_run"], headers={"request_id": "X-Request-Id"})
    create = load(tmp_path, data).tools[1]
    assert (create.query, create.headers) == (["dry_run"], {"request_id": "X-Request-Id"})


def test_an_mcp_service_takes_no_query_credential(tmp_path: Path) -> None:
    data = changed("auth", {"type": "query", "param": "key", "env": "K"})
    data["mcp"] = {"path": "/mcp"}
    caught = error(tmp_path, data)
    assert caught.pointer == "/auth/type"
    assert "an MCP service's credential is sent in a header" in caught.reason


def test_claw_id_is_reserved_and_never_an_argument(tmp_path: Path) -> None:
    data = changed("tools/0/inputSchema/properties/claw_id", {"type": "string"})
    caught = error(tmp_path, data)
    assert caught.pointer == "/tools/0/inputSchema/properties/claw_id"
    assert "reserved" in caught.reason


def test_claw_id_placeholder_needs_no_property(tmp_path: Path) -> None:
    loaded = load(tmp_path, changed("tools/1/http/path", "/agents/{claw_id}/items"))
    assert loaded.tools[1].path == "/agents/{claw_id}/items"


def test_yaml_errors_carry_lines(tmp_path: Path) -> None:
    text = (
        "version: 2\ntools:\n  - name: a\n    description: A\n    inputSchema: {type: object}\n"
        "    http: {method: GET, path: /a}\n  - name: b\n    description: B\n"
        "    inputSchema: {type: object}\n    http: {method: TRACE, path: /b}\n"
    )
    caught = error(tmp_path, text, "svc.yaml")
    assert caught.pointer == "/tools/1/http/method"
    assert caught.line == 10
    assert "svc.yaml:10: /tools/1/http/method: " in str(caught)


def test_syntax_errors_are_located(tmp_path: Path) -> None:
    assert error(tmp_path, '{"version": 2,\n "tools": [}').line == 2
    assert error(tmp_path, "version: 2\ntools: [\n", "svc.yaml").line is not None
    assert "must be a mapping" in str(error(tmp_path, "[1, 2]"))


def test_top_level_anyof_that_cannot_be_rewritten_is_a_compile_error(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
        "properties": {"a": {}, "b": {}},
    }
    caught = error(tmp_path, changed("tools/1/inputSchema", schema))
    assert caught.pointer == "/tools/1/inputSchema/anyOf"
    assert "cannot normalise schema" in caught.reason


def test_refs_are_inlined_in_the_compiled_tool(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "$defs": {"id": {"type": "string", "minLength": 1}},
        "properties": {"item_id": {"$ref": "#/$defs/id"}},
        "required": ["item_id"],
    }
    loaded = load(tmp_path, changed("tools/0/inputSchema", schema))
    assert loaded.tools[0].input_schema == {
        "type": "object",
        "properties": {"item_id": {"type": "string", "minLength": 1}},
        "required": ["item_id"],
    }


def test_descriptor_errors_surface_through_the_pod(pod_dir: PodDir) -> None:
    path = pod_dir.descriptor("svc.json", changed("tools/0/http/method", "FETCH"))
    with pytest.raises(CompileError) as caught:
        compile_pod(
            pod_dir.pod("services:\n  svc:\n    image: x\n    x-claw: {describe: svc.json}\n")
        )
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if '"FETCH"' in text)
    assert f"svc.json:{line}: /tools/0/http/method: " in str(caught.value)


def test_missing_descriptor_file_names_pod_service_and_line(pod_dir: PodDir) -> None:
    error = pod_dir.error(
        "services:\n  svc:\n    image: x\n    x-claw:\n      describe: gone.json\n"
    )
    assert str(error).startswith(f"{pod_dir.root / 'pod.yml'}:5: service 'svc': ")
    assert "descriptor file not found: gone.json" in str(error)


def test_image_label_without_engine_is_a_clear_error(
    pod_dir: PodDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{pod_dir.root}/no-engine.sock")
    text = """\
    services:
      labelled:
        image: example/labelled:1
      bot:
        image: example/agent
        x-claw: {agent: {}, tools: [labelled]}
    """
    error = pod_dir.error(text)
    assert error.service == "labelled"
    assert "no Docker engine is reachable to read the 'claw.describe' label" in str(error)
    assert "example/labelled:1" in str(error)
    assert "set x-claw.describe" in str(error)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/mcp?token=1", "'?' is not allowed"),
        ("/mcp#frag", "'#' is not allowed"),
        ("/a/../admin", "'..' segments are not allowed"),
        ("/mcp\r\nX-Injected: 1", "control character"),
        ("/mcp @evil", "spaces are not allowed"),
        ("/{tenant}/mcp", "placeholders are not allowed"),
    ],
)
def test_a_hostile_mcp_path_is_refused_where_it_stands(
    tmp_path: Path, path: str, reason: str
) -> None:
    text = (
        f"version: 2\nmcp: {{path: {json.dumps(path)}}}\ntools:\n"
        "  - name: a\n    description: A\n    inputSchema: {type: object}\n"
    )
    caught = error(tmp_path, text, "svc.yaml")
    assert caught.pointer == "/mcp/path"
    assert caught.line == 2
    assert f"invalid mcp.path {path!r}: {reason}" in caught.reason


def test_a_plain_mcp_path_compiles(tmp_path: Path) -> None:
    text = (
        "version: 2\nmcp: {path: /v1/mcp-endpoint}\ntools:\n"
        "  - name: a\n    description: A\n    inputSchema: {type: object}\n"
    )
    assert load(tmp_path, text, "svc.yaml").tools[0].path == "/v1/mcp-endpoint"


OAUTH = {
    "type": "oauth2-client-credentials",
    "token-url": "http://idp:8080/token",
    "client-id-env": "SVC_CLIENT_ID",
    "client-secret-env": "SVC_CLIENT_SECRET",
    "scopes": ["orders.write"],
    "audience": "https://trading-api",
}


def test_an_oauth_auth_reaches_the_build(tmp_path: Path) -> None:
    auth = load(tmp_path, changed("auth", OAUTH)).descriptor.auth
    assert auth.oauth and auth.token_url == "http://idp:8080/token"
    assert auth.credential_envs == ("SVC_CLIENT_ID", "SVC_CLIENT_SECRET")
    assert auth.scopes == ("orders.write",) and auth.audience == "https://trading-api"


@pytest.mark.parametrize(
    ("auth", "pointer", "reason"),
    [
        (
            {"type": "token-exchange", "scopes": ["a"]},
            "/auth",
            "auth type 'token-exchange' needs client-id-env, client-secret-env, token-url",
        ),
        ({**OAUTH, "client-id-env": "1BAD"}, "/auth/client-id-env", "not a valid environment"),
        ({**OAUTH, "token-url": "idp/token"}, "/auth/token-url", "absolute http(s) URL"),
        ({**OAUTH, "resource": "ftp://x"}, "/auth/resource", "absolute http(s) URL"),
        ({**OAUTH, "scopes": ["a b"]}, "/auth/scopes", "is not one scope token"),
        ({**OAUTH, "env": "TOKEN"}, "/auth", "takes no 'env', 'header' or 'param'"),
        (
            {k: v for k, v in OAUTH.items() if k != "token-url"} | {"discovery-hosts": ["idp"]},
            "/auth/token-url",
            "discovery from RFC 9728 metadata is for MCP services",
        ),
    ],
)
def test_oauth_fields_are_checked_and_named(
    tmp_path: Path, auth: dict[str, Any], pointer: str, reason: str
) -> None:
    caught = error(tmp_path, changed("auth", auth))
    assert caught.pointer == pointer
    assert reason in caught.reason


def test_an_mcp_service_may_discover_its_token_endpoint(tmp_path: Path) -> None:
    data = changed("auth", {**OAUTH, "discovery-hosts": ["idp:8080"]})
    del data["auth"]["token-url"]
    data["mcp"] = {"path": "/mcp"}
    assert load(tmp_path, data).descriptor.auth.discovery_hosts == ("idp:8080",)
