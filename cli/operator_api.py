"""The sidecar's operator API from a shell (``clawc approvals``, ``clawc audit show --sidecar``):
one call per sidecar, the operator token from ``CLAW_OPERATOR_TOKEN``, and each answer named
after its pod so an operator of many pods reads one list."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, TextIO

from ..sidecar.model.env_names import OPERATOR_TOKEN_ENV

TIMEOUT_S = 30


class OperatorApiError(Exception):
    pass


def operator_token(env: Mapping[str, str] | None, err: TextIO) -> str | None:
    """The operator token from ``env`` (default: this process's); None, said on ``err``, when
    it is not set."""
    token = (os.environ if env is None else env).get(OPERATOR_TOKEN_ENV)
    if not token:
        err.write(f"clawc: error: set {OPERATOR_TOKEN_ENV} to the sidecars' operator token\n")
    return token or None


def call(url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    """GET (or POST ``body`` as JSON to) one operator API URL; the JSON answer."""
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
        raise OperatorApiError(f"{url} answered {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OperatorApiError(f"cannot reach {url}: {exc}") from None


def endpoint(sidecar: str, path: str, query: Mapping[str, Any] | None = None) -> str:
    wanted = {k: v for k, v in (query or {}).items() if v not in (None, "")}
    suffix = "?" + urllib.parse.urlencode(wanted) if wanted else ""
    return sidecar.rstrip("/") + path + suffix


def pod_of(sidecar: str, answer: Any) -> str:
    """The pod a sidecar serves (older sidecars do not say: then its address)."""
    pod = answer.get("pod") if isinstance(answer, dict) else None
    return str(pod) if pod else urllib.parse.urlsplit(sidecar).netloc or sidecar
