"""Hash-chained JSONL audit log of every client request and tool call."""

from clawpod.sidecar.audit.log import AuditLog
from clawpod.sidecar.audit.trace import trace_call

__all__ = ["AuditLog", "trace_call"]
