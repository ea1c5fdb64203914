"""Issue 14 finding 4: the chain is keyed (contract §10), its head is not optional, and verify with
``--build`` knows which logs must exist."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
from pathlib import Path

import orjson
import pytest

from clawpod.cli.clawc import main as clawc
from clawpod.sidecar.audit.log import (
    AuditKeyError,
    AuditLog,
    AuditStateError,
    audit_key,
    head_line,
    record_hash,
)
from tests.audit.test_audit import KEY, KEY_ENV, lines_of, request_record, verify, write_lines
from tests.support.builds import AgentSpec, providers_for, write_build


async def write_records(state: Path, count: int, agent: str = "analyst") -> list[dict]:
    log = AuditLog(state, key=KEY)
    records = [await log.append(agent, request_record(n)) for n in range(count)]
    await log.close()
    return records


def rehashed(records: list[dict], key: bytes | None) -> list[bytes]:
    """The chain rewritten consistently, as an editor would: every prev and hash recomputed."""
    lines, prev = [], "0" * 64
    for record in records:
        forged = {k: v for k, v in record.items() if k != "hash"}
        forged["prev"] = prev
        forged["hash"] = prev = record_hash(forged, key)
        lines.append(orjson.dumps(forged) + b"\n")
    return lines


@pytest.mark.parametrize("forger_key", [None, b"a-guessed-key-that-is-not-it"])
async def test_a_consistent_rehash_after_an_edit_fails_without_the_key(
    tmp_path: Path, forger_key: bytes | None
) -> None:
    records = await write_records(tmp_path, 4)
    edited = [dict(r) for r in records]
    edited[1]["model"] = "gpt-4o-mini"
    if forger_key is None:
        for record in edited:
            record.pop("mac")  # passing the records off as unkeyed
    lines = rehashed(edited, forger_key)
    write_lines(tmp_path, lines)
    head = orjson.loads(lines[-1])["hash"]
    (tmp_path / "audit" / "analyst.head").write_bytes(head_line(head, forger_key))
    code, report = verify(tmp_path)
    assert code == 1
    expected = "not keyed" if forger_key is None else "content does not match its hash"
    assert report.count(expected) == 4
    assert "was not written with this key" in report


async def test_cutting_the_end_and_deleting_the_head_fails_verify_and_start(
    tmp_path: Path,
) -> None:
    await write_records(tmp_path, 6)
    write_lines(tmp_path, lines_of(tmp_path)[:3])
    (tmp_path / "audit" / "analyst.head").unlink()
    code, report = verify(tmp_path)
    assert code == 1 and "its head analyst.head is missing (records may have been cut" in report
    with pytest.raises(AuditStateError, match=r"analyst\.jsonl has records but its head"):
        AuditLog(tmp_path, key=KEY)


async def test_a_cut_log_cannot_be_given_a_matching_head_without_the_key(tmp_path: Path) -> None:
    records = await write_records(tmp_path, 6)
    write_lines(tmp_path, lines_of(tmp_path)[:3])
    head = tmp_path / "audit" / "analyst.head"
    head.write_bytes(head_line(records[2]["hash"], b"a-guessed-key-that-is-not-it"))
    code, report = verify(tmp_path)
    assert code == 1 and "was not written with this key" in report
    with pytest.raises(AuditStateError, match="with another key"):
        AuditLog(tmp_path, key=KEY)


async def test_verify_without_the_key_does_not_pass_a_keyed_log(tmp_path: Path) -> None:
    await write_records(tmp_path, 2)
    code, report = verify(tmp_path, env={})
    # No verdict, and no false tamper alarm: its own status and what to do.
    assert (code, report) == (3, "cannot verify: the chain is keyed; set CLAW_AUDIT_KEY\n")
    code, report = verify(tmp_path, env={"OTHER": KEY.decode()}, key_env="OTHER")
    assert (code, report) == (0, "audit/analyst.jsonl: 2 records, chain intact\nOK\n")


def test_a_short_key_is_refused() -> None:
    with pytest.raises(AuditKeyError, match="too short"):
        audit_key({"CLAW_AUDIT_KEY": "short"})
    assert audit_key({}) is None and audit_key({"CLAW_AUDIT_KEY": ""}) is None


def _build(root: Path, *agents: str) -> Path:
    write_build(root, [AgentSpec(a) for a in agents], providers_for("http://127.0.0.1:9"))
    return root


async def test_every_agent_of_the_build_has_a_log_and_head_from_the_start(tmp_path: Path) -> None:
    build = _build(tmp_path / "build", "alpha", "beta")
    log = AuditLog(tmp_path, key=KEY, agents=["alpha", "beta"])
    await log.append("alpha", request_record(1))
    await log.close()
    assert (tmp_path / "audit" / "beta.jsonl").read_bytes() == b""
    assert verify(tmp_path, build=build)[0] == 0
    for name in ("alpha.jsonl", "alpha.head"):
        (tmp_path / "audit" / name).unlink()  # a log and its head deleted together
    code, report = verify(tmp_path, build=build)
    assert code == 1
    assert "audit/alpha.jsonl: missing (agent alpha of the build has no log)" in report
    assert verify(tmp_path)[0] == 0  # without --build nothing says alpha ever existed


async def test_an_empty_log_whose_records_were_all_cut_is_found(tmp_path: Path) -> None:
    await write_records(tmp_path, 2)
    write_lines(tmp_path, [])
    code, report = verify(tmp_path)
    assert code == 1 and "records deleted" in report


async def test_clawc_audit_verify_takes_build_and_key_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = _build(tmp_path / "build", "analyst", "trader")
    await write_records(tmp_path / "state", 2)
    monkeypatch.setenv("MY_AUDIT_KEY", KEY.decode())
    arguments = ["audit", "verify", str(tmp_path / "state"), "--key-env", "MY_AUDIT_KEY"]
    out = io.StringIO()
    assert clawc(arguments, stdout=out, stderr=out) == 0, out.getvalue()
    out = io.StringIO()
    assert clawc([*arguments, "--build", str(build)], stdout=out, stderr=out) == 1
    assert "agent trader of the build has no log" in out.getvalue()
    assert KEY_ENV["CLAW_AUDIT_KEY"] not in out.getvalue()


async def test_a_record_hash_is_plain_hmac_sha256_of_its_sorted_compact_json(
    tmp_path: Path,
) -> None:
    """What the contract names, so any HMAC tool can check a record (the log computes it with
    OpenSSL's one-shot HMAC, verify likewise: both must stay the standard one)."""
    records = await write_records(tmp_path, 2)
    for record, line in zip(records, lines_of(tmp_path), strict=True):
        stored = orjson.loads(line)
        assert stored == record
        body = {k: v for k, v in stored.items() if k != "hash"}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        expected = hmac.new(KEY, canonical.encode(), hashlib.sha256).hexdigest()
        assert stored["hash"] == expected
