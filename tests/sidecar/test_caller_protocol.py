"""One sniffer says which protocol a caller speaks, for every answer that has no route of its
own to go by: the error middleware's and the model list's."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from clawpod.sidecar.codecs import codec_for_caller

ANTHROPIC_CLIENT = {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(
    ("path", "headers", "protocol"),
    [
        ("/v1/chat/completions", {}, "chat"),
        ("/chat/completions", {}, "chat"),  # a base URL without /v1
        ("/v1/responses", {}, "responses"),
        ("/responses/input_tokens", {}, "responses"),
        ("/v1/messages", {}, "messages"),
        ("/v1/messages/count_tokens", {}, "messages"),
        ("/v1/messages/batches", {}, "messages"),  # under the Messages route
        ("/v1/models", ANTHROPIC_CLIENT, "messages"),
        ("/models/claude-sonnet-4-5", {"Anthropic-Version": "2023-06-01"}, "messages"),
        ("/v1/models", {}, "chat"),
        ("/v1/no/such/route", {}, "chat"),
        # A route names its protocol, whatever the headers say.
        ("/v1/chat/completions", ANTHROPIC_CLIENT, "chat"),
        ("/v1/no/such/route", ANTHROPIC_CLIENT, "messages"),
    ],
)
def test_the_caller_protocol_comes_from_its_route_then_its_headers(
    path: str, headers: dict[str, str], protocol: str
) -> None:
    assert codec_for_caller(path, CIMultiDict(headers)).name == protocol
