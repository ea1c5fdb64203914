"""``clawc audit verify|show``: check a state directory's hash chains, and print readable
summaries of its records or of running sidecars' (``show --sidecar URL``, through their operator
API, ``GET /operator/audit``, each agent's block named ``pod/agent``).

``verify`` checks every record's hash under the audit key (``CLAW_AUDIT_KEY``, or the variable
``--key-env`` names), the chain links, and that each log still ends where its head says; with
``--build OUT`` also that every agent of that build has its log and head.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson

from ..sidecar.audit.log import AuditKeyError, audit_key
from ..sidecar.audit.verify import (
    LogLine,
    audit_files,
    is_keyed,
    log_lines,
    orphan_heads,
    verify_file,
)
from ..sidecar.model.env_names import AUDIT_KEY_ENV
from .operator_api import (
    OperatorApiError,
    call,
    endpoint,
    operator_token,
    pod_of,
)

MAX_PROBLEMS_PER_FILE = 20
# Exit status of a verify that gives no verdict: the chains are keyed and no key was given.
CANNOT_VERIFY = 3


def verify_command(
    state_dir: Path,
    out: TextIO,
    *,
    build: Path | None = None,
    key_env: str = AUDIT_KEY_ENV,
    env: Mapping[str, str] | None = None,
) -> int:
    """Exit status 0 when every chain is intact, 1 when anything is wrong or nothing is found,
    ``CANNOT_VERIFY`` when the chains are keyed and the key is not given (no verdict: a
    missing key is not a tampered log)."""
    audit_dir = Path(state_dir) / "audit"
    try:
        key = audit_key(os.environ if env is None else env, key_env)
        expected = _build_agents(build) if build is not None else []
    except (AuditKeyError, ValueError) as exc:
        out.write(f"cannot verify: {exc}\n")
        return 1
    files = audit_files(Path(state_dir))
    if key is None and any(is_keyed(path) for path in files):
        out.write(f"cannot verify: the chain is keyed; set {key_env}\n")
        return CANNOT_VERIFY
    orphans = orphan_heads(Path(state_dir))
    present = {path.stem for path in files}
    missing = [agent for agent in expected if agent not in present]
    if not files and not orphans and not missing:
        out.write(f"no audit logs under {audit_dir}\n")
        return 1
    failed = bool(orphans or missing)
    for head in orphans:
        out.write(f"audit/{head.with_suffix('.jsonl').name}: missing (deleted; its head remains)\n")
    for agent in missing:
        if agent not in {head.stem for head in orphans}:
            out.write(f"audit/{agent}.jsonl: missing (agent {agent} of the build has no log)\n")
    for path in files:
        count, problems = verify_file(path, key)
        name = f"audit/{path.name}"
        if not problems:
            out.write(f"{name}: {count} records, chain intact\n")
            continue
        failed = True
        out.write(f"{name}: {count} records, {len(problems)} problem(s)\n")
        for problem in problems[:MAX_PROBLEMS_PER_FILE]:
            out.write(f"  {problem}\n")
        if len(problems) > MAX_PROBLEMS_PER_FILE:
            out.write(f"  ... and {len(problems) - MAX_PROBLEMS_PER_FILE} more\n")
    if failed:
        out.write("FAILED: the audit log was modified\n")
    elif key is None:
        out.write(f"OK (unkeyed: without {key_env}, anyone who can write the log can rewrite it)\n")
    else:
        out.write("OK\n")
    return 1 if failed else 0


def _build_agents(build: Path) -> list[str]:
    """The agent ids of a build directory (its digest is checked as the sidecar checks it)."""
    from ..sidecar.manifest import BuildError, load_build

    try:
        return sorted(load_build(build).agents)
    except BuildError as exc:
        raise ValueError(f"cannot read the build {build}: {exc}") from exc


def show_command(
    state_dir: Path,
    out: TextIO,
    agent: str | None = None,
    limit: int | None = None,
    end_user: str | None = None,
) -> int:
    """Print a readable summary of the last ``limit`` records of each (or one) agent (only
    those for ``end_user``, when given)."""
    files = audit_files(Path(state_dir))
    if agent is not None:
        files = [path for path in files if path.stem == agent]
        if not files:
            out.write(f"no audit log for agent {agent!r} under {Path(state_dir) / 'audit'}\n")
            return 1
    if not files:
        out.write(f"no audit logs under {Path(state_dir) / 'audit'}\n")
        return 1
    for path in files:
        out.write(f"== {path.stem}\n")
        records: deque[LogLine] = deque(maxlen=limit) if limit else deque()
        records.extend(
            line
            for line in log_lines(path)
            if end_user is None or (line.record or {}).get("end_user") == end_user
        )
        for line in records:
            if line.record is None:
                out.write(f"  line {line.number}: unreadable record\n")
            else:
                out.write(describe(line.record))
    return 0


def describe(record: dict[str, Any]) -> str:
    """A few lines for one record: the request, then each tool call with its latency."""
    if record.get("event"):  # not a request: something that happened to one (a failed write)
        details = (f"{k}={record[k]}" for k in ("request", "store", "error") if record.get(k))
        return "  " + "  ".join([record.get("time", "?"), record["event"], *details]) + "\n"
    outcome = record.get("outcome") or {}
    status = outcome.get("status", "?")
    if outcome.get("code"):
        status += f" {outcome['code']}"
    usage = record.get("usage") or {}
    parts = [
        record.get("time", "?"),
        record.get("route", "?"),
        f"[{record.get('mode', '?')}]",
        _model(record),
        f"{status} (http {record.get('http_status', '-')})",
    ]
    if record.get("end_user") is not None:
        parts.append(f"for {record['end_user']}")
    if record.get("stream"):
        parts.append("stream")
    if usage and called_a_model(record):
        estimated = " (estimated)" if usage.get("estimated") else ""
        parts.append(
            f"rounds={usage.get('rounds', 0)} tokens={usage.get('input_tokens', 0)}"
            f"/{usage.get('output_tokens', 0)}{estimated}"
        )
    if record.get("cost_usd") is not None:
        parts.append(f"cost=${record['cost_usd']:.6f}")
    if len(record.get("providers") or ()) > 1:  # a failover or a key change: say who answered
        parts.append("via " + " > ".join(_attempt(a) for a in record["providers"]))
    lines = ["  " + "  ".join(str(p) for p in parts if p)]
    for round_ in record.get("tool_trace") or []:
        for traced in round_.get("calls") or []:
            lines.append("      " + _describe_call(round_.get("round"), traced))
    return "\n".join(lines) + "\n"


def called_a_model(record: dict[str, Any]) -> bool:
    """Whether the request reached a model: an MCP tool call, or a request refused before it
    was routed (a spent budget), spent no tokens and names no provider."""
    usage = record.get("usage") or {}
    return bool(record.get("provider") or usage.get("input_tokens") or usage.get("output_tokens"))


def _attempt(attempt: dict[str, Any]) -> str:
    key = f"[{attempt['key']}]" if attempt.get("key") else ""
    return f"{attempt.get('provider')}{key}:{attempt.get('outcome')}"


def _model(record: dict[str, Any]) -> str:
    model = record.get("model")
    provider = record.get("provider")
    if model and provider:
        return f"{provider}/{model}"
    return str(model or "")


def _describe_call(round_number: Any, call: dict[str, Any]) -> str:
    name = call.get("name") or f"{call.get('presented')} (not a managed tool)"
    result = call.get("error_code") or "ok"
    text = f"round {round_number}: {name} -> {result}"
    if call.get("status") is not None:
        text += f" {call['status']}"
    text += f" {call.get('latency_ms', 0):.1f} ms"
    if call.get("truncated"):
        text += f" truncated from {call.get('original_bytes')} bytes"
    arguments = orjson.dumps(call.get("arguments")).decode()
    return text + f" args={arguments if len(arguments) <= 120 else arguments[:117] + '...'}"


def remote_show_command(
    sidecars: Sequence[str],
    out: TextIO,
    err: TextIO,
    agent: str | None = None,
    limit: int | None = None,
    env: Mapping[str, str] | None = None,
    end_user: str | None = None,
) -> int:
    token = operator_token(env, err)
    if token is None:
        return 1
    failed = False
    shown = 0
    for sidecar in sidecars:
        try:
            query = {"agent": agent, "limit": limit, "end_user": end_user}
            answer = call(endpoint(sidecar, "/operator/audit", query), token)
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
