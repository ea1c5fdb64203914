"""Hash-chained JSONL audit log of every client request and tool call."""

from sidecar.audit.log import AuditLog
from sidecar.audit.trace import trace_call

__all__ = ["AuditLog", "trace_call"]
