"""Prometheus metrics. Each :class:`Metrics` owns its registry, so many apps can live in one
process (tests) without colliding in the global default registry."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from sidecar.transport import ConnectionCounts

# The *_created series double the exposition size and no dashboard of ours reads them.
disable_created_metrics()

# Loopback services and providers answer in milliseconds to minutes; one bucket set covers both.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)
ROUND_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 32)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter(
            "claw_requests", "Client requests answered", ["agent", "route", "status"], registry=r
        )
        self.upstream_latency = Histogram(
            "claw_upstream_latency_seconds",
            "Latency of calls to LLM providers",
            ["provider"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter(
            "claw_tool_calls",
            "Tool calls by outcome (ok or error code)",
            ["tool", "outcome"],
            registry=r,
        )
        self.tool_latency = Histogram(
            "claw_tool_latency_seconds",
            "Latency of tool calls, including refused ones",
            ["tool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rounds = Histogram(
            "claw_tool_rounds",
            "Tool rounds per mediated request",
            buckets=ROUND_BUCKETS,
            registry=r,
        )
        self.inflight = Gauge(
            "claw_inflight_requests", "Requests in progress", ["route"], registry=r
        )
        self.connections = Counter(
            "claw_connections",
            "Outbound HTTP requests by connection kind (new or reused keep-alive)",
            ["pool", "kind"],
            registry=r,
        )

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type, for ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def connection_counts(metrics: Metrics | None, pool: str) -> ConnectionCounts:
    """New and reused connections of one outbound pool, mirrored to ``claw_connections``."""
    if metrics is None:
        return ConnectionCounts()
    return ConnectionCounts(
        metrics.connections.labels(pool=pool, kind="new"),
        metrics.connections.labels(pool=pool, kind="reused"),
    )
