"""A request's state in three parts (#43): who asks (``Caller``, fixed at authentication), where
routing sends it (``Routing``, fixed once routed) and the one part that changes while it runs
(``Ledger``). A routed request, or one rerouted over the rest of its targets (a stream continued
at the next provider), is the same request: it shares its caller and its ledger."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from clawpod.sidecar.codecs import CODECS
from clawpod.sidecar.server.request.exchange import (
    UNROUTED,
    Caller,
    Ledger,
    RequestContext,
    Routing,
)
from tests.mediation.scripted import agent

CHAT = CODECS[0]


def request() -> RequestContext:
    caller = Caller(agent(), CHAT, "/v1/chat/completions", "r1", 0.0, {})
    # The sidecar's state is not read by anything here.
    return RequestContext(state=None, caller=caller)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("part", "field", "value"),
    [
        ("caller", "agent", None),
        ("caller", "end_user", None),
        ("routing", "targets", ()),
        ("routing", "stream", True),
        ("routing", "translations", None),
    ],
)
def test_what_authentication_and_routing_decided_cannot_change(
    part: str, field: str, value: Any
) -> None:
    ctx = request()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(getattr(ctx, part), field, value)


def test_a_request_is_routed_into_a_new_context_not_changed_in_place() -> None:
    ctx = request()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.routing = Routing()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.ledger = Ledger()  # type: ignore[misc]


def test_the_ledger_is_the_one_part_that_changes() -> None:
    ctx = request()
    assert ctx.routing is UNROUTED
    routed = ctx.routed(Routing(stream=True, request={"model": "m"}))
    assert routed.caller is ctx.caller and routed.ledger is ctx.ledger
    assert ctx.routing is UNROUTED  # the request as it was before routing is untouched
    rerouted = routed.routed(dataclasses.replace(routed.routing, targets=()))
    rerouted.ledger.provider_name = "second"
    rerouted.ledger.attempts.append({"provider": "second", "key": None, "outcome": "ok"})
    # What the continuation spent and where it went is the request's own, for its audit record.
    assert routed.ledger.provider_name == "second"
    assert routed.ledger.attempts == rerouted.ledger.attempts
    assert routed.routing.stream is True and rerouted.routing.stream is True
