"""``clawc audit show --sidecar URL [--sidecar URL ...]``: the newest audit records of running
sidecars through their operator API (``GET /operator/audit``), each agent's block named
``pod/agent``, printed as ``clawc audit show STATE_DIR`` prints a local log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TextIO

from clawpod.compiler.operator_client import (
    OperatorApiError,
    call,
    endpoint,
    operator_token,
    pod_of,
)
from clawpod.sidecar.audit.cli import describe


def remote_show_command(
    sidecars: Sequence[str],
    out: TextIO,
    err: TextIO,
    agent: str | None = None,
    limit: int | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    token = operator_token(env, err)
    if token is None:
        return 1
    failed = False
    shown = 0
    for sidecar in sidecars:
        try:
            answer = call(
                endpoint(sidecar, "/operator/audit", {"agent": agent, "limit": limit}), token
            )
        except OperatorApiError as exc:
            err.write(f"clawc: error: {exc}\n")
            failed = True
            continue
        pod = pod_of(sidecar, answer)
        for agent_id, records in answer["agents"].items():
            shown += 1
            out.write(f"== {pod}/{agent_id}\n")
            for record in reversed(records):  # the API sends newest first; print in order
                out.write(describe(record))
    if not shown and not failed:
        out.write("no audit records" + (f" for agent {agent!r}" if agent else "") + "\n")
        return 1
    return 1 if failed else 0
