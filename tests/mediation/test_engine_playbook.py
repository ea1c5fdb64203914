"""The engine's exchanges pinned command by command (mitmproxy's Playbook style): what it asks
the driver to do, in which order, and what it does with each answer — not only its end state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from clawpod.sidecar.mediation.commands import (
    BeginStream,
    CallModel,
    Command,
    Done,
    Event,
    ExecuteTools,
    Fail,
    ModelReplied,
    Recall,
    Recalled,
    Remember,
    Respond,
    ToolsDone,
)
from clawpod.sidecar.mediation.engine import MediationEngine
from tests.mediation.scripted import agent, calls, engine_for, ok, request, text
from tests.support.codecs import EVERY_API

APIS = EVERY_API


class Playbook:
    """Expected commands, each with the event the test answers it with."""

    def __init__(self, engine: MediationEngine) -> None:
        self.steps = engine.run()
        self.command: Command | None = next(self.steps)

    def expect(
        self, kind: type, check: Callable[[Any], bool] = lambda _: True, then: Event | None = None
    ) -> Playbook:
        command = self.command
        assert isinstance(command, kind), f"expected {kind.__name__}, the engine sent {command}"
        assert check(command), f"{kind.__name__} not as expected: {command}"
        if isinstance(command, Respond | Fail):
            assert then is None
            with pytest.raises(StopIteration):
                next(self.steps)
            self.command = None
        else:
            assert then is not None, f"{kind.__name__} needs an answer"
            self.command = self.steps.send(then)
        return self

    def remembers(self, api: str, check: Callable[[Any], bool] = lambda _: True) -> Playbook:
        """The hidden rounds stored: under one key, or in Responses two (the answer's echo and
        its item reference)."""
        keys = 2 if api == "responses" else 1
        return self.expect(Remember, lambda c: len(c.keys) == keys and check(c), then=Done())


def offered(command: CallModel) -> list[str]:
    tools = command.body.get("tools") or []
    return [t.get("function", t).get("name") for t in tools]


@pytest.mark.parametrize("api", APIS)
def test_a_plain_answer_is_one_model_call_then_the_response(api: str) -> None:
    (
        Playbook(engine_for(api, request(api)))
        .expect(
            CallModel,
            lambda c: (
                offered(c) == ["desk_lookup", "desk_trade", "desk_cancel"]
                and c.body["stream"] is False
            ),
            then=ModelReplied(text(api, "hello")),
        )
        .expect(Respond)
    )


@pytest.mark.parametrize("api", APIS)
def test_a_streamed_tool_round(api: str) -> None:
    (
        Playbook(engine_for(api, request(api, stream=True)))
        .expect(BeginStream, then=Done())
        .expect(CallModel, then=ModelReplied(calls(api, ("c1", "desk_lookup", {"symbol": "A"}))))
        .expect(
            ExecuteTools,
            lambda c: (
                [e.checked.tool.name for e in c.executions] == ["desk.lookup"] and c.concurrent
            ),
            then=ToolsDone([ok({"price": 1})], elapsed_s=0.1),
        )
        .expect(CallModel, lambda c: len(offered(c)) == 3, then=ModelReplied(text(api, "A is 1")))
        # The client saw the text live: the stored round ends with the answer as given.
        .remembers(api, lambda r: len(r.messages) == 3)
        .expect(Respond)
    )


@pytest.mark.parametrize("api", APIS)
def test_a_follow_up_turn_recalls_hidden_rounds_before_calling_the_model(api: str) -> None:
    history = [
        {"role": "user", "content": "What is AAPL at?"},
        {"role": "assistant", "content": "A is 1"},
        {"role": "user", "content": "And now?"},
    ]
    (
        Playbook(engine_for(api, request(api, messages=history)))
        .expect(Recall, lambda r: len(r.keys) == 1, then=Recalled({}))
        .expect(CallModel, then=ModelReplied(text(api, "still 1")))
        .expect(Respond)
    )


@pytest.mark.parametrize("api", APIS)
def test_a_malformed_request_is_refused_before_anything_else(api: str) -> None:
    (
        Playbook(engine_for(api, {"model": "x", "messages": "not a list", "stream": True})).expect(
            Fail, lambda f: (f.status, f.code) == (400, "invalid_request")
        )
    )


@pytest.mark.parametrize("api", APIS)
def test_two_destructive_calls_run_one_by_one_in_one_command(api: str) -> None:
    reply = calls(
        api,
        ("c1", "desk_trade", {"symbol": "A", "qty": 1}),
        ("c2", "desk_trade", {"symbol": "B", "qty": 1}),
    )
    (
        Playbook(engine_for(api, request(api), agent()))
        .expect(CallModel, then=ModelReplied(reply))
        .expect(
            ExecuteTools,
            lambda c: len(c.executions) == 2 and not c.concurrent,
            then=ToolsDone([ok(), ok()], elapsed_s=0.2),
        )
        .expect(CallModel, then=ModelReplied(text(api, "done")))
        .remembers(api)
        .expect(Respond)
    )
