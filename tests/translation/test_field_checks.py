"""The readers look for refused and dropped fields with one set operation first and walk the
body only when it holds one: a body that differs from a plain one in a single such field is
still refused, or still has that field audited as dropped, whatever else it holds."""

from __future__ import annotations

from typing import Any

import pytest

from clawpod.sidecar.codecs.chat import neutral as chat
from clawpod.sidecar.codecs.messages import neutral as messages
from clawpod.sidecar.codecs.responses import neutral as responses
from clawpod.sidecar.translation import Untranslatable, translate_request

TURN = {"role": "user", "content": "Hi"}
PLAIN = {
    "chat": {"model": "m", "messages": [TURN], "max_tokens": 5},
    "messages": {"model": "m", "messages": [TURN], "max_tokens": 5},
    "responses": {"model": "m", "input": [TURN], "max_output_tokens": 5},
}
TARGET = {"chat": "messages", "messages": "chat", "responses": "chat"}
# Per protocol: a refused field with a value that refuses it, and one with a harmless value.
REFUSED: dict[str, list[tuple[str, Any, Any]]] = {
    "chat": [
        ("n", 2, 1),
        ("logprobs", True, False),
        ("top_logprobs", 3, None),
        ("audio", {"voice": "alloy"}, None),
        ("modalities", ["text", "audio"], ["text"]),
        ("web_search_options", {}, None),
    ],
    "messages": [
        ("mcp_servers", [{"type": "url", "url": "https://x.test"}], []),
        ("container", "c1", None),
        ("thread", "t1", None),
    ],
    "responses": [
        ("previous_response_id", "resp_1", None),
        ("conversation", "conv_1", None),
        ("background", True, False),
        ("prompt", {"id": "p"}, None),
        ("top_logprobs", 2, 0),
    ],
}
MODULES = {"chat": chat, "messages": messages, "responses": responses}


def _cases() -> list[tuple[str, str, Any, Any]]:
    return [(p, name, bad, ok) for p, fields in REFUSED.items() for name, bad, ok in fields]


def test_every_refused_field_of_each_reader_is_tested() -> None:
    for protocol, module in MODULES.items():
        assert {name for name, _, _ in REFUSED[protocol]} == set(module.REFUSED)


@pytest.mark.parametrize(("protocol", "name", "bad", "ok"), _cases())
def test_one_refused_field_alone_is_still_refused(
    protocol: str, name: str, bad: Any, ok: Any
) -> None:
    with pytest.raises(Untranslatable):
        translate_request({**PLAIN[protocol], name: bad}, protocol, TARGET[protocol])
    allowed = translate_request({**PLAIN[protocol], name: ok}, protocol, TARGET[protocol])
    assert allowed.body["model"] == "m"


@pytest.mark.parametrize("protocol", sorted(PLAIN))
def test_a_plain_body_drops_nothing(protocol: str) -> None:
    assert translate_request(PLAIN[protocol], protocol, TARGET[protocol]).dropped == ()


@pytest.mark.parametrize("protocol", sorted(PLAIN))
@pytest.mark.parametrize("field", ["user", "metadata", "x_unknown_field"])
def test_one_unmapped_field_is_dropped_and_named(protocol: str, field: str) -> None:
    body = {**PLAIN[protocol], field: "v"}
    if field in MODULES[protocol].MAPPED:
        pytest.skip(f"{field} is mapped in {protocol}")
    translated = translate_request(body, protocol, TARGET[protocol])
    assert translated.dropped == (field,)
    assert field not in translated.body
