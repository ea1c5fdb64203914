"""JSON-lines logging on stderr.

``log_request`` is on the hot path of every request, so it skips the ``logging`` machinery:
one level check, one ``orjson.dumps``, one write.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

REQUEST_LOGGER = "claw.request"
_request_logger = logging.getLogger(REQUEST_LOGGER)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def _rfc3339(epoch: float) -> str:
    millis = int(epoch * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{millis:03d}Z"


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as one JSON object per line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's own access log would duplicate log_request's line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def log_request(**fields: Any) -> None:
    """Write one JSON line describing a finished request (agent, route, status, latency...)."""
    if not _request_logger.isEnabledFor(logging.INFO):
        return
    line = {"time": _rfc3339(time.time()), "level": "info", "logger": REQUEST_LOGGER, **fields}
    stream = sys.stderr
    stream.write(orjson.dumps(line, default=str).decode() + "\n")
