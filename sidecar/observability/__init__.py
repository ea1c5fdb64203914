"""Prometheus metrics and JSON logs of the sidecar."""

from clawpod.sidecar.observability.logs import configure_logging, log_request
from clawpod.sidecar.observability.metrics import Metrics, connection_counts

__all__ = ["Metrics", "configure_logging", "connection_counts", "log_request"]
