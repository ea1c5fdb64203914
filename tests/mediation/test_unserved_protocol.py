"""A request in a protocol its provider does not serve is refused clearly, in the caller's
protocol, naming the provider and what to do (until translation lands, contract §18)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from aiohttp import web

from tests.mediation.conftest import Sidecar
from tests.support.local_servers import LlamaCppPython, LocalServer, say
from tests.support.services import ToolService
from tests.support.sidecar import RunningSidecar


async def refusal(sidecar: RunningSidecar, token: str, *, stream: bool) -> tuple[int, str]:
    """The status and message of the refusal, whole or in-band (a stream's ``error`` or
    ``response.failed`` event, whose response head said 200)."""
    client = openai.AsyncOpenAI(base_url=sidecar.openai_base_url, api_key=token, max_retries=0)
    async with client:
        try:
            if not stream:
                await client.responses.create(model="local-model", input="hi")
            else:
                events = await client.responses.create(model="local-model", input="hi", stream=True)
                async for event in events:
                    if event.type == "error":
                        return 200, f"{event.code}: {event.message}"
                    if event.type == "response.failed":
                        error = event.response.error
                        return 200, f"{error.code}: {error.message}"
        except openai.APIStatusError as exc:
            return exc.status_code, f"{exc.body['code']}: {exc.body['message']}"
    raise AssertionError("no refusal")


@pytest.mark.parametrize(
    ("tools", "stream"),
    [(True, False), (True, True), (False, False), (False, True)],
    ids=["mediated", "mediated-streamed", "pass-through", "pass-through-streamed"],
)
async def test_responses_to_a_chat_only_server_is_refused_with_what_to_do(
    sidecar_for: Sidecar, service: ToolService, tools: bool, stream: bool
) -> None:
    async with LlamaCppPython(say("unused")) as server:
        sidecar, token = await sidecar_for(server, tools=tools)
        status, message = await refusal(sidecar, token, stream=stream)
    assert status in (400, 200)  # 200: the stream's head went out before the first call
    assert message.startswith("protocol_not_served: provider 'local' does not serve Responses")
    assert "Chat Completions (/v1/chat/completions)" in message
    assert "Not Found" not in message  # the server's bare page is not what the caller reads
    assert service.requests == []


class ModelNotFound(LocalServer):
    """A server that has the route but not the model: its own 404 goes to the caller."""

    routes = ("/v1/responses",)

    async def answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        error = {"message": "The model `local-model` does not exist", "code": "model_not_found"}
        return web.json_response({"error": error}, status=404)


async def test_a_404_about_the_model_is_the_providers_own_answer(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with ModelNotFound() as server:
        sidecar, token = await sidecar_for(server, tools=False)
        status, message = await refusal(sidecar, token, stream=False)
    assert (status, message) == (404, "model_not_found: The model `local-model` does not exist")
