"""A passed-through stream that fails after its 200 went out is audited as the failure it was
(issue #45: a provider's in-band error event, a stream cut short or empty, were audited
``http 200`` with no error)."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.providers.conftest import PodMaker
from tests.providers.streams import chat_stream_events
from tests.support.upstream import Reply

ASK = [{"role": "user", "content": "hi"}]
OPENAI_ERROR = b'data: {"error": {"message": "the model crashed", "type": "server_error"}}\n\n'
ANTHROPIC_ERROR = (
    b"event: error\n"
    b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)


async def test_an_in_band_error_event_is_audited_as_an_error(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    text = b"".join(chat_stream_events("partial answer", usage=None)).split(b"data: [DONE]")[0]
    pod.upstreams.primary.enqueue("openai", Reply.sse([text, OPENAI_ERROR, b"data: [DONE]\n\n"]))
    with pytest.raises(openai.APIError, match="crashed"):
        stream = await pod.openai().chat.completions.create(
            model="gpt-4o",
            messages=ASK,
            stream=True,  # type: ignore[arg-type]
        )
        _ = [chunk async for chunk in stream]
    (record,) = await pod.audit()
    assert record["http_status"] == 502
    assert record["outcome"] == {"status": "error", "code": "upstream_stream_error"}


async def test_an_anthropic_error_event_is_audited_as_an_error(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    pod.upstreams.primary.enqueue("anthropic", Reply.sse([ANTHROPIC_ERROR]))
    with pytest.raises(anthropic.APIStatusError):
        async with pod.anthropic().messages.stream(
            model="claude-haiku-4-5",
            max_tokens=8,
            messages=ASK,  # type: ignore[arg-type]
        ) as stream:
            _ = [event async for event in stream]
    (record,) = await pod.audit()
    assert record["http_status"] == 502
    assert record["outcome"] == {"status": "error", "code": "upstream_stream_error"}


async def test_an_empty_stream_is_audited_as_an_error(make_pod: PodMaker) -> None:
    """llama-cpp-python's answer to a streamed tool call under tool_choice: auto: a 200 with
    nothing but a ping comment."""
    pod = await make_pod(routes={})
    pod.upstreams.primary.enqueue("openai", Reply.sse([b": ping - 2026-11-25\r\n\r\n"]))
    with pytest.raises(openai.APIError):
        stream = await pod.openai().chat.completions.create(
            model="gpt-4o",
            messages=ASK,
            stream=True,  # type: ignore[arg-type]
        )
        _ = [chunk async for chunk in stream]
    (record,) = await pod.audit()
    assert record["http_status"] == 502
    assert record["outcome"] == {"status": "error", "code": "upstream_protocol_error"}
