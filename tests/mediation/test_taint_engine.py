"""The taint of a request in the sans-IO engine (SPEC §17): from which round it starts, what
``withdraw`` takes back from the model, and that it comes back with restored rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawpod.sidecar.mediation.commands import ExecuteTools, Remember
from clawpod.sidecar.mediation.engine import MediationEngine
from clawpod.sidecar.model.taint import RequestTaint
from clawpod.sidecar.state.continuity import ContinuityStore
from tests.mediation.scripted import (
    CHECK,
    LOOKUP,
    MODEL_TIMEOUT_S,
    TRADE,
    Transcript,
    agent,
    calls,
    drive,
    messages_field,
    request,
    text,
    tool,
)
from tests.support.codecs import EVERY_API, codec_of

NEWS = tool(
    "desk.news",
    schema={"type": "object", "properties": {"q": {"type": "string"}}},
    annotations={"readOnlyHint": True, "openWorldHint": True},
).model_copy(update={"untrusted_output": True})
TRADE_ARGS = {"symbol": "NVDA", "qty": 1000}


def engine(api: str, body: dict, mode: str = "confirm", *, planned: bool = True) -> MediationEngine:
    """``planned``: handed the untrusted tools as the agent's CallPlan names them (else the
    engine reads them from the agent's tools)."""
    return MediationEngine(
        codec_of(api),
        agent(NEWS, LOOKUP, TRADE),
        body,
        check=CHECK,
        model_timeout_s=MODEL_TIMEOUT_S,
        taint_mode=mode,  # type: ignore[arg-type]
        **({"untrusted": frozenset({NEWS.name})} if planned else {}),
    )


def offered(api: str, body: dict) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def taints(run: Transcript) -> list[RequestTaint]:
    return [command.taint for command in run.of(ExecuteTools)]


@pytest.mark.parametrize("planned", [True, False])
@pytest.mark.parametrize("api", EVERY_API)
def test_the_taint_starts_with_the_round_after_the_untrusted_result(
    api: str, planned: bool
) -> None:
    """Also when the engine is not told which tools are untrusted: no tool is trusted by
    omission."""
    run = drive(
        engine(api, request(api), planned=planned),
        [
            calls(api, ("c1", "desk_news", {"q": "NVDA"}), ("c2", "desk_lookup", {"symbol": "A"})),
            calls(api, ("c3", "desk_trade", TRADE_ARGS)),
            text(api, "done"),
        ],
    )
    assert taints(run) == [RequestTaint(), RequestTaint(("desk.news",))]


@pytest.mark.parametrize("api", EVERY_API)
def test_a_trusted_read_taints_nothing(api: str) -> None:
    run = drive(
        engine(api, request(api)),
        [
            calls(api, ("c1", "desk_lookup", {"symbol": "A"})),
            calls(api, ("c2", "desk_trade", TRADE_ARGS)),
            text(api, "done"),
        ],
    )
    assert taints(run) == [RequestTaint(), RequestTaint()]


def test_a_refused_untrusted_call_taints_nothing() -> None:
    """Only a result that came from the service carries its content."""
    run = drive(
        engine("openai", request("openai")),
        [
            calls("openai", ("c1", "desk_news", '{"q": 1}')),  # invalid: not executed
            calls("openai", ("c2", "desk_trade", TRADE_ARGS)),
            text("openai", "done"),
        ],
    )
    assert taints(run) == [RequestTaint()]


@pytest.mark.parametrize("api", EVERY_API)
def test_withdraw_takes_destructive_and_open_world_tools_back(api: str) -> None:
    withdrawing = engine(api, request(api), mode="withdraw")
    run = drive(
        withdrawing,
        [
            calls(api, ("c1", "desk_news", {"q": "NVDA"})),
            calls(api, ("c2", "desk_trade", TRADE_ARGS), ("c3", "desk_lookup", {"symbol": "B"})),
            text(api, "done"),
        ],
    )
    first, second, third = run.upstream_bodies
    assert offered(api, first) == ["desk_news", "desk_lookup", "desk_trade"]
    assert offered(api, second) == offered(api, third) == ["desk_lookup"]
    # The trade is answered without being executed; the lookup of the same round runs.
    assert [e.call.id for e in run.executions] == ["c1", "c3"]
    [trade] = [a for a in withdrawing.rounds[1] if a.call.id == "c2"]
    assert trade.outcome.error_code == "tainted_withdrawn" and not trade.outcome.executed


def test_a_forced_choice_of_a_withdrawn_tool_is_relaxed(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    drive(
        engine("openai", request("openai"), mode="withdraw"),
        [calls("openai", ("c1", "desk_news", {"q": "NVDA"})), text("openai", "News read.")],
        store=store,
    )
    follow_up = request(
        "openai", tool_choice={"type": "function", "function": {"name": "desk_trade"}}
    )
    follow_up["messages"] += [
        {"role": "assistant", "content": "News read."},
        {"role": "user", "content": "Trade."},
    ]
    run = drive(engine("openai", follow_up, mode="withdraw"), [text("openai", "ok")], store=store)
    [body] = run.upstream_bodies
    assert "desk_trade" not in offered("openai", body)
    assert body.get("tool_choice") in (None, "auto")


@pytest.mark.parametrize("api", EVERY_API)
def test_restored_rounds_bring_their_taint_back(api: str, tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path)
    # A runner that sends the whole conversation (Responses: no provider-held responses).
    whole = {"store": False} if api == "responses" else {}
    drive(
        engine(api, request(api, **whole)),
        [calls(api, ("c1", "desk_news", {"q": "NVDA"})), text(api, "News read.")],
        store=store,
    )
    follow_up = request(api, **whole)
    follow_up[messages_field(api)] += [
        {"role": "assistant", "content": "News read."},
        {"role": "user", "content": "Trade."},
    ]
    run = drive(
        engine(api, follow_up),
        [calls(api, ("c2", "desk_trade", TRADE_ARGS)), text(api, "ok")],
        store=store,
    )
    assert taints(run) == [RequestTaint(("desk.news",))]
    # ...and this turn's rounds are remembered tainted too, for the turn after.
    assert {tuple(c.taint_sources) for c in run.of(Remember)} == {("desk.news",)}
    reopened = ContinuityStore(tmp_path)
    found = reopened.candidates([key for c in run.of(Remember) for key in c.keys])
    assert {tuple(f.taint_sources) for f in found.values()} == {("desk.news",)}
