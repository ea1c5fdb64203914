"""The governed gate over a running executor, with its state in a test's directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from clawpod.sidecar.audit.log import AuditLog
from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.governance.gate import GovernedExecutor
from clawpod.sidecar.manifest import AgentBuild
from clawpod.sidecar.observability.metrics import Metrics
from clawpod.sidecar.state.approvals import ApprovalStore
from clawpod.sidecar.tasks import ShieldedTasks

AUDIT_KEY = b"gate-test-audit-key-0123456789ab"


def governed(
    executor: ToolExecutor, metrics: Metrics, agents: Mapping[str, AgentBuild], state_dir: Path
) -> GovernedExecutor:
    """A gate with no governance settings: only the grants and each tool's own marks apply."""
    return GovernedExecutor(
        executor,
        None,
        agents,
        ApprovalStore(state_dir),
        manifest_digest="0" * 64,
        audit=AuditLog(state_dir, key=AUDIT_KEY),
        metrics=metrics,
        tasks=ShieldedTasks(),
    )
