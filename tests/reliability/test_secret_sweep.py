"""Credential sweep: the sweeper itself, and hostile peers that try to make the sidecar repeat a
credential (a provider that echoes its key in an error, a service that echoes its credential).

The suite-wide sweep (tests/conftest.py) searches, at the end of every session, all build and
state dirs under pytest's temporary directory, every log record, and every response body and
error message the reliability tests collected, for every credential value any test sidecar
was given; a hit fails the session.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest

from tests.reliability.harness import ENV, SERVICE_TOKEN, Pod, start_pod, stop_pod
from tests.reliability.wire import Api, ask, text, tool_call
from tests.support import secret_sweep
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.upstream import Reply, anthropic_message, openai_completion

KEY_OF: dict[Api, str] = {
    "openai": TEST_PROVIDER_KEYS["OPENAI_API_KEY"],
    "anthropic": TEST_PROVIDER_KEYS["ANTHROPIC_API_KEY"],
}


def test_the_sweep_finds_a_planted_credential(tmp_path: Path) -> None:
    secret = "planted-credential-0a1b2c3d"
    (tmp_path / "state" / "audit").mkdir(parents=True)
    (tmp_path / "state" / "audit" / "a.jsonl").write_text(f'{{"x": "{secret}"}}\n')
    leaks = secret_sweep.find_leaks({secret}, [("response", b"clean")], {tmp_path})
    where = tmp_path / "state/audit/a.jsonl"
    assert leaks == [f"{where}: contains {secret_sweep.mask(secret)} (raw)"]
    leaks = secret_sweep.find_leaks({secret}, [("log x", f"oops {secret}".encode())], set())
    assert leaks and leaks[0].startswith("log x")
    assert secret not in leaks[0]  # the report itself does not repeat the value


def test_the_sweep_finds_hex_and_wrapped_base64() -> None:
    secret = "planted-credential-0a1b2c3d-and-some-more-length"
    wrapped = base64.encodebytes(b"x" * 50 + secret.encode())
    assert b"\n" in wrapped[: len(wrapped) - 1]
    texts = [
        ("hex", secret.encode().hex().upper().encode()),
        ("mime", wrapped),
        ("json", json.dumps(wrapped.decode()).encode()),
    ]
    leaks = secret_sweep.find_leaks({secret}, texts, set())
    assert [leak.split(":")[0] for leak in leaks] == ["hex", "mime", "json"]
    assert "wrapped into lines" in leaks[1]


def test_the_log_collector_keeps_messages_and_tracebacks() -> None:
    collector = secret_sweep.LogCollector()
    logger = logging.getLogger("sidecar.sweep-check")
    logger.addHandler(collector)
    try:
        try:
            raise ValueError("boom-value-in-traceback")
        except ValueError:
            logger.exception("failed with %s", "argument-text")
    finally:
        logger.removeHandler(collector)
    where, text_ = secret_sweep.SWEEP.texts[-1]
    assert where == "log sidecar.sweep-check"
    assert b"argument-text" in text_ and b"boom-value-in-traceback" in text_


@pytest.fixture
async def pod(tmp_path: Path) -> AsyncIterator[Pod]:
    running = await start_pod(tmp_path)
    yield running
    await stop_pod(running)


async def test_sidecar_credentials_are_registered_for_the_sweep(pod: Pod) -> None:
    assert {*TEST_PROVIDER_KEYS.values(), SERVICE_TOKEN} <= secret_sweep.SWEEP.secrets


def echoing_key(api: Api, status: int = 401) -> Reply:
    return Reply.error(api, status, f"Incorrect API key provided: {KEY_OF[api]}", "invalid_api_key")


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("agent", "stream"), [("plain", False), ("analyst", False), ("analyst", True)]
)
async def test_a_provider_echoing_its_key_does_not_reach_the_client(
    pod: Pod, api: Api, agent: str, stream: bool
) -> None:
    pod.upstream.enqueue(api, echoing_key(api))
    seen = await ask(pod, api, agent, "hello", stream=stream)
    assert seen.answer is None
    assert KEY_OF[api] not in seen.message
    assert "Incorrect API key provided" in seen.message  # the provider's words still arrive
    records = await pod.wait_for_audit(agent, 1)
    assert KEY_OF[api] not in str(records)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_service_echoing_its_credential_does_not_reach_the_model(
    pod: Pod, api: Api
) -> None:
    pod.service.reply("/quotes/ECHO", json={"you_sent": f"Bearer {SERVICE_TOKEN}"})
    pod.upstream.enqueue(
        api,
        Reply.json(tool_call(api, "desk_quote", {"symbol": "ECHO"})),
        Reply.json(text(api, "done")),
    )
    seen = await ask(pod, api, "analyst", "quote ECHO", stream=False)
    assert seen.answer == "done"
    assert pod.service.requests[-1].headers["Authorization"] == f"Bearer {SERVICE_TOKEN}"
    to_model = pod.upstream.requests_to(api)[-1].body
    secret_sweep.collect("request to the model", to_model)
    assert SERVICE_TOKEN.encode() not in to_model
    assert b"you_sent" in to_model


def test_every_test_credential_is_long_enough_to_be_swept() -> None:
    for value in (*TEST_PROVIDER_KEYS.values(), SERVICE_TOKEN, ENV["SVC_TOKEN"]):
        assert len(value) >= secret_sweep.MIN_SECRET_LENGTH


def _echo_in(form: str, secret: str) -> str:
    """``secret`` as a service or provider may echo it (JSON-level forms are done by the
    service's own JSON encoder, so they are built at the text level here)."""
    if form == "json \\u-escaped":
        return "".join(f"\\u{ord(c):04x}" for c in secret)
    if form == "url-encoded":
        return quote(secret, safe="")
    if form in ("hex", "HEX"):
        encoded = secret.encode().hex()
        return encoded.upper() if form == "HEX" else encoded
    if form == "base64 MIME lines":  # 76 columns, CRLF; the line break falls inside the secret
        encoded = base64.b64encode(b"x" * 40 + secret.encode()).decode()
        return json.dumps("\r\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76)))[
            1:-1
        ]
    if form == "base64 PEM lines":  # 64 columns, LF
        return json.dumps(base64.encodebytes(b"y" * 30 + secret.encode()).decode())[1:-1]
    if form.startswith("base64"):
        offset = int(form[-1])
        encoded = base64.b64encode(b"x" * offset + secret.encode() + b"yz")
        return (
            encoded.decode().replace("+", "-").replace("/", "_")
            if "url" in form
            else (encoded.decode())
        )
    return secret


ECHO_FORMS = [
    "json \\u-escaped",
    "url-encoded",
    "base64@0",
    "base64@1",
    "base64url@2",
    "hex",
    "HEX",
    "base64 MIME lines",
    "base64 PEM lines",
]


@pytest.mark.parametrize("form", ECHO_FORMS)
async def test_a_service_echoing_its_credential_in_any_encoding_does_not_reach_the_model(
    pod: Pod, form: str
) -> None:
    # PHP's and Go's JSON encoders escape characters as \uXXXX; services echo headers URL- or
    # base64-encoded. Each form once reached the model in clear.
    echoed = _echo_in(form, f"Bearer {SERVICE_TOKEN}")
    raw_body = ('{"you_sent": "' + echoed + '"}').encode()
    pod.service.reply("/quotes/ECHO", body=raw_body, content_type="application/json")
    pod.upstream.enqueue(
        "openai",
        Reply.json(tool_call("openai", "desk_quote", {"symbol": "ECHO"})),
        Reply.json(text("openai", "done")),
    )
    seen = await ask(pod, "openai", "analyst", "quote ECHO", stream=False)
    assert seen.answer == "done"
    to_model = pod.upstream.requests_to("openai")[-1].body
    secret_sweep.collect("request to the model", to_model)
    for name, needle in secret_sweep.encodings(SERVICE_TOKEN).items():
        assert needle not in to_model, name
    assert b"you_sent" in to_model and b"[redacted]" in to_model


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize(("agent", "stream"), [("plain", False), ("analyst", False)])
async def test_a_provider_echoing_its_key_escaped_does_not_reach_the_client(
    pod: Pod, api: Api, agent: str, stream: bool
) -> None:
    escaped = _echo_in("json \\u-escaped", KEY_OF[api])
    body = '{"error": {"message": "Incorrect API key provided: ' + escaped + '", "type": "x"}}'
    pod.upstream.enqueue(
        api, Reply(status=401, body=body.encode(), content_type="application/json")
    )
    seen = await ask(pod, api, agent, "hello", stream=stream)
    assert seen.answer is None
    for name, needle in secret_sweep.encodings(KEY_OF[api]).items():
        assert needle.decode() not in seen.message, name
    assert KEY_OF[api] not in seen.message
    assert "Incorrect API key provided" in seen.message


async def test_a_provider_dump_is_cut_before_it_reaches_the_client(pod: Pod) -> None:
    dump = "Traceback (most recent call last): " + "/srv/provider/app/handlers.py line 1; " * 80
    pod.upstream.enqueue("openai", Reply.error("openai", 500, dump, "server_error"))
    seen = await ask(pod, "openai", "analyst", "hello", stream=False)
    assert seen.answer is None
    assert len(seen.message) < 800 and seen.message.endswith("(cut)")


def _error_event(api: Api, message: str) -> bytes:
    if api == "anthropic":
        error = {"type": "error", "error": {"type": "authentication_error", "message": message}}
        return b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
    error = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return b"data: " + orjson.dumps(error) + b"\n\n"


def _first_event(api: Api) -> bytes:
    if api == "anthropic":
        start = {"type": "message_start", "message": {**anthropic_message(""), "content": []}}
        return b"event: message_start\ndata: " + orjson.dumps(start) + b"\n\n"
    chunk = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("split", ["whole", "inside the key", "byte by byte"])
async def test_a_provider_echoing_its_key_in_a_stream_error_event_does_not_reach_the_client(
    pod: Pod, api: Api, split: str
) -> None:
    # A 200 stream is relayed chunk by chunk; its error event once reached the client unredacted,
    # and an echo split across two chunks escapes any per-chunk redaction.
    event = _error_event(api, f"Incorrect API key provided: {KEY_OF[api]}")
    if split == "whole":
        pieces = [event]
    elif split == "inside the key":
        cut = event.index(KEY_OF[api].encode()) + 7
        pieces = [event[:cut], event[cut:]]
    else:
        pieces = [event[i : i + 1] for i in range(len(event))]
    pod.upstream.enqueue(api, Reply.sse([_first_event(api), *pieces]))
    seen = await ask(pod, api, "plain", "hello", stream=True)
    assert seen.answer is None
    assert "Incorrect API key provided: [redacted]" in seen.message
    for name, needle in secret_sweep.encodings(KEY_OF[api]).items():
        assert needle.decode() not in seen.message, name


@pytest.mark.parametrize("stream", [False, True])
async def test_a_provider_echoing_its_key_in_a_relayed_header_does_not_reach_the_client(
    pod: Pod, stream: bool
) -> None:
    key = KEY_OF["openai"]
    echo = {
        "x-ratelimit-debug": f"key={key}",
        "request-id": base64.b64encode(key.encode()).decode(),
    }
    if stream:
        done = b"data: [DONE]\n\n"
        pod.upstream.enqueue("openai", Reply.sse([_first_event("openai"), done], headers=echo))
    else:
        pod.upstream.enqueue("openai", Reply.json(openai_completion("hi"), headers=echo))
    client = pod.openai("plain")
    messages = [{"role": "user", "content": "hello"}]
    async with client.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=messages, stream=stream
    ) as raw:
        headers = dict(raw.headers)
        body = await raw.read()
    secret_sweep.collect("relayed headers", orjson.dumps(headers))
    secret_sweep.collect("relayed body", body)
    assert headers["x-ratelimit-debug"] == "key=[redacted]"
    assert "[redacted]" in headers["request-id"]
    for name, needle in secret_sweep.encodings(key).items():
        assert needle.decode() not in str(headers), name
