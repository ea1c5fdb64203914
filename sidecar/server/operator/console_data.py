"""What the operator console and ``GET /operator/audit`` show, read from a running sidecar's
state: audit records (newest first, filtered), each chain's verification, budgets, rate
limits, quarantined tools and health. Plain data; the pages render it."""

from __future__ import annotations

import fnmatch
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ...audit.verify import verify_file
from ..request.context import SidecarState

# Only the end of a log is read for a page: the newest records are the ones an operator asks
# about, and a log can be far larger than a page should cost.
AUDIT_TAIL_BYTES = 4 * 1024 * 1024
MAX_RECORDS = 500
DEFAULT_RECORDS = 50
# The end users the limits page lists, by spending; the rest are counted.
TOP_END_USERS = 50
GLOB_CHARACTERS = frozenset("*?[")
MAX_VERIFIED_BYTES = 64 * 1024 * 1024  # about a second of one core


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which records to show; empty fields match everything. Times are UTC prefixes of
    RFC 3339 (``2026-11-25T20:45``), compared as text like the records store them."""

    agent: str = ""
    tool: str = ""
    outcome: str = ""
    end_user: str = ""
    """The end user a request was for (its record's ``end_user``, exactly: SPEC §21)."""
    since: str = ""
    until: str = ""
    limit: int = DEFAULT_RECORDS

    @classmethod
    def from_query(cls, query: Any) -> AuditFilter:
        def text(name: str) -> str:
            return str(query.get(name, "")).strip()[:200]

        try:
            limit = int(query.get("limit", DEFAULT_RECORDS))
        except ValueError:
            limit = DEFAULT_RECORDS
        return cls(
            agent=text("agent"),
            tool=text("tool"),
            outcome=text("outcome"),
            end_user=text("end_user"),
            since=text("since"),
            until=text("until"),
            limit=max(1, min(limit, MAX_RECORDS)),
        )

    def matches(self, record: dict[str, Any]) -> bool:
        stamp = str(record.get("time", ""))
        if self.since and stamp < self.since:
            return False
        if self.until and stamp[: len(self.until)] > self.until:
            return False
        if self.outcome and self.outcome not in outcome_words(record):
            return False
        if self.end_user and record.get("end_user") != self.end_user:
            return False
        return not self.tool or any(self._tool_matches(name) for name in tool_names(record))

    def _tool_matches(self, name: str) -> bool:
        if GLOB_CHARACTERS & set(self.tool):
            return fnmatch.fnmatchcase(name, self.tool)
        return self.tool in name


def outcome_words(record: dict[str, Any]) -> set[str]:
    """What an outcome filter can name: ``ok``/``error``, an error code, an event's name."""
    if record.get("event"):
        return {str(record["event"])}
    outcome = record.get("outcome") or {}
    return {str(outcome.get("status")), str(outcome.get("code"))} - {"None"}


def tool_names(record: dict[str, Any]) -> list[str]:
    names = [str(record["tool"])] if record.get("tool") else []
    for round_ in record.get("tool_trace") or []:
        for call in round_.get("calls") or []:
            names.append(str(call.get("name") or call.get("presented") or ""))
    return names


def audit_dir(state: SidecarState) -> Path:
    return state.state_dir / "audit"


def audited_agents(state: SidecarState) -> list[str]:
    return sorted(path.stem for path in audit_dir(state).glob("*.jsonl"))


def tail_records(path: Path, max_bytes: int = AUDIT_TAIL_BYTES) -> list[dict[str, Any]]:
    """The records in the last ``max_bytes`` of a log, oldest first (a torn line is skipped:
    verification reports it)."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read(size - start)
    except OSError:
        return []
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # begins mid-record
    records = []
    for line in lines:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def recent_records(state: SidecarState, wanted: AuditFilter) -> dict[str, list[dict[str, Any]]]:
    """Per agent, the newest ``wanted.limit`` records that match, newest first."""
    agents = audited_agents(state)
    if wanted.agent:
        agents = [agent for agent in agents if agent == wanted.agent]
    found = {}
    for agent in agents:
        records = tail_records(audit_dir(state) / f"{agent}.jsonl")
        matching = [record for record in reversed(records) if wanted.matches(record)]
        found[agent] = matching[: wanted.limit]
    return found


@dataclass(frozen=True, slots=True)
class ChainState:
    agent: str
    records: int
    problems: list[str]
    checked_at: float
    too_large: bool = False  # not checked on the page: ``clawc audit verify`` checks it


class ChainChecks:
    """Each agent's whole chain checked under the sidecar's audit key, as the audit page shows
    it. A check reads every record (about 15 ms of CPU per MiB, measured), so a result is
    reused while the log is unchanged, one check runs at a time, and a log past
    ``max_bytes`` is left to ``clawc audit verify``: page views must not starve the agents."""

    def __init__(self, max_bytes: int = MAX_VERIFIED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._done: dict[Path, tuple[tuple[int, int], ChainState]] = {}
        self._lock = threading.Lock()

    def check(self, state: SidecarState, agents: list[str]) -> list[ChainState]:
        """Run in a thread."""
        with self._lock:
            return [self._check(state, agent) for agent in agents]

    def _check(self, state: SidecarState, agent: str) -> ChainState:
        path = audit_dir(state) / f"{agent}.jsonl"
        try:
            stat = path.stat()
        except OSError:
            return ChainState(agent, 0, ["the log is missing"], time.time())
        if stat.st_size > self.max_bytes:
            return ChainState(agent, 0, [], time.time(), too_large=True)
        version = (stat.st_size, stat.st_mtime_ns)
        known = self._done.get(path)
        if known is not None and known[0] == version:
            return known[1]
        count, problems = verify_file(path, state.audit.key)
        checked = ChainState(agent, count, problems, time.time())
        self._done[path] = (version, checked)
        return checked


async def budgets(state: SidecarState) -> list[dict[str, Any]]:
    """Per budget (an agent's, or a group's ``group:NAME``): tokens and dollars, each as limit,
    spent today and left (None where it has no such budget). Read from the pod's counters: the
    shared store's when the pod has one (SPEC §24), so every pod sharing it shows the same."""
    rows = []
    for budget in await state.budgets.today():
        claim, spent_tokens, spent_usd = budget["claim"], budget["tokens"], budget["usd"]
        tokens, usd = claim.tokens, claim.usd
        rows.append(
            {
                "agent": budget["subject"],
                "limit": tokens,
                "spent": None if tokens is None else spent_tokens,
                "remaining": None if tokens is None else max(0, tokens - spent_tokens),
                "usd_limit": usd,
                "usd_spent": None if usd is None else round(spent_usd, 6),
                "usd_remaining": None if usd is None else round(max(0.0, usd - spent_usd), 6),
            }
        )
    return rows


async def end_users(state: SidecarState) -> dict[str, Any] | None:
    """Without ``end-user-limits``: None. Else each end user's limits, the ``TOP_END_USERS``
    spending most today (tokens and USD spent and left, the requests their rate has left now:
    None while untouched, i.e. full) and how many more there are. Raises
    ``SharedLimitsUnavailable``."""
    limits = state.budgets.end_user_limits
    if limits is None:
        return None
    tokens, usd = limits.tokens_per_day, limits.usd_per_day
    rows, more = await state.budgets.end_users_today(TOP_END_USERS)
    for row in rows:
        row["tokens_left"] = None if tokens is None else max(0, tokens - row["tokens"])
        row["usd_left"] = None if usd is None else round(max(0.0, usd - row["usd"]), 6)
        row["usd"] = round(row["usd"], 6)
        left = row["requests_left"]
        row["requests_left"] = None if left is None else int(left)
    rate = limits.requests
    return {
        "tokens": tokens,
        "usd": usd,
        "rate": None if rate is None else f"{rate.count}/{rate.per}",
        "top": rows,
        "more": more,
    }


def rate_limits(state: SidecarState) -> list[dict[str, Any]]:
    """Every rule with a ``rate``, and the calls each (agent, tool) it has counted may make
    now."""
    governance = state.config.governance
    if governance is None:
        return []
    levels = state.governed.rates.levels()
    rows = []
    for agent, rules in sorted(governance.rules.items()):
        for index, rule in enumerate(rules):
            if rule.rate is None:
                continue
            tools = {
                tool: round(level, 2)
                for (who, tool, number), level in sorted(levels.items())
                if who == agent and number == index
            }
            rows.append(
                {
                    "agent": agent,
                    "tool": rule.tool,
                    "when": rule.when,
                    "rate": f"{rule.rate.count}/{rule.rate.per}",
                    "source": rule.source,
                    "available": tools,
                }
            )
    return rows


def health(state: SidecarState) -> dict[str, Any]:
    drift = state.drift.report()
    return {
        "pod": state.config.pod,
        "state_dir_writable": os.access(state.state_dir, os.W_OK),
        "audit_keyed": state.audit.key is not None,
        "open_approvals": len(state.governed.approvals.listing()),
        "running_tasks": state.mcp.dispatch.native_tasks.overview(),
        "webhook": state.governed.webhook.url if state.governed.webhook else None,
        "mcp_backends": drift["mcp_backends"],
        "quarantined": drift["quarantined"],
    }
