"""Prometheus metrics and JSON logs of the sidecar."""
