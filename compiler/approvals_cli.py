"""``clawc approvals list|approve|deny --sidecar URL``: the operator API from a shell; the
operator token comes from ``CLAW_OPERATOR_TOKEN``."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

OPERATOR_TOKEN_ENV = "CLAW_OPERATOR_TOKEN"
TIMEOUT_S = 30


class OperatorApiError(Exception):
    pass


def _call(url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method="POST" if data is not None else "GET",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = exc.reason
        raise OperatorApiError(f"the sidecar answered {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise OperatorApiError(f"cannot reach {url}: {exc}") from None


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def approvals_command(
    action: str,
    sidecar: str,
    approval_id: str | None,
    reason: str | None,
    out: TextIO,
    err: TextIO,
    env: Mapping[str, str] | None = None,
) -> int:
    token = (env if env is not None else os.environ).get(OPERATOR_TOKEN_ENV)
    if not token:
        err.write(f"clawc: error: set {OPERATOR_TOKEN_ENV} to the sidecar's operator token\n")
        return 1
    base = sidecar.rstrip("/") + "/operator/approvals"
    try:
        if action == "list":
            approvals = _call(base, token)["approvals"]
            if not approvals:
                out.write("no pending approvals\n")
            for a in approvals:
                arguments = json.dumps(a["arguments"], sort_keys=True)
                out.write(
                    f"{a['id']}  {a['status']}  {a['agent']}  {a['tool']}  {arguments}  "
                    f"expires {_when(a['expires'])}\n"
                )
            return 0
        if not approval_id:
            err.write(f"clawc: error: approvals {action} needs an approval id\n")
            return 2
        decided = _call(
            f"{base}/{approval_id}", token, {"decision": action, "reason": reason, "who": "clawc"}
        )
    except OperatorApiError as exc:
        err.write(f"clawc: error: {exc}\n")
        return 1
    out.write(f"{decided['id']}: {decided['status']}\n")
    return 0
