"""Upstream failures reach the client in its protocol's shape with an honest status:
provider errors are relayed, garbage and broken connections become 502, timeouts 504."""

from __future__ import annotations

import socket

import aiohttp
import anthropic
import openai
import orjson
import pytest

from tests.sidecar.conftest import Pod, PodFactory
from tests.support.builds import providers_for
from tests.support.upstream import Reply, openai_completion

PROMPT = [{"role": "user", "content": "hi"}]
OPENAI_REQUEST = {"model": "gpt-4o-mini", "messages": PROMPT}
ANTHROPIC_REQUEST = {"model": "claude-haiku-4-5", "max_tokens": 8, "messages": PROMPT}


def _last_outcome(pod: Pod) -> tuple[int, dict]:
    record = orjson.loads(pod.audit_lines()[-1])
    return record["http_status"], record["outcome"]


async def test_openai_5xx_error_is_relayed(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.error("openai", 500, "The server had an error"))
    with pytest.raises(openai.InternalServerError, match="The server had an error"):
        await pod.openai().chat.completions.create(**OPENAI_REQUEST)
    assert _last_outcome(pod) == (500, {"status": "error", "code": "upstream_http_500"})


async def test_anthropic_overloaded_is_relayed(pod: Pod) -> None:
    pod.upstream.enqueue(
        "anthropic", Reply.error("anthropic", 529, "Overloaded", type="overloaded_error")
    )
    with pytest.raises(anthropic.APIStatusError, match="Overloaded") as raised:
        await pod.anthropic().messages.create(**ANTHROPIC_REQUEST)
    assert raised.value.status_code == 529


async def test_rate_limit_keeps_retry_headers(pod: Pod) -> None:
    reply = Reply.error("openai", 429, "Rate limit reached", type="requests")
    reply.headers.update({"retry-after": "7", "x-ratelimit-remaining-requests": "0"})
    pod.upstream.enqueue("openai", reply)
    with pytest.raises(openai.RateLimitError) as raised:
        await pod.openai().chat.completions.create(**OPENAI_REQUEST)
    headers = raised.value.response.headers
    assert headers["retry-after"] == "7"
    assert headers["x-ratelimit-remaining-requests"] == "0"


async def test_sdk_retry_on_5xx_goes_upstream_again(pod: Pod) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.error("openai", 503, "busy"),
        Reply.json(openai_completion("recovered")),
    )
    client = pod.openai(max_retries=1)
    completion = await client.with_options(timeout=30).chat.completions.create(**OPENAI_REQUEST)
    assert completion.choices[0].message.content == "recovered"
    assert len(pod.upstream.requests_to("openai")) == 2


async def test_garbage_success_body_is_502(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.garbage())
    with pytest.raises(openai.APIStatusError, match="not JSON") as raised:
        await pod.openai().chat.completions.create(**OPENAI_REQUEST)
    assert raised.value.status_code == 502
    assert _last_outcome(pod) == (502, {"status": "error", "code": "upstream_protocol_error"})


async def test_non_protocol_error_page_is_wrapped_in_shape(pod: Pod) -> None:
    pod.upstream.enqueue("anthropic", Reply.garbage(status=503, content_type="text/html"))
    with pytest.raises(anthropic.APIStatusError, match="answered HTTP 503") as raised:
        await pod.anthropic().messages.create(**ANTHROPIC_REQUEST)
    assert raised.value.status_code == 503
    assert raised.value.body["type"] == "error"


async def test_connection_dropped_before_answer_is_502(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.dropped())
    with pytest.raises(openai.APIStatusError) as raised:
        await pod.openai().chat.completions.create(**OPENAI_REQUEST)
    assert raised.value.status_code == 502
    assert raised.value.code == "upstream_protocol_error"


@pytest.mark.parametrize("stream", [False, True])
async def test_refused_connection_is_502_unreachable(make_pod: PodFactory, stream: bool) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    dead = f"http://127.0.0.1:{closed_port}"
    pod = await make_pod(providers=providers_for(dead + "/v1", dead))
    with pytest.raises(openai.APIStatusError, match="unreachable") as raised:
        await pod.openai().chat.completions.create(**OPENAI_REQUEST, stream=stream)
    assert raised.value.status_code == 502
    with pytest.raises(anthropic.APIStatusError, match="unreachable") as raised_a:
        await pod.anthropic().messages.create(**ANTHROPIC_REQUEST, stream=stream)
    assert raised_a.value.status_code == 502
    assert raised_a.value.body["error"]["code"] == "upstream_unreachable"


async def test_upstream_timeout_is_504(make_pod: PodFactory) -> None:
    pod = await make_pod(upstream_timeout_ms=200)
    pod.upstream.enqueue("openai", Reply.hang(30))
    with pytest.raises(openai.APIStatusError, match="did not answer in time") as raised:
        await pod.openai().chat.completions.create(**OPENAI_REQUEST)
    assert raised.value.status_code == 504
    assert _last_outcome(pod) == (504, {"status": "error", "code": "upstream_timeout"})


async def test_error_bodies_never_leak_internals(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.dropped())
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            pod.sidecar.url + "/v1/chat/completions",
            json=OPENAI_REQUEST,
            headers={"Authorization": f"Bearer {pod.token}"},
        ) as response,
    ):
        text = await response.text()
    assert "Traceback" not in text and "aiohttp" not in text
    assert "sk-test" not in text


def test_an_answer_over_the_limit_is_a_protocol_failure_naming_the_limit() -> None:
    from clawpod.sidecar.server.providers.upstream import translate_error
    from clawpod.sidecar.transport import BodyTooLarge

    failure = translate_error(BodyTooLarge(1024), "openai")
    assert failure.kind == "protocol"
    assert "more than 1024 bytes" in failure.message


@pytest.mark.parametrize("stream", [False, True])
async def test_a_provider_s_answer_past_the_bound_is_not_relayed(
    make_pod: PodFactory, stream: bool
) -> None:
    """A JSON answer is held whole before it is relayed: past the pod's body bound (here
    1 MiB) it is a 502 naming the bound, whether or not the client asked for a stream."""
    pod = await make_pod(max_body_bytes=1024 * 1024)
    pod.upstream.enqueue("openai", Reply.json(openai_completion("x" * (2 * 1024 * 1024))))
    with pytest.raises(openai.APIStatusError, match="more than 1048576 bytes") as raised:
        answer = await pod.openai().chat.completions.create(**OPENAI_REQUEST, stream=stream)
        if stream:
            [chunk async for chunk in answer]
    assert raised.value.status_code == 502
