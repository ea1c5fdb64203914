"""Drift detection for MCP backends (§11.2): at start and every ``ttl`` each MCP service's tool
list is fetched and every granted tool's live definition compared with the pin the build
recorded. A tool that changed (or vanished) is quarantined, audited, counted and reported; one
that matches its pin again is released."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..audit.log import AuditLog, request_record
from ..manifest import (
    DEFAULT_MCP_TTL_MS,
    QUARANTINE_FILE,
    AgentBuild,
    definition_pin,
    dump_json,
)
from ..observability.metrics import Metrics
from .http import RequestProblem
from .mcp import LIST_TIMEOUT_S, BackendKey, McpBackends
from .quarantine import REFUSAL_CODE, Quarantine, may_drift

if TYPE_CHECKING:
    import mcp_types as types

log = logging.getLogger(__name__)

AUDIT_ROUTE = "(tool-definitions)"


@dataclass(slots=True)
class _PinnedTool:
    canonical: str
    pin: str
    agents: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Backend:
    """One MCP endpoint (with one credential) and the pinned tools granted from it."""

    service: str
    key: BackendKey
    ttl_s: float
    tools: dict[str, _PinnedTool] = field(default_factory=dict)  # by the service's tool name
    due: float = 0.0
    checked_at: str | None = None
    status: str = "not checked yet"


def _live_pin(tool: types.Tool) -> str:
    annotations = (
        tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
        if tool.annotations is not None
        else {}
    )
    return definition_pin(tool.name, tool.description, tool.input_schema, annotations)


class DriftChecker:
    def __init__(
        self,
        agents: Mapping[str, AgentBuild],
        backends: McpBackends,
        quarantine: Quarantine,
        audit: AuditLog,
        metrics: Metrics,
        state_dir: Path,
    ) -> None:
        self._backends = backends
        self._quarantine = quarantine
        self._audit = audit
        self._metrics = metrics
        self._state_dir = state_dir
        self._groups = self._group(agents, backends)
        self._saved = False

    @staticmethod
    def _group(agents: Mapping[str, AgentBuild], backends: McpBackends) -> list[_Backend]:
        groups: dict[BackendKey, _Backend] = {}
        for agent_id, agent in agents.items():
            for tool in agent.tools.tools:
                execution = tool.execution
                # A service reached only on behalf of end users lists its tools only to one,
                # and the check has none: its tools are not drift-checked (docs/security.md).
                if not may_drift(tool) or tool.execution.auth.type == "token-exchange":
                    continue
                try:
                    key = backends.key_for(execution, tool)
                except RequestProblem:
                    continue  # no credential configured: every call fails with credential_missing
                ttl_s = (execution.ttl_ms or DEFAULT_MCP_TTL_MS) / 1000
                group = groups.setdefault(key, _Backend(execution.service, key, ttl_s))
                group.ttl_s = min(group.ttl_s, ttl_s)
                pinned = group.tools.setdefault(
                    execution.tool or "", _PinnedTool(tool.name, tool.pin)
                )
                pinned.agents.add(agent_id)
        return list(groups.values())

    # -- checking ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Check each backend whenever its ttl has passed, until cancelled (at shutdown)."""
        while self._groups:
            await self.check_due()
            next_due = min(group.due for group in self._groups)
            await asyncio.sleep(max(0.05, next_due - time.monotonic()))

    async def check_due(self) -> None:
        now = time.monotonic()
        due = [group for group in self._groups if group.due <= now]
        changed = await asyncio.gather(*(self._check(group) for group in due))
        if any(changed) or not self._saved:
            self._save()

    async def _check(self, group: _Backend) -> bool:
        """Check one backend; True when a quarantine began or ended."""
        group.due = time.monotonic() + group.ttl_s
        group.checked_at = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            async with asyncio.timeout(LIST_TIMEOUT_S):
                listed = await self._backends.list_tools(group.key)
        except Exception as exc:  # the service is down or broken: keep what we knew
            group.status = f"unreachable: {type(exc).__name__}"
            log.warning("cannot list the tools of %s: %s", group.service, exc)
            await self._backends.forget(group.key)
            return False
        group.status = "checked"
        live = {tool.name: _live_pin(tool) for tool in listed}
        changes = False
        for name, pinned in group.tools.items():
            now_pin = live.get(name)
            if now_pin is None:
                changes |= await self._hold(pinned, "no longer listed by the service", None)
            elif now_pin != pinned.pin:
                reason = "description, schema or annotations changed"
                changes |= await self._hold(pinned, reason, now_pin)
            elif self._quarantine.release(pinned.canonical):
                changes = True
                log.warning("%s matches its pin again: released", pinned.canonical)
                await self._record(pinned, "released", None, now_pin)
        self._metrics.quarantined_tools.set(len(self._quarantine.reasons()))
        return changes

    async def _hold(self, pinned: _PinnedTool, reason: str, live_pin: str | None) -> bool:
        if not self._quarantine.hold(pinned.canonical, reason):
            return False
        log.warning("%s quarantined: %s", pinned.canonical, reason)
        self._metrics.count_definition_drift(pinned.canonical, len(self._quarantine.reasons()))
        await self._record(pinned, "quarantined", reason, live_pin)
        return True

    async def _record(
        self, pinned: _PinnedTool, action: str, reason: str | None, live_pin: str | None
    ) -> None:
        record = request_record(
            record_id="drift_" + uuid.uuid4().hex,
            route=AUDIT_ROUTE,
            mode="sidecar",
            http_status=0,
            stream=False,
            error_code=REFUSAL_CODE if action == "quarantined" else None,
        )
        record["tool_definition"] = {
            "tool": pinned.canonical,
            "action": action,
            "reason": reason,
            "pinned": pinned.pin,
            "live": live_pin,
        }
        for agent_id in sorted(pinned.agents):
            try:
                await self._audit.append(agent_id, record)
            except OSError:
                log.exception("drift audit record for %s could not be written", agent_id)

    def _save(self) -> None:
        path = self._state_dir / QUARANTINE_FILE
        try:
            path.write_text(dump_json({"quarantined": self._quarantine.reasons()}))
            self._saved = True
        except OSError:
            log.exception("cannot write %s", path)

    # -- reporting -----------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """What ``/readyz`` shows: each MCP backend's last check and the quarantined tools."""
        return {
            "mcp_backends": [
                {"service": g.service, "checked_at": g.checked_at, "status": g.status}
                for g in self._groups
            ],
            "quarantined": self._quarantine.reasons(),
        }
