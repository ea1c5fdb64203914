"""Metrics registries per app and one JSON log line per request."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from clawpod.sidecar.observability.logs import configure_logging, log_request
from clawpod.sidecar.observability.metrics import Metrics


def test_each_metrics_instance_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.count_request("a", "/mcp", 200)
    first.rounds.observe(2)
    first.inflight["/mcp"] += 1
    assert (
        first.registry.get_sample_value(
            "claw_requests_total", {"agent": "a", "route": "/mcp", "status": "200"}
        )
        == 1
    )
    assert (
        second.registry.get_sample_value(
            "claw_requests_total", {"agent": "a", "route": "/mcp", "status": "200"}
        )
        is None
    )
    body, content_type = first.render()
    assert content_type.startswith("text/plain; version=")
    text = body.decode()
    for name in (
        "claw_requests_total",
        "claw_upstream_latency_seconds",
        "claw_tool_calls_total",
        "claw_tool_latency_seconds",
        "claw_tool_rounds",
        "claw_inflight_requests",
        "claw_connections_total",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text
    assert "_created" not in text


@pytest.fixture(autouse=True)
def restore_root_logger():
    """configure_logging replaces the root handlers; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_log_request_writes_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO")
    log_request(agent="trader", route="/mcp", status=200, latency_ms=1.5)
    logging.getLogger("sidecar.test").warning("disk %s", "almost full")
    lines = capsys.readouterr().err.splitlines()
    request, warning = (orjson.loads(line) for line in lines)
    assert request["logger"] == "claw.request" and request["agent"] == "trader"
    assert request["status"] == 200 and request["time"].endswith("Z")
    assert warning["level"] == "warning" and warning["message"] == "disk almost full"


def test_request_lines_follow_the_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("WARNING")
    log_request(agent="trader", route="/mcp", status=200)
    assert capsys.readouterr().err == ""


async def test_request_lines_of_one_loop_iteration_go_out_in_one_write(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("INFO")
    for n in range(3):
        log_request(agent="trader", route="/mcp", status=200, n=n)
    assert capsys.readouterr().err == "", "written at the end of the loop iteration"
    await asyncio.sleep(0)
    lines = capsys.readouterr().err.splitlines()
    assert [orjson.loads(line)["n"] for line in lines] == [0, 1, 2]


def test_upstream_latency_is_a_cumulative_histogram() -> None:
    metrics = Metrics()
    for seconds in (0.001, 0.0011, 0.3, 500):  # on a bound, just past it, mid-range, past all
        metrics.observe_upstream("openai", seconds)

    def bucket(le: str) -> float | None:
        return metrics.registry.get_sample_value(
            "claw_upstream_latency_seconds_bucket", {"provider": "openai", "le": le}
        )

    assert (bucket("0.001"), bucket("0.0025"), bucket("0.5"), bucket("120.0")) == (1, 2, 3, 3)
    assert bucket("+Inf") == 4
    total = metrics.registry.get_sample_value(
        "claw_upstream_latency_seconds_sum", {"provider": "openai"}
    )
    assert total == pytest.approx(500.3021)
