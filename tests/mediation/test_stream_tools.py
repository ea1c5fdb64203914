"""Providers that cannot stream with tools (contract §7.4, ``stream-tools``), driven by the real
``openai`` SDK streaming through tool rounds against a server with llama-cpp-python's habits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.mediation.conftest import Sidecar
from tests.support.local_servers import LlamaCppPython, LlamaServer, LocalServer, call, say
from tests.support.services import ToolService
from tests.support.sidecar import RunningSidecar, audit_records

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "Compare AAPL and MSFT."}]
TWO_ROUNDS = (
    call("desk_quote", symbol="AAPL"),
    call("desk_quote", symbol="MSFT"),
    say("AAPL is 1 and MSFT is 2."),
)


async def stream_answer(sidecar: RunningSidecar, token: str, **options: Any) -> str:
    client = openai.AsyncOpenAI(base_url=sidecar.openai_base_url, api_key=token, max_retries=0)
    async with client:
        stream = await client.chat.completions.create(
            model="local-model", messages=ASK, stream=True, **options
        )
        pieces = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    return "".join(pieces)


def quotes(service: ToolService) -> list[str]:
    return [r.path for r in service.requests]


async def test_an_empty_stream_is_asked_again_whole_and_each_tool_runs_once(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with LlamaCppPython(*TWO_ROUNDS) as server:
        sidecar, token = await sidecar_for(server)
        answer = await stream_answer(sidecar, token)
        sent = server.requests_to(CHAT)
    assert answer == "AAPL is 1 and MSFT is 2."
    assert quotes(service) == ["/quotes/AAPL", "/quotes/MSFT"]
    # One empty stream taught the sidecar; every later tool round was called whole.
    assert [s.streamed for s in sent] == [True, False, False, False]


async def test_a_learned_provider_is_not_probed_again(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with LlamaCppPython(*TWO_ROUNDS, *TWO_ROUNDS) as server:
        sidecar, token = await sidecar_for(server)
        await stream_answer(sidecar, token)
        answer = await stream_answer(sidecar, token)
        sent = server.requests_to(CHAT)
    assert answer == "AAPL is 1 and MSFT is 2."
    assert [s.streamed for s in sent[4:]] == [False, False, False]
    assert quotes(service) == ["/quotes/AAPL", "/quotes/MSFT"] * 2


async def test_stream_tools_false_never_streams_a_request_offering_tools(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with LlamaCppPython(*TWO_ROUNDS) as server:
        sidecar, token = await sidecar_for(server, stream_tools=False)
        answer = await stream_answer(sidecar, token)
        sent = server.requests_to(CHAT)
    assert answer == "AAPL is 1 and MSFT is 2."
    assert not any(s.streamed for s in sent)
    assert quotes(service) == ["/quotes/AAPL", "/quotes/MSFT"]


async def test_stream_tools_true_trusts_the_stream_and_reports_it_empty(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with LlamaCppPython(*TWO_ROUNDS) as server:
        sidecar, token = await sidecar_for(server, stream_tools=True)
        with pytest.raises(openai.APIError, match="no chunks"):
            await stream_answer(sidecar, token)
        sent = server.requests_to(CHAT)
    assert [s.streamed for s in sent] == [True]
    assert quotes(service) == []


async def test_a_text_answer_still_streams_live_when_the_model_needs_no_tool(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with LlamaCppPython(say("Nothing to look up.")) as server:
        sidecar, token = await sidecar_for(server)
        answer = await stream_answer(sidecar, token)
        sent = server.requests_to(CHAT)
    assert answer == "Nothing to look up."
    assert [s.streamed for s in sent] == [True]
    assert quotes(service) == []


class RefusesStreamedTools(LlamaCppPython):
    """A server that refuses a streamed request offering tools with a 400."""

    async def answer(self, request: Any, body: dict[str, Any]) -> Any:
        from aiohttp import web

        if body.get("stream") and body.get("tools"):
            error = {"message": "streaming is not supported with tools", "code": 400}
            return web.json_response({"error": error}, status=400)
        return await super().answer(request, body)


async def test_a_refused_stream_falls_back_and_is_learned_once_the_whole_call_answers(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with RefusesStreamedTools(*TWO_ROUNDS) as server:
        sidecar, token = await sidecar_for(server)
        answer = await stream_answer(sidecar, token)
        sent = server.requests_to(CHAT)
    assert answer == "AAPL is 1 and MSFT is 2."
    assert [s.streamed for s in sent] == [True, False, False, False]
    assert quotes(service) == ["/quotes/AAPL", "/quotes/MSFT"]


class RefusesEverything(LocalServer):
    routes = (CHAT,)

    async def answer(self, request: Any, body: dict[str, Any]) -> Any:
        from aiohttp import web

        error = {"message": "the prompt is too long", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=400)


async def test_a_request_refused_streamed_and_whole_fails_once_and_teaches_nothing(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with RefusesEverything() as server:
        sidecar, token = await sidecar_for(server)
        for _ in range(2):
            with pytest.raises(openai.APIError, match="too long"):
                await stream_answer(sidecar, token)
        sent = server.requests_to(CHAT)
    # Not learned: each request probes the stream again, then asks whole, then fails.
    assert [s.streamed for s in sent] == [True, False, True, False]
    assert quotes(service) == []


class ResponsesWithoutStreamedTools(LlamaServer):
    """A Responses server that, like llama-cpp-python on Chat Completions, answers a streamed
    request offering tools with an empty stream."""

    async def answer(self, request: Any, body: dict[str, Any]) -> Any:
        from aiohttp import web

        if body.get("stream") and body.get("tools"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write_eof()
            return response
        return await super().answer(request, body)


async def test_a_responses_stream_falls_back_too_and_its_text_arrives_in_one_lifecycle(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with ResponsesWithoutStreamedTools(*TWO_ROUNDS) as server:
        sidecar, token = await sidecar_for(server)
        client = openai.AsyncOpenAI(base_url=sidecar.openai_base_url, api_key=token, max_retries=0)
        async with client, client.responses.stream(model="local-model", input="Compare.") as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
        sent = server.requests_to("/v1/responses")
    assert final.output_text == "AAPL is 1 and MSFT is 2."
    assert kinds[0] == "response.created" and kinds.count("response.completed") == 1
    assert [s.streamed for s in sent] == [True, False, False, False]
    assert quotes(service) == ["/quotes/AAPL", "/quotes/MSFT"]


async def test_a_lesson_holds_for_its_kind_of_round_alone_and_is_audited(
    sidecar_for: Sidecar, service: ToolService, tmp_path: Path
) -> None:
    """llama-cpp-python streams nothing when the model picks a tool under ``tool_choice: auto``
    but streams answer rounds (``none``) and rounds without ``tool_choice`` (it drops the
    tools): learning the first must not take live text from the others."""
    script = (*TWO_ROUNDS, say("Nothing to look up."), say("Still nothing."))
    async with LlamaCppPython(*script) as server:
        sidecar, token = await sidecar_for(server)
        await stream_answer(sidecar, token, tool_choice="auto")
        for choice in ("none", None):
            options = {} if choice is None else {"tool_choice": choice}
            await stream_answer(sidecar, token, **options)
        sent = server.requests_to(CHAT)
    # The auto rounds after the empty stream were called whole; the others streamed live.
    assert [s.streamed for s in sent] == [True, False, False, False, True, True]
    first = audit_records(tmp_path / "state0", "analyst")[0]
    assert first["stream_tools"]["round"] == "auto"
    assert first["stream_tools"]["provider"] == "local"


async def test_a_lesson_is_tested_again_after_a_while(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    async with LlamaCppPython(*TWO_ROUNDS, *TWO_ROUNDS) as server:
        sidecar, token = await sidecar_for(server)
        await stream_answer(sidecar, token, tool_choice="auto")
        support = sidecar.state.stream_tools
        for lesson in support._whole_until:  # time passes: the lesson is RETEST_S old
            support._whole_until[lesson] = 0.0
        await stream_answer(sidecar, token, tool_choice="auto")
        sent = server.requests_to(CHAT)
    # Probed again (an empty stream again), learned again.
    assert [s.streamed for s in sent[4:]] == [True, False, False, False]
    assert quotes(service) == ["/quotes/AAPL", "/quotes/MSFT"] * 2


def test_the_kind_of_each_round() -> None:
    from clawpod.sidecar.server.providers.stream_tools import round_kind

    tools = {"tools": [{"type": "function", "function": {"name": "f"}}]}
    assert round_kind({}) is None
    assert round_kind({**tools, "tool_choice": "none"}) is None
    assert round_kind({**tools, "tool_choice": {"type": "none"}}) is None
    assert round_kind(tools) == "unset"
    assert round_kind({**tools, "tool_choice": "auto"}) == "auto"
    assert round_kind({**tools, "tool_choice": {"type": "auto"}}) == "auto"
    assert round_kind({**tools, "tool_choice": "required"}) == "required"
    assert round_kind({**tools, "tool_choice": {"type": "any"}}) == "required"
    assert round_kind({**tools, "tool_choice": {"type": "tool", "name": "f"}}) == "named"


async def test_a_chat_client_asking_for_usage_gets_it_through_mediation(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    """llama-cpp-python streams no usage; a Chat client that asked for ``include_usage`` still
    gets its usage chunk, the sidecar's estimate (what the audit records too)."""
    async with LlamaCppPython(say("Nothing to look up.")) as server:
        sidecar, token = await sidecar_for(server)
        client = openai.AsyncOpenAI(base_url=sidecar.openai_base_url, api_key=token, max_retries=0)
        async with client:
            stream = await client.chat.completions.create(
                model="local-model",
                messages=ASK,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [chunk async for chunk in stream]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.prompt_tokens > 0 and last.usage.completion_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
