"""JSON-lines logging on stderr.

``log_request`` is on the hot path of every request, so it skips the ``logging`` machinery:
one level check and one ``orjson.dumps``. Inside a running event loop the lines of one loop
iteration go out in one write at its end (a write per line was a syscall per request); outside
one, each line is written at once.
"""

from __future__ import annotations

import asyncio
import atexit
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


# (second, its text): every request log line and audit record carries a timestamp, strftime is
# most of what one costs, and the text only changes once a second. A tuple swaps atomically.
_last_second: list[tuple[int, str]] = [(-1, "")]


def _rfc3339(epoch: float) -> str:
    second, millis = divmod(int(epoch * 1000), 1000)
    cached, text = _last_second[0]
    if cached != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _last_second[0] = (second, text)
    return f"{text}.{millis:03d}Z"


def rfc3339_now() -> str:
    """The current UTC time in RFC 3339 with milliseconds, e.g. ``2026-01-01T00:00:00.000Z``."""
    return _rfc3339(time.time())


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as one JSON object per line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's own access log would duplicate log_request's line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def log_request(*, stamp: str | None = None, **fields: Any) -> None:
    """Write one JSON line describing a finished request (agent, route, status, latency...);
    ``stamp`` is its time (RFC 3339) when the caller has it already."""
    log_request_fields(stamp, fields)


def log_request_fields(stamp: str | None, fields: dict[str, Any]) -> None:
    """``log_request`` with the fields in a dict: the end of every request calls this, and a
    call with a dozen keywords costs more than building the dict (~0.5 us)."""
    if not _request_logger.isEnabledFor(logging.INFO):
        return
    line = {"time": stamp or rfc3339_now(), "level": "info", "logger": REQUEST_LOGGER}
    line.update(fields)
    _pending.append(orjson.dumps(line, default=str).decode())
    if len(_pending) == 1:
        try:
            asyncio.get_running_loop().call_soon(flush_request_lines)
        except RuntimeError:  # no loop: nobody would flush later
            flush_request_lines()


_pending: list[str] = []


def flush_request_lines() -> None:
    """Write the request lines not written yet (the loop does it once per iteration)."""
    if _pending:
        text = "\n".join(_pending) + "\n"
        _pending.clear()
        sys.stderr.write(text)


atexit.register(flush_request_lines)
