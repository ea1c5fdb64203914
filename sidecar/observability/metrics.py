"""Prometheus metrics. Each :class:`Metrics` owns its registry, so many apps can live in one
process (tests) without colliding in the global default registry."""

from __future__ import annotations

import bisect
import collections
import itertools
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Metric,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ..model.conversation import ToolOutcome
from ..transport import ConnectionCounts

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
    """The sidecar's metrics. What changes on every request (requests answered, requests in
    flight, outbound connections, provider latency) is kept in plain numbers and read when
    ``/metrics`` is scraped: a prometheus child takes a lock and runs checks on each update, a
    measurable share of a pass-through request. The rest uses prometheus-client's types."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._tool_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.cost_usd: collections.Counter[tuple[str, str]] = collections.Counter()
        r = self.registry
        self.requests: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.inflight: collections.Counter[str] = collections.Counter()
        self.pools: dict[str, ConnectionCounts] = {}
        self.upstream_latency: dict[str, _Latencies] = {}
        r.register(_RequestPathCollector(self))
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
        self.state_write_failures = Counter(
            "claw_state_write_failures",
            "State writes that failed (the answer went out; the store lost that entry)",
            ["store"],
            registry=r,
        )
        self.approvals = Counter(
            "claw_approvals",
            "Approvals created and decided (approved, denied, expired)",
            ["event"],
            registry=r,
        )
        self.tasks = Counter(
            "claw_mcp_tasks",
            "MCP tasks on /mcp (SPEC §22): created, finished (their call answered), cancelled",
            ["event"],
            registry=r,
        )
        self.tasks_running = Gauge(
            "claw_mcp_tasks_running", "MCP tasks not finished now (working or waiting)", registry=r
        )
        self.budget_refusals = Counter(
            "claw_budget_refusals",
            "LLM requests refused because the agent's daily token budget is spent",
            ["agent"],
            registry=r,
        )
        self.budget_tokens = Counter(
            "claw_budget_tokens",
            "Tokens counted against a daily budget",
            ["agent"],
            registry=r,
        )
        self.budget_usd = Counter(
            "claw_budget_usd",
            "USD counted against a daily budget",
            ["agent"],
            registry=r,
        )
        self.shared_limits_up = Gauge(
            "claw_shared_limits_up",
            "1 while the pod's shared store of rates and budgets answers, 0 while it does not",
            ["store"],
            registry=r,
        )
        self.shared_limits_unreachable = Counter(
            "claw_shared_limits_unreachable",
            "Checks decided without the shared store: refused (fail-closed) or local (fail-local)",
            ["decision"],
            registry=r,
        )
        self.key_events = Counter(
            "claw_provider_key_events",
            "Provider keys rested (rate_limited) or taken out (key_refused), by key label",
            ["provider", "key", "event"],
            registry=r,
        )
        self.failovers = Counter(
            "claw_provider_failovers",
            "Model calls that left a target for the route's next one, by why",
            ["provider", "outcome"],
            registry=r,
        )
        self.definition_drift = Counter(
            "claw_tool_definition_drift",
            "Tools quarantined because their live definition left the build's pin",
            ["tool"],
            registry=r,
        )
        self.quarantined_tools = Gauge(
            "claw_tools_quarantined", "Tools quarantined now (definition changed)", registry=r
        )
        self.rounds = Histogram(
            "claw_tool_rounds",
            "Tool rounds per mediated request",
            buckets=ROUND_BUCKETS,
            registry=r,
        )

    def count_tool_call(self, tool: str, outcome: ToolOutcome) -> None:
        """One answered tool call, from mediated mode or MCP alike. ``tool`` is a canonical
        name from the manifest (or a fixed placeholder), never a name a runner chose."""
        label = outcome.error_code or "ok"
        children = self._tool_children.get((tool, label))
        if children is None:
            # labels() costs more than the increment: look children up once per tool/outcome.
            children = (
                self.tool_calls.labels(tool=tool, outcome=label),
                self.tool_latency.labels(tool=tool),
            )
            self._tool_children[(tool, label)] = children
        children[0].inc()
        if outcome.executed:
            children[1].observe(outcome.latency_ms / 1000)

    def count_definition_drift(self, tool: str, quarantined_now: int) -> None:
        """``tool`` is a canonical name from the manifest."""
        self.definition_drift.labels(tool=tool).inc()
        self.quarantined_tools.set(quarantined_now)

    def count_key_event(self, provider: str, key: str, event: str) -> None:
        """``key`` is the label of a key (the variable holding it), never its value."""
        self.key_events.labels(provider=provider, key=key, event=event).inc()

    def count_failover(self, provider: str, outcome: str) -> None:
        self.failovers.labels(provider=provider, outcome=outcome).inc()

    def count_cost(self, agent: str, provider: str, usd: float) -> None:
        self.cost_usd[agent, provider] += usd

    def count_request(self, agent: str, route: str, status: int) -> None:
        self.requests[agent, route, str(status)] += 1

    def observe_upstream(self, provider: str, seconds: float) -> None:
        latencies = self.upstream_latency.get(provider)
        if latencies is None:
            latencies = self.upstream_latency[provider] = _Latencies()
        latencies.observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type, for ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def connection_counts(metrics: Metrics | None, pool: str) -> ConnectionCounts:
    """New and reused connections of one outbound pool, exported as ``claw_connections``."""
    counts = ConnectionCounts()
    if metrics is not None:
        metrics.pools[pool] = counts
    return counts


class _RequestPathCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        requests = CounterMetricFamily(
            "claw_requests", "Client requests answered", labels=["agent", "route", "status"]
        )
        for labels, count in sorted(metrics.requests.items()):
            requests.add_metric(labels, count)
        inflight = GaugeMetricFamily(
            "claw_inflight_requests", "Requests in progress", labels=["route"]
        )
        for route, count in sorted(metrics.inflight.items()):
            inflight.add_metric([route], count)
        connections = CounterMetricFamily(
            "claw_connections",
            "Outbound HTTP requests by connection kind (new or reused keep-alive)",
            labels=["pool", "kind"],
        )
        for pool, counts in sorted(metrics.pools.items()):
            connections.add_metric([pool, "new"], counts.created)
            connections.add_metric([pool, "reused"], counts.reused)
        latency = HistogramMetricFamily(
            "claw_upstream_latency_seconds",
            "Latency of calls to LLM providers",
            labels=["provider"],
        )
        for provider, latencies in sorted(metrics.upstream_latency.items()):
            latency.add_metric([provider], latencies.buckets(), latencies.total)
        cost = CounterMetricFamily(
            "claw_cost_usd",
            "What model calls cost in USD at the pod's prices (SPEC §14)",
            labels=["agent", "provider"],
        )
        for labels, usd in sorted(metrics.cost_usd.items()):
            cost.add_metric(labels, usd)
        yield from (requests, inflight, connections, latency, cost)


class _Latencies:
    """A histogram over LATENCY_BUCKETS: a count per bucket, made cumulative when scraped."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        bounds = [floatToGoString(bound) for bound in LATENCY_BUCKETS] + ["+Inf"]
        return list(zip(bounds, itertools.accumulate(self.counts), strict=True))
