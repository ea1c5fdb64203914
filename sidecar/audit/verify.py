"""An audit directory read back: its logs line by line, and each hash chain verified.

``verify_file`` checks every record's hash under the audit key, the chain links, and that the
log still ends where its head says (``clawc audit verify`` and the operator console use it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .log import (
    AUDIT_KEY_ENV,
    GENESIS,
    KEYED,
    MAX_UNWRITTEN,
    head_path,
    read_head,
    record_hash,
)


@dataclass(frozen=True, slots=True)
class LogLine:
    number: int
    record: dict[str, Any] | None  # None: not a JSON object (torn, edited or empty)
    complete: bool  # ended with a newline
    exact: bool  # the bytes are exactly what the log writes for this record


def audit_files(state_dir: Path) -> list[Path]:
    return sorted((state_dir / "audit").glob("*.jsonl"))


def orphan_heads(state_dir: Path) -> list[Path]:
    """Head files whose log is gone: the whole log of that agent was deleted."""
    heads = (state_dir / "audit").glob("*.head")
    return sorted(h for h in heads if not h.with_suffix(".jsonl").exists())


def log_lines(path: Path) -> Iterator[LogLine]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            complete = raw.endswith(b"\n")
            text = raw[:-1] if complete else raw
            try:
                value = orjson.loads(text)
            except orjson.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                yield LogLine(number, None, complete, False)
                continue
            # Records are written as orjson renders them, so any byte-level change (even one
            # that parses to the same data, like extra whitespace) shows as a difference.
            yield LogLine(number, value, complete, orjson.dumps(value) == text)


def verify_file(path: Path, key: bytes | None) -> tuple[int, list[str]]:
    """Count the records of one audit file and list every problem, naming line and record."""
    agent = path.stem
    expected_prev = GENESIS
    count = 0
    problems: list[str] = []
    # Where the head may point: the last records, or the start while the log is that short.
    recent: deque[str] = deque([GENESIS], maxlen=MAX_UNWRITTEN + 1)
    unverifiable = False
    for line in log_lines(path):
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


def is_keyed(path: Path) -> bool:
    """The log's first record carries a MAC: its chain can be checked only with the key."""
    first = next((line.record for line in log_lines(path) if line.record is not None), None)
    return first is not None and first.get("mac") == KEYED
