"""A hostile provider of another protocol, streaming through the sidecar (contract §18):
garbage events, a stream without its end marker, a giant event, a slow drip that stalls past
the provider's deadline. The caller's real SDK gets the text that came, then an error; its
stream is well formed and ends; nothing hangs past the deadline; the audit says what failed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from clawpod.sidecar.translation.streams import MAX_EVENT_BYTES
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.support.builds import AgentSpec, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, start_sidecar
from tests.support.upstream import Reply, StubUpstream
from tests.translation.conftest import DIRECTIONS, MODEL, TranslatingPod, providers
from tests.translation.streams import EVENTS, stream_through

IDLE_TIMEOUT_MS = 1500  # the provider's deadline between two pieces of a stream
DEADLINE_S = 20  # a test that would hang fails here instead (not a timing assertion)


@pytest.fixture
async def hostile_pod(
    tmp_path: Path, upstream: StubUpstream, service: ToolService
) -> AsyncIterator[TranslatingPod]:
    agents = [AgentSpec("plain", []), AgentSpec("analyst", desk_tools(service.url))]
    root = tmp_path / "build"
    tokens = write_build(root, agents, providers(upstream), upstream_timeout_ms=IDLE_TIMEOUT_MS)
    env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
    sidecar = await start_sidecar(root, tmp_path / "state", env=env)
    yield TranslatingPod(sidecar, upstream, service, tokens, tmp_path / "state")
    await sidecar.close()


def opening(target: str) -> list[bytes]:
    """The target's stream up to and including its first text."""
    events = EVENTS[target](["AAPL ", "rest"], [], 40)
    first = next(i for i, e in enumerate(events) if b"AAPL " in e)
    return events[: first + 1]


HOSTILE = {
    "garbage": lambda target: [*opening(target), b"data: <html>\x00not json{{\n\n"],
    "no end marker": lambda target: opening(target),
    "giant event": lambda target: [
        *opening(target),
        b"data: ",
        *([b"x" * (1 << 20)] * (MAX_EVENT_BYTES // (1 << 20) + 2)),
    ],
    "slow drip": lambda target: [*opening(target), 30.0, b"data: late\n\n"],
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
@pytest.mark.parametrize(("caller", "target"), DIRECTIONS)
async def test_hostile_stream_ends_the_callers_stream_with_an_error(
    hostile_pod: TranslatingPod, caller: str, target: str, attack: str
) -> None:
    pod = hostile_pod
    pod.script(target, Reply.sse(HOSTILE[attack](target)))
    got = await asyncio.wait_for(stream_through(pod, caller, "plain", MODEL[target]), DEADLINE_S)
    assert got.deltas == ["AAPL "]
    assert got.error is not None, "the caller's SDK took a failed answer for a whole one"
    (record,) = pod.audit("plain")
    expected = "upstream_timeout" if attack == "slow drip" else "upstream_protocol_error"
    assert record["outcome"] == {"status": "error", "code": expected}


@pytest.mark.parametrize(("caller", "target"), DIRECTIONS[:2])
async def test_hostile_stream_in_a_mediated_round_fails_it_cleanly(
    hostile_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = hostile_pod
    pod.script(target, Reply.sse(HOSTILE["garbage"](target)))
    got = await asyncio.wait_for(stream_through(pod, caller, "analyst", MODEL[target]), DEADLINE_S)
    assert got.deltas == ["AAPL "]
    assert got.error is not None
    assert pod.service.requests == []


def _echoing_failure(target: str) -> bytes:
    """The provider's in-stream error, echoing the key the sidecar sent it."""
    key = TEST_PROVIDER_KEYS["ANTHROPIC_API_KEY" if target == "messages" else "OPENAI_API_KEY"]
    error = {"type": "invalid_request_error", "message": f"invalid api key {key}"}
    if target == "chat":
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n"
    if target == "messages":
        return _sse_event("error", {"error": error})
    failed = {"id": "resp_up", "status": "failed", "error": {"code": key, **error}}
    return _sse_event("response.failed", {"response": failed})


def _sse_event(kind: str, payload: dict[str, Any]) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **payload}) + b"\n\n"
    )


@pytest.mark.parametrize(("caller", "target"), DIRECTIONS)
async def test_a_key_the_provider_echoes_in_its_stream_error_never_reaches_the_caller(
    translating_pod: TranslatingPod, caller: str, target: str
):
    """A pass-through stream's error events are redacted (``StreamRedactor``); a translated
    stream's failure is told in the caller's protocol from the provider's message, which may
    echo the key: it is told without it."""
    pod = translating_pod
    pod.script(target, Reply.sse([*opening(target), _echoing_failure(target)]))
    got = await stream_through(pod, caller, "plain", MODEL[target])
    assert got.error is not None
    assert "invalid api key [redacted]" in str(got.error)
    for key in TEST_PROVIDER_KEYS.values():
        assert key not in str(got.error)
