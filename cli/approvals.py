"""``clawc approvals list|approve|deny --sidecar URL [--sidecar URL ...]``: approvals of one or
many pods. ``list`` prints one list, each row naming its pod; ``approve``/``deny`` find the
sidecar that holds the approval (ids are random, so exactly one does)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from .operator_api import (
    OperatorApiError,
    call,
    endpoint,
    operator_token,
    pod_of,
)

APPROVALS = "/operator/approvals"
NOT_HERE = " answered 404: "
PREVIEW_CHARS = 200  # of arguments too large to list whole


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _row(pod: str, approval: dict[str, Any]) -> str:
    if "arguments" in approval:
        arguments = json.dumps(approval["arguments"], sort_keys=True)
    else:  # too large to list whole: the sidecar sent its first bytes
        arguments = f"{approval['arguments_preview'][:PREVIEW_CHARS]}... "
        arguments += f"({approval['arguments_bytes']} bytes, digest {approval['args_digest']})"
    return (
        f"{pod}  {approval['id']}  {approval['status']}  {approval['agent']}  "
        f"{approval['tool']}  {arguments}  expires {_when(approval['expires'])}\n"
    )


def _list(sidecars: Sequence[str], token: str, out: TextIO, err: TextIO) -> int:
    rows: list[tuple[float, str]] = []
    failed = False
    for sidecar in sidecars:
        try:
            answer = call(endpoint(sidecar, APPROVALS), token)
        except OperatorApiError as exc:
            err.write(f"clawc: error: {exc}\n")
            failed = True
            continue
        pod = pod_of(sidecar, answer)
        rows += [(a["created"], _row(pod, a)) for a in answer["approvals"]]
    if not rows and not failed:
        out.write("no pending approvals\n")
    for _, row in sorted(rows):
        out.write(row)
    return 1 if failed else 0


def _decide(
    sidecars: Sequence[str],
    token: str,
    action: str,
    approval_id: str,
    reason: str | None,
    out: TextIO,
    err: TextIO,
) -> int:
    problems = []
    for sidecar in sidecars:
        url = endpoint(sidecar, f"{APPROVALS}/{approval_id}")
        try:
            decided = call(url, token, {"decision": action, "reason": reason, "who": "clawc"})
        except OperatorApiError as exc:
            if NOT_HERE not in str(exc) or len(sidecars) == 1:
                problems.append(str(exc))
            continue
        label = f"{pod_of(sidecar, decided)}: " if len(sidecars) > 1 else ""
        out.write(f"{label}{decided['id']}: {decided['status']}\n")
        return 0
    for problem in problems or [f"no sidecar holds approval {approval_id}"]:
        err.write(f"clawc: error: {problem}\n")
    return 1


def approvals_command(
    action: str,
    sidecars: Sequence[str],
    approval_id: str | None,
    reason: str | None,
    out: TextIO,
    err: TextIO,
    env: Mapping[str, str] | None = None,
) -> int:
    token = operator_token(env, err)
    if token is None:
        return 1
    if action == "list":
        return _list(sidecars, token, out, err)
    if not approval_id:
        err.write(f"clawc: error: approvals {action} needs an approval id\n")
        return 2
    return _decide(sidecars, token, action, approval_id, reason, out, err)
