"""An imported descriptor, compiled into a pod, called by a mediated and a native agent through
a real sidecar against a local server that serves the Swagger Petstore document's shape."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from clawpod.cli.clawc import main as clawc
from tests.mcp.conftest import mcp_client
from tests.mediation.scripted import oa_calls, oa_text
from tests.openapi.importing import FIXTURES, run_import
from tests.support.sidecar import TEST_PROVIDER_KEYS, start_sidecar
from tests.support.upstream import Reply, StubUpstream

API_KEY = "petstore-key-for-tests"
RECEIVED = web.AppKey("received", list)


def petstore_app() -> web.Application:
    """GET /api/v3/pet/{petId} and POST /api/v3/pet, as the document describes them, behind
    its api_key header."""
    app = web.Application()
    app[RECEIVED] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.read()
        app[RECEIVED].append(
            {
                "method": request.method,
                "path": request.path_qs,
                "api_key": request.headers.get("api_key"),
                "body": body,
            }
        )
        if request.headers.get("api_key") != API_KEY:
            return web.json_response({"code": 401, "message": "no key"}, status=401)
        return await handler(request)

    async def get_pet(request: web.Request) -> web.Response:
        pet_id = int(request.match_info["petId"])
        return web.json_response(
            {"id": pet_id, "name": "doggie", "photoUrls": [], "status": "available"}
        )

    async def add_pet(request: web.Request) -> web.Response:
        pet = await request.json()
        return web.json_response({"id": 10, **pet})

    async def update_pet(request: web.Request) -> web.Response:
        pet_id = int(request.match_info["petId"])
        return web.json_response({"id": pet_id, "name": request.query["name"], "photoUrls": []})

    async def create_users(request: web.Request) -> web.Response:
        users = await request.json()  # the document's body is an array of users
        return web.json_response([user["username"] for user in users])

    app.middlewares.append(record)
    app.router.add_post("/api/v3/user/createWithList", create_users)
    app.router.add_post("/api/v3/pet/{petId}", update_pet)
    app.router.add_get("/api/v3/pet/{petId}", get_pet)
    app.router.add_post("/api/v3/pet", add_pet)
    return app


@pytest.fixture
async def petstore() -> AsyncIterator[tuple[str, web.Application]]:
    app = petstore_app()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", app
    await runner.cleanup()


def build_pod(tmp: Path, petstore_url: str, openai_url: str) -> dict[str, str]:
    """Import the document, compile a pod granting two of its tools to a mediated and a native
    agent; return each agent's token."""
    descriptor = tmp / "petstore.yaml"
    imported = run_import(
        FIXTURES / "swagger-petstore-3.0.4.yaml", "--service", "petstore", "-o", descriptor
    )
    assert imported.code == 0, imported.err
    tools = "getPetById, addPet, updatePetWithForm, createUsersWithListInput"
    grant = f"[{{service: petstore, allow: [{tools}]}}]"
    (tmp / "pod.yml").write_text(
        f"""\
x-claw:
  pod: petstore-desk
  providers:
    openai: {{api: openai, base-url: {openai_url}, key-env: OPENAI_API_KEY, models: ["gpt-*"]}}
services:
  petstore:
    image: example/petstore
    x-claw: {{describe: petstore.yaml, url: {petstore_url}}}
  clerk:
    image: example/agent
    x-claw: {{agent: {{}}, mode: mediated, tools: {grant}}}
  coder:
    image: example/agent
    x-claw: {{agent: {{}}, mode: native, tools: {grant}}}
"""
    )
    out, err = io.StringIO(), io.StringIO()
    assert clawc(["compile", str(tmp / "pod.yml"), "-o", str(tmp / "build")], out, err) == 0, (
        err.getvalue()
    )
    tokens = {}
    for agent in ("clerk", "coder"):
        for line in (tmp / "build" / "agents" / f"{agent}.env").read_text().splitlines():
            if line.startswith("CLAW_AGENT_TOKEN="):
                tokens[agent] = line.partition("=")[2]
    return tokens


async def test_a_mediated_and_a_native_agent_read_and_write_through_imported_tools(
    tmp_path: Path, petstore: tuple[str, web.Application]
) -> None:
    url, app = petstore
    new_pet = {"name": "Rex", "photoUrls": ["https://example.invalid/rex.jpg"], "status": "pending"}
    async with StubUpstream() as upstream:
        tokens = build_pod(tmp_path, url, upstream.openai_url)
        env = {**TEST_PROVIDER_KEYS, "PETSTORE_API_KEY": API_KEY}
        sidecar = await start_sidecar(tmp_path / "build", tmp_path / "state", env=env)
        upstream.enqueue(
            "openai",
            Reply.json(oa_calls(("c1", "petstore_getPetById", {"petId": 7}))),
            Reply.json(oa_calls(("c2", "petstore_addPet", new_pet))),
            Reply.json(oa_text("Pet 7 read, Rex added.")),
        )
        client = openai.AsyncOpenAI(
            base_url=sidecar.openai_base_url, api_key=tokens["clerk"], max_retries=0
        )
        try:
            completion = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "Read pet 7, add Rex."}]
            )
            sent = [r.json for r in upstream.requests_to("openai")]
            async with mcp_client(sidecar.url + "/mcp", tokens["coder"]) as native:
                read = await native.call_tool("petstore_getPetById", {"petId": 8})
                written = await native.call_tool("petstore_addPet", {**new_pet, "name": "Max"})
                # Its arguments go to the query string beside an (empty) JSON body.
                renamed = await native.call_tool(
                    "petstore_updatePetWithForm", {"petId": 8, "name": "Max II"}
                )
                # Its body is an array: one argument, sent as the whole body.
                users = [{"username": "ann"}, {"username": "bo"}]
                created = await native.call_tool(
                    "petstore_createUsersWithListInput", {"body": users}
                )
        finally:
            await client.close()
            await sidecar.close()
    assert completion.choices[0].message.content == "Pet 7 read, Rex added."
    offered = {t["function"]["name"] for t in sent[0]["tools"]}
    assert offered == {
        "petstore_getPetById",
        "petstore_addPet",
        "petstore_updatePetWithForm",
        "petstore_createUsersWithListInput",
    }
    results = [orjson.loads(m["content"]) for m in sent[2]["messages"] if m["role"] == "tool"]
    assert [r["status"] for r in results] == [200, 200]
    assert results[0]["data"]["name"] == "doggie"
    assert results[1]["data"] == {"id": 10, **new_pet}
    assert read.structured_content["data"]["id"] == 8
    assert written.structured_content["data"]["name"] == "Max"
    assert renamed.structured_content["data"] == {"id": 8, "name": "Max II", "photoUrls": []}
    assert created.structured_content["data"] == ["ann", "bo"]
    received = app[RECEIVED]
    assert [(r["method"], r["path"]) for r in received] == [
        ("GET", "/api/v3/pet/7"),
        ("POST", "/api/v3/pet"),
        ("GET", "/api/v3/pet/8"),
        ("POST", "/api/v3/pet"),
        ("POST", "/api/v3/pet/8?name=Max%20II"),
        ("POST", "/api/v3/user/createWithList"),
    ]
    assert [r["api_key"] for r in received] == [API_KEY] * 6
    assert orjson.loads(received[-1]["body"]) == [
        {"username": "ann"},
        {"username": "bo"},
    ]  # the variable the import named
    assert orjson.loads(received[1]["body"]) == new_pet
    assert API_KEY not in str(sent)
