"""``clawc audit verify|show STATE_DIR``: check the hash chains and print readable summaries.

``verify`` checks every record's hash under the audit key (``CLAW_AUDIT_KEY``, or the variable
``--key-env`` names), the chain links, and that each log still ends where its head says; with
``--build OUT`` also that every agent of that build has its log and head.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

from clawpod.sidecar.audit.chain import (
    AUDIT_KEY_ENV,
    GENESIS,
    KEYED,
    AuditKeyError,
    audit_key,
    record_hash,
)
from clawpod.sidecar.audit.log import MAX_UNWRITTEN, head_path, read_head

MAX_PROBLEMS_PER_FILE = 20
# Exit status of a verify that gives no verdict: the chains are keyed and no key was given.
CANNOT_VERIFY = 3


@dataclass(frozen=True, slots=True)
class _Line:
    number: int
    record: dict[str, Any] | None  # None: not a JSON object (torn, edited or empty)
    complete: bool  # ended with a newline
    exact: bool  # the bytes are exactly what the log writes for this record


def _audit_files(state_dir: Path) -> list[Path]:
    return sorted((state_dir / "audit").glob("*.jsonl"))


def _orphan_heads(state_dir: Path) -> list[Path]:
    """Head files whose log is gone: the whole log of that agent was deleted."""
    heads = (state_dir / "audit").glob("*.head")
    return sorted(h for h in heads if not h.with_suffix(".jsonl").exists())


def _lines(path: Path) -> Iterator[_Line]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            complete = raw.endswith(b"\n")
            text = raw[:-1] if complete else raw
            try:
                value = orjson.loads(text)
            except orjson.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                yield _Line(number, None, complete, False)
                continue
            # Records are written as orjson renders them, so any byte-level change (even one
            # that parses to the same data, like extra whitespace) shows as a difference.
            yield _Line(number, value, complete, orjson.dumps(value) == text)


def verify_file(path: Path, key: bytes | None) -> tuple[int, list[str]]:
    """Count the records of one audit file and list every problem, naming line and record."""
    agent = path.stem
    expected_prev = GENESIS
    count = 0
    problems: list[str] = []
    # Where the head may point: the last records, or the start while the log is that short.
    recent: deque[str] = deque([GENESIS], maxlen=MAX_UNWRITTEN + 1)
    unverifiable = False
    for line in _lines(path):
        where = f"line {line.number}"
        record = line.record
        if record is None:
            state = "is truncated" if not line.complete else "is not a JSON record"
            problems.append(f"{where} {state} (torn write or edited)")
            continue
        count += 1
        where += f" (record {record.get('id', '?')})"
        stored_hash = record.get("hash")
        keyed = record.get("mac") == KEYED
        if keyed and key is None:
            unverifiable = True
        elif key is not None and not keyed:
            problems.append(f"{where}: not keyed (written without the audit key, or rewritten)")
        elif not isinstance(stored_hash, str) or record_hash(record, key) != stored_hash:
            problems.append(f"{where}: content does not match its hash (edited)")
        elif not line.exact:
            problems.append(f"{where}: bytes differ from the written record (reformatted)")
        if record.get("prev") != expected_prev:
            cause = (
                "records before it are missing"
                if expected_prev == GENESIS
                else "a record was deleted, inserted or moved before it"
            )
            problems.append(
                f"{where}: chain broken, prev does not match the record before ({cause})"
            )
        if record.get("agent") != agent:
            problems.append(f"{where}: belongs to agent {record.get('agent')!r}, not {agent!r}")
        if not line.complete:
            problems.append(f"{where}: last line has no newline (truncated)")
        gap = record.get("audit_gap")
        if isinstance(gap, dict):
            problems.append(f"{where}: {_describe_gap(gap)}")
        if isinstance(stored_hash, str):
            recent.append(stored_hash)
        # Continue from this record so one break is reported once, not on every later line.
        expected_prev = stored_hash if isinstance(stored_hash, str) else expected_prev
    if unverifiable:
        problems.insert(
            0,
            f"records are keyed: their hashes cannot be checked without the audit key "
            f"(set {AUDIT_KEY_ENV} or pass --key-env VAR)",
        )
    problems += _head_problems(path, recent, key, has_records=count > 0)
    return count, problems


def _describe_gap(gap: dict[str, Any]) -> str:
    if gap.get("head_missing"):
        return "when the sidecar started, the log had records but no head (head deleted)"
    return (
        f"when the sidecar started, records after {str(gap.get('head_was'))[:12]}... "
        "were missing from the end"
    )


def _head_problems(
    path: Path, recent: deque[str], key: bytes | None, *, has_records: bool
) -> list[str]:
    """The log must still end at the record its head names (or, after a crash between writing
    lines and head, at most one write of records later), and the head must carry the key's MAC."""
    head = read_head(path)
    if head is None:
        state = "is unreadable" if head_path(path).exists() else "is missing"
        cut = " (records may have been cut from the end)" if has_records else ""
        return [f"its head {head_path(path).name} {state}{cut}"]
    problems = []
    if key is not None and not head.valid_for(key):
        problems.append(f"its head {head_path(path).name} was not written with this key")
    if head.last not in recent:
        problems.append(
            f"the log ends before its last written record {head.last[:12]}... (records deleted)"
        )
    return problems


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
    files = _audit_files(Path(state_dir))
    if key is None and any(_is_keyed(path) for path in files):
        out.write(f"cannot verify: the chain is keyed; set {key_env}\n")
        return CANNOT_VERIFY
    orphans = _orphan_heads(Path(state_dir))
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


def _is_keyed(path: Path) -> bool:
    """The log's first record carries a MAC: its chain can be checked only with the key."""
    first = next((line.record for line in _lines(path) if line.record is not None), None)
    return first is not None and first.get("mac") == KEYED


def _build_agents(build: Path) -> list[str]:
    """The agent ids of a build directory (its digest is checked as the sidecar checks it)."""
    from clawpod.sidecar.manifest import BuildError, load_build

    try:
        return sorted(load_build(build).agents)
    except BuildError as exc:
        raise ValueError(f"cannot read the build {build}: {exc}") from exc


def show_command(
    state_dir: Path, out: TextIO, agent: str | None = None, limit: int | None = None
) -> int:
    """Print a readable summary of the last ``limit`` records of each (or one) agent."""
    files = _audit_files(Path(state_dir))
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
        records: deque[_Line] = deque(maxlen=limit) if limit else deque()
        records.extend(_lines(path))
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
    if record.get("stream"):
        parts.append("stream")
    if usage:
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
        for call in round_.get("calls") or []:
            lines.append("      " + _describe_call(round_.get("round"), call))
    return "\n".join(lines) + "\n"


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
