"""``clawc import openapi`` on published documents nobody here wrote (tests/fixtures/openapi/
SOURCES): each becomes a descriptor that compiles, with what it cannot send named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clawpod.sidecar.manifest import load_build
from tests.openapi.documents import document, post_with_body, write
from tests.openapi.importing import FIXTURES, compile_descriptor, run_import

PUBLISHED = {
    # fixture: (service, tools, skipped operations)
    "petstore-3.0.yaml": ("petstore", 3, 0),
    "tictactoe-3.1.yaml": ("tictactoe", 3, 0),
    "swagger-petstore-3.0.4.yaml": ("petstore3", 19, 0),
    "netlify-swagger-2.0.yml": ("netlify", 172, 2),
    "callback-example-3.0.yaml": ("streams", 1, 0),
    "petstore-swagger-2.0.yaml": ("petstore2", 3, 0),
}


@pytest.mark.parametrize("fixture", sorted(PUBLISHED))
def test_a_published_document_imports_and_compiles(tmp_path: Path, fixture: str) -> None:
    service, tools, skipped = PUBLISHED[fixture]
    target = tmp_path / f"{service}.yaml"
    run = run_import(FIXTURES / fixture, "--service", service, "-o", target)
    assert run.code == 0, run.err
    assert f"wrote {target.name}" in run.out or f"wrote {target}" in run.out
    assert f"{tools} tool(s), {skipped} operation(s) skipped" in run.out
    compiled = compile_descriptor(tmp_path, target, service)
    assert compiled.code == 0, compiled.err
    granted = load_build(tmp_path / "build").agents["agent"].tools.tools
    assert len(granted) == tools
    assert {t.name.split(".")[0] for t in granted} == {service}


def test_the_petstore_tools_say_what_the_document_says(tmp_path: Path) -> None:
    run = run_import(FIXTURES / "petstore-3.0.yaml", "--service", "petstore")
    assert run.code == 0, run.err
    descriptor = yaml.safe_load(run.out)
    tools = {t["name"]: t for t in descriptor["tools"]}
    assert list(tools) == ["listPets", "createPets", "showPetById"]  # the document's order
    assert tools["listPets"]["http"] == {"method": "GET", "path": "/v1/pets"}
    assert tools["listPets"]["inputSchema"]["properties"]["limit"]["maximum"] == 100
    assert tools["listPets"]["annotations"] == {"readOnlyHint": True}
    assert tools["createPets"]["annotations"] == {"destructiveHint": True}
    assert tools["createPets"]["inputSchema"]["required"] == ["id", "name"]  # the Pet $ref
    assert tools["showPetById"]["http"]["path"] == "/v1/pets/{petId}"
    assert tools["showPetById"]["inputSchema"]["required"] == ["petId"]
    assert descriptor["auth"] == {"type": "none"}
    assert "# GET /pets/{petId} (showPetById)" in run.out
    assert "x-claw.url: http://petstore.swagger.io" in run.err


def test_put_and_delete_are_idempotent_and_destructive_and_overridable(tmp_path: Path) -> None:
    source = FIXTURES / "swagger-petstore-3.0.4.yaml"
    run = run_import(source, "--service", "store", "--effect", "addPet=additive")
    tools = {t["name"]: t for t in yaml.safe_load(run.out)["tools"]}
    assert tools["updatePet"]["annotations"] == {"destructiveHint": True, "idempotentHint": True}
    assert tools["deletePet"]["annotations"] == {"destructiveHint": True, "idempotentHint": True}
    assert tools["placeOrder"]["annotations"] == {"destructiveHint": True}
    assert tools["addPet"]["annotations"] == {"destructiveHint": False}


def test_auth_names_the_variable_and_unsupported_schemes_are_named(tmp_path: Path) -> None:
    run = run_import(FIXTURES / "swagger-petstore-3.0.4.yaml", "--service", "pet-store")
    descriptor = yaml.safe_load(run.out)
    assert descriptor["auth"] == {"type": "header", "header": "api_key", "env": "PET_STORE_API_KEY"}
    assert "security scheme 'petstore_auth' not used: OAuth 2.0 is not supported" in run.err
    tools = {t["name"]: t for t in descriptor["tools"]}
    # An array body is one argument the sidecar sends whole; so is a body whose property has a
    # parameter's name.
    assert tools["createUsersWithListInput"]["http"]["body_arg"] == "body"
    assert tools["createUsersWithListInput"]["inputSchema"]["properties"]["body"]["type"] == "array"
    assert "the request body is the argument 'body' (it is 'array', not an object)" in run.out
    assert tools["updateUser"]["http"]["body_arg"] == "body"
    assert "(its property 'username' has the same name as a path parameter)" in run.out
    # The file upload's body is optional: left out and named; the operation stays.
    assert "uploadFile" in tools
    assert "optional request body left out: its body (application/octet-stream (a file" in run.out


def test_auth_env_names_the_variable_and_is_checked() -> None:
    source = FIXTURES / "swagger-petstore-3.0.4.yaml"
    run = run_import(source, "--service", "store", "--auth-env", "STORE_KEY")
    assert yaml.safe_load(run.out)["auth"]["env"] == "STORE_KEY"
    bad = run_import(source, "--service", "store", "--auth-env", "STORE-KEY")
    assert bad.code == 1 and "--auth-env 'STORE-KEY' is not a valid variable name" in bad.err


def test_a_3_1_document_with_parameter_refs_a_header_and_a_string_body(tmp_path: Path) -> None:
    run = run_import(FIXTURES / "tictactoe-3.1.yaml", "--service", "tictactoe")
    assert run.code == 0, run.err
    descriptor = yaml.safe_load(run.out)
    assert descriptor["auth"] == {"type": "header", "header": "api-key", "env": "TICTACTOE_API_KEY"}
    tools = {t["name"]: t for t in descriptor["tools"]}
    square = tools["get-square"]
    assert square["inputSchema"]["required"] == ["row", "column"]
    assert square["inputSchema"]["properties"]["row"]["minimum"] == 1
    put = tools["put-square"]
    assert put["http"] == {
        "method": "PUT",
        "path": "/board/{row}/{column}",
        "headers": {"progressUrl": "progressUrl"},
        "body_arg": "body",
    }
    assert put["inputSchema"]["properties"]["body"]["enum"] == [".", "X", "O"]
    assert put["inputSchema"]["required"] == ["row", "column", "body"]
    assert put["inputSchema"]["additionalProperties"] is False
    assert "#   callbacks (requests the service makes back) are not imported" in run.out


def test_a_file_upload_body_in_swagger_2_0_skips_the_operation() -> None:
    run = run_import(FIXTURES / "netlify-swagger-2.0.yml", "--service", "netlify")
    assert run.code == 0
    assert (
        "PUT /deploys/{deploy_id}/files/{path} (uploadDeployFile): required request body: its "
        "body (application/octet-stream (a file upload)) is not sent" in run.out
    )
    tools = {t["name"]: t for t in yaml.safe_load(run.out)["tools"]}
    assert tools["createSite"]["http"] == {
        "method": "POST",
        "path": "/api/v1/sites",
        "query": ["configure_dns"],
    }


def test_swagger_2_0_is_read_with_a_warning() -> None:
    run = run_import(FIXTURES / "petstore-swagger-2.0.yaml", "--service", "petstore")
    assert run.code == 0
    assert "clawc: warning: " in run.err and "Swagger 2.0 is read as far as" in run.err
    tools = {t["name"]: t for t in yaml.safe_load(run.out)["tools"]}
    assert tools["listPets"]["http"]["path"] == "/v1/pets"
    assert tools["listPets"]["inputSchema"]["properties"]["limit"]["type"] == "integer"


def test_a_query_parameter_beside_a_body_goes_to_the_query_and_a_callback_is_named() -> None:
    run = run_import(FIXTURES / "callback-example-3.0.yaml", "--service", "streams")
    assert run.code == 0, run.err
    [tool] = yaml.safe_load(run.out)["tools"]
    assert tool["http"] == {"method": "POST", "path": "/streams", "query": ["callbackUrl"]}
    assert tool["inputSchema"]["required"] == ["callbackUrl"]
    assert "#   callbacks (requests the service makes back) are not imported" in run.out


def test_headers_cookies_and_a_query_api_key(tmp_path: Path) -> None:
    parameters = [
        {"name": "X-Request-Id", "in": "header", "schema": {"type": "string"}},
        {"name": "session", "in": "cookie", "schema": {"type": "string"}},
        {"name": "key", "in": "query", "schema": {"type": "string"}},
        {"name": "dry", "in": "query", "schema": {"type": "boolean"}},
    ]
    operation = {"operationId": "touch", "parameters": parameters, "responses": {"204": {}}}
    operation["responses"]["204"]["description"] = "done"
    data = document({"/things": {"put": operation}})
    data["components"]["securitySchemes"] = {"k": {"type": "apiKey", "in": "query", "name": "key"}}
    data["security"] = [{"k": []}]
    source = write(tmp_path / "doc.json", data)
    run = run_import(source, "--service", "things", "-o", tmp_path / "things.yaml")
    assert run.code == 0, run.err
    text = (tmp_path / "things.yaml").read_text()
    descriptor = yaml.safe_load(text)
    assert descriptor["auth"] == {"type": "query", "param": "key", "env": "THINGS_API_KEY"}
    [tool] = descriptor["tools"]
    assert tool["http"]["query"] == ["dry"] and tool["http"]["headers"] == {
        "X-Request-Id": "X-Request-Id"
    }
    assert sorted(tool["inputSchema"]["properties"]) == ["X-Request-Id", "dry"]
    assert "optional cookie parameter 'session' left out: cookies are not sent" in text
    assert "optional query parameter 'key' left out: the service credential is sent there" in text
    assert compile_descriptor(tmp_path, tmp_path / "things.yaml", "things").code == 0


def test_include_and_exclude_choose_operations() -> None:
    source = FIXTURES / "swagger-petstore-3.0.4.yaml"
    run = run_import(source, "--service", "s", "--include", "GET /pet*", "--exclude", "getPetById")
    names = [t["name"] for t in yaml.safe_load(run.out)["tools"]]
    assert names == ["findPetsByStatus", "findPetsByTags"]


def test_reimport_shows_a_diff_and_keeps_an_edited_file(tmp_path: Path) -> None:
    source, target = FIXTURES / "petstore-3.0.yaml", tmp_path / "petstore.yaml"
    assert run_import(source, "--service", "petstore", "-o", target).code == 0
    again = run_import(source, "--service", "petstore", "-o", target)
    assert (again.code, again.out.splitlines()[-1]) == (
        0,
        f"unchanged {target}: 3 tool(s), 0 operation(s) skipped",
    )
    edited = target.read_text().replace("description: Create a pet", "description: Add a pet")
    target.write_text(edited)
    kept = run_import(source, "--service", "petstore", "-o", target)
    assert kept.code == 1
    assert "-    description: Add a pet\n+    description: Create a pet\n" in kept.out
    assert "kept as it is: rerun with --overwrite to replace it" in kept.err
    assert target.read_text() == edited
    replaced = run_import(source, "--service", "petstore", "-o", target, "--overwrite")
    assert replaced.code == 0 and "Create a pet" in target.read_text()


def test_reimport_rewrites_a_file_whose_comments_alone_differ(tmp_path: Path) -> None:
    source, target = FIXTURES / "petstore-3.0.yaml", tmp_path / "petstore.yaml"
    assert run_import(source, "--service", "petstore", "-o", target).code == 0
    imported = target.read_text()
    target.write_text("# my notes\n" + imported)
    run = run_import(source, "--service", "petstore", "-o", target)
    assert run.code == 0 and "rewrote (comments only)" in run.out
    assert target.read_text() == imported


def test_json_output_has_no_comments_and_the_notes_go_to_stderr(tmp_path: Path) -> None:
    target = tmp_path / "store.json"
    run = run_import(FIXTURES / "swagger-petstore-3.0.4.yaml", "--service", "s", "-o", target)
    assert run.code == 0
    assert json.loads(target.read_text())["version"] == 2
    assert "clawc: note: security scheme 'petstore_auth' not used" in run.err


def test_an_operations_x_claw_names_it_and_sets_its_effect(tmp_path: Path) -> None:
    data = document(
        {
            "/a": post_with_body("#/components/schemas/A", "get pet"),
            "/b": post_with_body("#/components/schemas/A", "get_pet"),
        },
        {"A": {"type": "object", "properties": {"q": {"type": "string"}}}},
    )
    data["paths"]["/b"]["post"]["x-claw"] = {
        "name": "fetch_pet",
        "effect": "read-only",
        "untrusted-output": True,
    }
    run = run_import(write(tmp_path / "doc.json", data), "--service", "x")
    assert run.code == 0, run.err
    tools = {t["name"]: t for t in yaml.safe_load(run.out)["tools"]}
    assert sorted(tools) == ["fetch_pet", "get_pet"]  # no collision once one is renamed
    assert tools["fetch_pet"]["annotations"] == {"readOnlyHint": True}
    assert tools["fetch_pet"]["x-claw"] == {"untrusted-output": True}
    assert tools["get_pet"]["annotations"] == {"destructiveHint": True}


def test_yaml_timestamps_and_integer_keys_are_read_as_json_holds_them(tmp_path: Path) -> None:
    """An unquoted ``example: 2024-01-01`` is a date and ``200:`` an integer to YAML; both are
    common in hand-written documents and were an internal error."""
    source = tmp_path / "dates.yaml"
    source.write_text(
        """\
openapi: 3.0.3
info: {title: dates, version: "1"}
paths:
  /events:
    post:
      operationId: addEvent
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                when: {type: string, format: date, example: 2024-01-01}
      responses:
        200: {description: ok}
"""
    )
    run = run_import(source, "--service", "events", "-o", tmp_path / "events.yaml")
    assert run.code == 0, run.err
    [tool] = yaml.safe_load((tmp_path / "events.yaml").read_text())["tools"]
    assert tool["inputSchema"]["properties"]["when"]["examples"] == ["2024-01-01"]
    assert compile_descriptor(tmp_path, tmp_path / "events.yaml", "events").code == 0


def test_a_path_item_that_is_a_ref_is_followed(tmp_path: Path) -> None:
    data = document({"/x": {"$ref": "#/components/pathItems/X"}})
    data["openapi"] = "3.1.0"
    operation = {"operationId": "getX", "responses": {"200": {"description": "ok"}}}
    data["components"]["pathItems"] = {"X": {"get": operation}}
    run = run_import(write(tmp_path / "doc.json", data), "--service", "x")
    assert run.code == 0, run.err
    [tool] = yaml.safe_load(run.out)["tools"]
    assert (tool["name"], tool["http"]) == ("getX", {"method": "GET", "path": "/x"})
