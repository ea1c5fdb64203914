"""``clawc audit verify|show STATE_DIR``: check the hash chains and print readable summaries."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

from clawpod.sidecar.audit.log import GENESIS, MAX_UNWRITTEN, read_head, record_hash

MAX_PROBLEMS_PER_FILE = 20


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


def verify_file(path: Path) -> tuple[int, list[str]]:
    """Count the records of one audit file and list every problem, naming line and record."""
    agent = path.stem
    expected_prev = GENESIS
    count = 0
    problems: list[str] = []
    recent: deque[str] = deque(maxlen=MAX_UNWRITTEN + 1)  # where the head may point
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
        if not isinstance(stored_hash, str) or record_hash(record) != stored_hash:
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
        if isinstance(record.get("audit_gap"), dict):
            problems.append(
                f"{where}: when the sidecar started, records after "
                f"{str(record['audit_gap'].get('head_was'))[:12]}... were missing from the end"
            )
        if isinstance(stored_hash, str):
            recent.append(stored_hash)
        # Continue from this record so one break is reported once, not on every later line.
        expected_prev = stored_hash if isinstance(stored_hash, str) else expected_prev
    problems += _head_problems(path, recent)
    return count, problems


def _head_problems(path: Path, recent: deque[str]) -> list[str]:
    """The log must still end at the record its head names (or, after a crash between writing
    lines and head, at most one write of records later)."""
    head = read_head(path)
    if head is None or head in recent:
        return []
    return [f"the log ends before its last written record {head[:12]}... (records deleted)"]


def verify_command(state_dir: Path, out: TextIO) -> int:
    """Exit status 0 when every chain is intact, 1 when anything is wrong or nothing is found."""
    files = _audit_files(Path(state_dir))
    orphans = _orphan_heads(Path(state_dir))
    if not files and not orphans:
        out.write(f"no audit logs under {Path(state_dir) / 'audit'}\n")
        return 1
    failed = bool(orphans)
    for head in orphans:
        out.write(f"audit/{head.with_suffix('.jsonl').name}: missing (deleted; its head remains)\n")
    for path in files:
        count, problems = verify_file(path)
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
    out.write("FAILED: the audit log was modified\n" if failed else "OK\n")
    return 1 if failed else 0


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
        parts.append(
            f"rounds={usage.get('rounds', 0)} tokens={usage.get('input_tokens', 0)}"
            f"/{usage.get('output_tokens', 0)}"
        )
    lines = ["  " + "  ".join(str(p) for p in parts if p)]
    for round_ in record.get("tool_trace") or []:
        for call in round_.get("calls") or []:
            lines.append("      " + _describe_call(round_.get("round"), call))
    return "\n".join(lines) + "\n"


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
