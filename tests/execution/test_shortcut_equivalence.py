"""Two performance shortcuts of a tool call held to their general paths (docs/architecture.md,
"Shortcuts and the general paths they stand for"): what each answers over a set of inputs is
what the general path answers.

- An ungoverned call of an untainted request goes to the executor straight
  (``server/mediated/tool_round.py``, the agent's ``CallPlan.ungoverned``), not through the gate.
- The argument check remembers the short texts it found valid (``ArgumentCheck``) instead of
  validating them again."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.execution.executor import ArgumentCheck, CallLimits, ToolExecutor
from clawpod.sidecar.manifest import ManagedTool
from clawpod.sidecar.model.conversation import CheckedCall, ToolOutcome
from clawpod.sidecar.observability.metrics import Metrics
from tests.mediation.scripted import agent
from tests.support.builds import http_tool
from tests.support.gates import governed
from tests.support.services import ToolService

SCHEMA = {
    "type": "object",
    "properties": {"symbol": {"type": "string", "maxLength": 8}, "qty": {"type": "integer"}},
    "required": ["symbol"],
    "additionalProperties": False,
}
STRICTER = {**SCHEMA, "required": ["symbol", "qty"]}  # the same name, another build's schema
READ_ONLY = {"readOnlyHint": True}
# (path, what the service does there): an answer of each kind the executor tells apart.
SERVICE_ANSWERS: dict[str, dict[str, Any]] = {
    "/ok": {"json": {"price": 12.5}},
    "/text": {"text": "plain words", "content_type": "text/plain"},
    "/missing": {"status": 404, "json": {"error": "no such symbol"}},
    "/broken": {"status": 500, "text": "oops"},
    "/large": {"size": 200_000},
    "/slow": {"delay_s": 2.0},
    "/dropped": {"drop": True},
}


@pytest.fixture
async def service() -> AsyncIterator[ToolService]:
    running = await ToolService().start()
    for path, knobs in SERVICE_ANSWERS.items():
        running.reply(path, **knobs)
    yield running
    await running.close()


def without_latency(outcome: ToolOutcome) -> ToolOutcome:
    return dataclasses.replace(outcome, latency_ms=0.0)


@pytest.mark.parametrize("path", [*SERVICE_ANSWERS, "/unreachable"])
async def test_an_ungoverned_call_answers_as_the_gate_would(
    executor: ToolExecutor, metrics: Metrics, service: ToolService, tmp_path: Path, path: str
) -> None:
    url = "http://127.0.0.1:9" if path == "/unreachable" else service.url
    tool = http_tool("desk", "quote", url, path=path, annotations=READ_ONLY)
    gate = governed(executor, metrics, {"analyst": agent(tool)}, tmp_path)
    assert gate.plans["analyst"].ungoverned == {tool.name}  # the shortcut is taken for it
    call = gate.check(tool, {})
    assert isinstance(call, CheckedCall)
    limits = CallLimits(timeout_s=0.5, max_result_bytes=4096)
    straight = await executor.execute("analyst", call, limits, shielded=True)
    through_the_gate = await gate.execute("analyst", call, limits)
    assert without_latency(straight) == without_latency(through_the_gate)


ARGUMENT_TEXTS = st.one_of(
    st.sampled_from(
        [
            "",
            "  ",
            "{}",
            "null",
            "[1]",
            '{"symbol": "AAPL"}',
            '{"symbol":"AAPL","qty":3}',
            '{"symbol": "AAPL", "qty": 3.5}',
            '{"symbol": "WAY-TOO-LONG"}',
            '{"symbol": "AAPL", "other": 1}',
            '{"symbol": "AAPL"',
        ]
    ),
    st.builds(
        lambda value: orjson.dumps(value).decode(),
        st.dictionaries(
            st.sampled_from(["symbol", "qty", "x"]),
            st.one_of(st.text(max_size=10), st.integers(-(2**40), 2**40), st.none()),
            max_size=3,
        ),
    ),
)


def checked(check: ArgumentCheck, tool: ManagedTool, text: str) -> object:
    answer = check(tool, text, "call_1")
    return without_latency(answer) if isinstance(answer, ToolOutcome) else answer


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), ARGUMENT_TEXTS), min_size=1, max_size=12))
def test_a_remembered_argument_text_checks_as_a_fresh_check_does(
    calls: list[tuple[bool, str]],
) -> None:
    """One check that remembers across the calls against a new check for each call: the same
    answer for every call, a text repeated for the same tool or for another build's tool of
    the same name with a stricter schema."""
    tools = {
        False: http_tool("desk", "quote", "http://127.0.0.1:9", schema=SCHEMA),
        True: http_tool("desk", "quote", "http://127.0.0.1:9", schema=STRICTER),
    }
    remembering = ArgumentCheck()
    for stricter, text in [*calls, *calls]:  # the second pass reads what the first remembered
        tool = tools[stricter]
        assert checked(remembering, tool, text) == checked(ArgumentCheck(), tool, text)
