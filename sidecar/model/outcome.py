"""One managed tool call as the sidecar runs it, in both modes: the call its one argument check
admits (:class:`CheckedCall`) and the outcome it ends in (:class:`ToolOutcome`), as the model
sees it and as the audit records it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from ..manifest import Effect, ManagedTool
from .canonical import digest


@dataclass(frozen=True, slots=True)
class CheckedCall:
    """A tool call whose arguments passed its tool's input schema: what the one argument check
    (``execution/arguments.py``) makes, and what the engine, the gate and the executor read
    without checking again (issue 23: each mediated call was checked three times)."""

    tool: ManagedTool
    arguments: dict[str, Any]
    """Parsed and checked against ``tool.input_schema``; read-only from here on."""
    canonical: bytes
    """Canonical JSON of ``arguments``: the key of duplicates, approvals and Idempotency-Key."""
    effect: Effect
    """``tool.effect``: what running it does (the build's, decided by clawc)."""
    call_id: str = ""
    """The model's call id (mediated) or the JSON-RPC id (MCP)."""

    @property
    def args_digest(self) -> str:
        """What an approval names the arguments by (SPEC §9.3)."""
        return digest(self.canonical.decode())


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    envelope: dict[str, Any]
    """Exactly what the model sees: ``{"ok": true, "status", "data"}`` or
    ``{"ok": false, "error": {"code", "message"}, "status"}``, plus ``truncated`` and
    ``original_bytes`` when the service's body was cut."""
    error_code: str | None
    status: int | None
    """The service's HTTP status; None when the service was not reached."""
    executed: bool
    """True iff a request was sent to the service."""
    latency_ms: float
    truncated: bool = False
    original_bytes: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_code is None

    def envelope_json(self) -> str:
        return orjson.dumps(self.envelope).decode()


def error_envelope(code: str, message: str, status: int | None = None) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}, "status": status}


def refused(code: str, message: str) -> ToolOutcome:
    """An outcome for a call the sidecar will not run (nothing is sent to any service)."""
    return ToolOutcome(
        envelope=error_envelope(code, message),
        error_code=code,
        status=None,
        executed=False,
        latency_ms=0.0,
    )


def invalid_arguments(message: str, started: float | None = None) -> ToolOutcome:
    return ToolOutcome(
        envelope=error_envelope("invalid_arguments", message),
        error_code="invalid_arguments",
        status=None,
        executed=False,
        latency_ms=0.0 if started is None else (time.perf_counter() - started) * 1000,
    )


def answered(
    envelope: dict[str, Any],
    code: str | None,
    status: int | None,
    latency_ms: float,
    original_bytes: int,
    truncated: bool,
) -> ToolOutcome:
    """The outcome of a call its service answered; an answer cut to the result limit says so
    in the envelope the model sees."""
    if truncated:
        envelope["truncated"] = True
        envelope["original_bytes"] = original_bytes
    return ToolOutcome(
        envelope=envelope,
        error_code=code,
        status=status,
        executed=True,
        latency_ms=latency_ms,
        truncated=truncated,
        original_bytes=original_bytes if truncated else None,
    )
