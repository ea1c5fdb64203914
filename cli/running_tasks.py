"""``clawc tasks --sidecar URL [--sidecar URL ...]``: the MCP tasks not finished in one or
many pods (SPEC §22), oldest first, each row naming its pod."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from .operator_api import OperatorApiError, call, endpoint, operator_token, pod_of

TASKS = "/operator/tasks"


def _row(pod: str, task: dict[str, Any]) -> str:
    since = datetime.fromtimestamp(task["created"], UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    sent = "sent" if task.get("sent") else "not sent"
    message = f"  {task['message']}" if task.get("message") else ""
    return (
        f"{pod}  {task['id']}  {task['status']}  {task['agent']}  {task['tool']}  "
        f"since {since}  {sent}{message}\n"
    )


def tasks_command(
    sidecars: Sequence[str], out: TextIO, err: TextIO, env: Mapping[str, str] | None = None
) -> int:
    token = operator_token(env, err)
    if token is None:
        return 1
    rows: list[tuple[float, str]] = []
    failed = False
    for sidecar in sidecars:
        try:
            answer = call(endpoint(sidecar, TASKS), token)
        except OperatorApiError as exc:
            err.write(f"clawc: error: {exc}\n")
            failed = True
            continue
        pod = pod_of(sidecar, answer)
        rows += [(task["created"], _row(pod, task)) for task in answer["tasks"]]
    if not rows and not failed:
        out.write("no running tasks\n")
    for _, row in sorted(rows):
        out.write(row)
    return 1 if failed else 0
