"""Which provider response headers reach the client: the SDKs' retry hints and each protocol's
own (its codec names them), never transport or server internals."""

from __future__ import annotations

from multidict import CIMultiDict

from clawpod.sidecar.server.providers.upstream import response_headers

RELAYED = {
    "Content-Type": "application/json",
    "retry-after": "2",
    "retry-after-ms": "2000",
    "x-should-retry": "true",
    "request-id": "req_1",  # Anthropic's
    "anthropic-ratelimit-requests-remaining": "9",
    "x-request-id": "req_2",  # OpenAI's
    "openai-version": "2020-10-01",
    "openai-processing-ms": "12",
    "x-ratelimit-remaining-tokens": "100",
}
DROPPED = {
    "Content-Length": "10",
    "Connection": "keep-alive",
    "Set-Cookie": "session=1",
    "Server": "provider/1.0",
    "x-powered-by": "php",
}


def test_each_protocols_headers_are_relayed_and_nothing_else() -> None:
    assert response_headers(CIMultiDict({**RELAYED, **DROPPED})) == RELAYED
