"""The keyed, hash-chained audit log, its verifier and its summary (docs/contract.md §5, §10)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawpod.cli.audit import show_command, verify_command
from clawpod.sidecar.audit.log import (
    GENESIS,
    MAX_UNWRITTEN,
    AuditLog,
    head_line,
    record_hash,
    trace_call,
)
from clawpod.sidecar.model.conversation import ToolOutcome, refused
from tests.support.builds import http_tool

KEY = b"audit-test-key-0123456789abcdef"
KEY_ENV = {"CLAW_AUDIT_KEY": KEY.decode()}
TOOL = http_tool("trading-api", "execute_trade", "http://trading-api:4000", method="POST")


def request_record(n: int) -> dict:
    outcome = ToolOutcome(
        envelope={"ok": True, "status": 200, "data": {}},
        error_code=None,
        status=200,
        executed=True,
        latency_ms=12.5,
    )
    return {
        "route": "/v1/chat/completions",
        "mode": "mediated",
        "model": "gpt-4o",
        "provider": "openai",
        "outcome": {"status": "ok", "code": None},
        "http_status": 200,
        "stream": False,
        "usage": {"input_tokens": 10 * n, "output_tokens": n, "rounds": 1},
        "tool_trace": [
            {
                "round": 1,
                "calls": [
                    trace_call(f"call_{n}", TOOL, TOOL.presented, '{"symbol": "AAPL"}', outcome)
                ],
            }
        ],
    }


async def write_records(state: Path, count: int, agent: str = "analyst", **options) -> list[dict]:
    log = AuditLog(state, **{"key": KEY, **options})
    records = [await log.append(agent, request_record(n)) for n in range(count)]
    await log.close()
    return records


def lines_of(state: Path, agent: str = "analyst") -> list[bytes]:
    return (state / "audit" / f"{agent}.jsonl").read_bytes().splitlines(keepends=True)


def write_lines(state: Path, lines: list[bytes], agent: str = "analyst") -> None:
    (state / "audit" / f"{agent}.jsonl").write_bytes(b"".join(lines))


def verify(state: Path, **options) -> tuple[int, str]:
    out = io.StringIO()
    return verify_command(state, out, **{"env": KEY_ENV, **options}), out.getvalue()


async def test_records_are_chained_and_complete(tmp_path: Path) -> None:
    records = await write_records(tmp_path, 3)
    on_disk = [orjson.loads(line) for line in lines_of(tmp_path)]
    assert on_disk == records
    assert records[0]["prev"] == GENESIS
    assert [r["prev"] for r in records[1:]] == [r["hash"] for r in records[:-1]]
    for record in records:
        assert record["hash"] == record_hash(record, KEY)
        assert record["agent"] == "analyst"
        assert record["time"].endswith("Z") and "T" in record["time"]
        assert len(record["id"]) == 32
    assert len({r["id"] for r in records}) == 3
    assert (tmp_path / "audit" / "analyst.jsonl").stat().st_mode & 0o777 == 0o600
    assert verify(tmp_path) == (0, "audit/analyst.jsonl: 3 records, chain intact\nOK\n")


async def test_caller_id_is_kept_and_chain_fields_cannot_be_forged(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    record = await log.append(
        "analyst", {"id": "req-1", "prev": "f" * 64, "hash": "0", "agent": "x"}
    )
    await log.close()
    assert (record["id"], record["prev"], record["agent"]) == ("req-1", GENESIS, "analyst")
    assert verify(tmp_path)[0] == 0


async def test_chain_resumes_after_restart(tmp_path: Path) -> None:
    first = await write_records(tmp_path, 2)
    second = await write_records(tmp_path, 2)
    assert second[0]["prev"] == first[-1]["hash"]
    assert verify(tmp_path) == (0, "audit/analyst.jsonl: 4 records, chain intact\nOK\n")


async def test_agents_have_separate_chains(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    a = await log.append("analyst", request_record(1))
    b = await log.append("trader-0", request_record(2))
    await log.close()
    assert a["prev"] == b["prev"] == GENESIS
    code, report = verify(tmp_path)
    assert code == 0 and "audit/trader-0.jsonl: 1 records" in report


async def test_concurrent_appends_keep_one_ordered_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    await asyncio.gather(*(log.append("analyst", request_record(n)) for n in range(200)))
    await log.close()
    assert verify(tmp_path) == (0, "audit/analyst.jsonl: 200 records, chain intact\nOK\n")


@pytest.mark.parametrize("fsync_interval_s", [0, 0.05])
async def test_both_fsync_policies_keep_every_record(
    tmp_path: Path, fsync_interval_s: float
) -> None:
    await write_records(tmp_path, 5, fsync_interval_s=fsync_interval_s)
    assert len(lines_of(tmp_path)) == 5
    assert verify(tmp_path)[0] == 0


async def test_agent_ids_cannot_escape_the_audit_directory(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    with pytest.raises(ValueError):
        await log.append("../evil", request_record(0))
    await log.close()


async def test_verify_finds_an_edited_record(tmp_path: Path) -> None:
    await write_records(tmp_path, 4)
    lines = lines_of(tmp_path)
    lines[2] = lines[2].replace(b'"gpt-4o"', b'"gpt-4o-mini"')
    write_lines(tmp_path, lines)
    code, report = verify(tmp_path)
    assert code == 1
    assert "line 3 (record " in report and "content does not match its hash (edited)" in report
    assert report.count("line ") == 1


async def test_verify_finds_an_edit_that_also_rewrote_the_hash(tmp_path: Path) -> None:
    records = await write_records(tmp_path, 3)
    forged = dict(records[1], model="gpt-4o-mini")
    forged["hash"] = record_hash(forged)
    lines = lines_of(tmp_path)
    lines[1] = orjson.dumps(forged) + b"\n"
    write_lines(tmp_path, lines)
    code, report = verify(tmp_path)
    assert code == 1
    assert f"line 3 (record {records[2]['id']}): chain broken" in report


async def test_verify_finds_a_deleted_record(tmp_path: Path) -> None:
    records = await write_records(tmp_path, 4)
    lines = lines_of(tmp_path)
    del lines[1]
    write_lines(tmp_path, lines)
    code, report = verify(tmp_path)
    assert code == 1
    assert f"line 2 (record {records[2]['id']}): chain broken" in report


async def test_verify_finds_a_deleted_first_record(tmp_path: Path) -> None:
    await write_records(tmp_path, 3)
    write_lines(tmp_path, lines_of(tmp_path)[1:])
    code, report = verify(tmp_path)
    assert code == 1 and "line 1 " in report and "records before it are missing" in report


async def test_verify_finds_records_cut_from_the_end(tmp_path: Path) -> None:
    await write_records(tmp_path, 4)
    write_lines(tmp_path, lines_of(tmp_path)[:2])  # the chain of what is left is intact
    code, report = verify(tmp_path)
    assert code == 1 and "records deleted" in report


async def test_verify_finds_a_deleted_agent_log(tmp_path: Path) -> None:
    await write_records(tmp_path, 2, agent="trader")
    await write_records(tmp_path, 2, agent="analyst")
    (tmp_path / "audit" / "trader.jsonl").unlink()
    code, report = verify(tmp_path)
    assert code == 1 and "audit/trader.jsonl: missing" in report


async def test_a_head_one_record_behind_is_a_crash_not_a_deletion(tmp_path: Path) -> None:
    records = await write_records(tmp_path, 3)
    (tmp_path / "audit" / "analyst.head").write_bytes(head_line(records[1]["hash"], KEY))
    assert verify(tmp_path)[0] == 0
    log = AuditLog(tmp_path, key=KEY)  # and the sidecar resumes without calling it a gap
    assert "audit_gap" not in await log.append("analyst", request_record(9))
    await log.close()
    assert verify(tmp_path)[0] == 0


async def test_records_of_one_loop_iteration_go_out_in_one_write(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    records = [await log.append("analyst", request_record(n)) for n in range(3)]
    path = tmp_path / "audit" / "analyst.jsonl"
    assert path.read_bytes() == b"", "nothing written before the iteration ends"
    await asyncio.sleep(0)
    assert len(lines_of(tmp_path)) == 3
    assert (tmp_path / "audit" / "analyst.head").read_bytes() == head_line(records[-1]["hash"], KEY)
    await log.close()
    assert verify(tmp_path)[0] == 0


async def test_no_more_than_max_unwritten_records_wait(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    for n in range(MAX_UNWRITTEN + 5):
        await log.append("analyst", request_record(n))
    assert len(lines_of(tmp_path)) == MAX_UNWRITTEN  # written once the batch was full
    await log.close()
    assert len(lines_of(tmp_path)) == MAX_UNWRITTEN + 5


async def test_a_head_one_write_behind_is_accepted_older_is_a_deletion(tmp_path: Path) -> None:
    records = await write_records(tmp_path, MAX_UNWRITTEN + 2)
    head = tmp_path / "audit" / "analyst.head"
    # As if the last full write's head was lost:
    head.write_bytes(head_line(records[1]["hash"], KEY))
    assert verify(tmp_path)[0] == 0
    # Further back than one write can leave it:
    head.write_bytes(head_line(records[0]["hash"], KEY))
    code, report = verify(tmp_path)
    assert code == 1 and "records deleted" in report
    log = AuditLog(tmp_path, key=KEY)  # a restart sees the same
    await log.append("analyst", request_record(99))
    await log.close()
    assert "audit_gap" in orjson.loads(lines_of(tmp_path)[-1])


async def test_a_restart_on_a_cut_log_keeps_the_cut_on_record(tmp_path: Path) -> None:
    records = await write_records(tmp_path, 4)
    write_lines(tmp_path, lines_of(tmp_path)[:2])
    log = AuditLog(tmp_path, key=KEY)
    resumed = await log.append("analyst", request_record(9))
    await log.close()
    assert resumed["prev"] == records[1]["hash"]
    assert resumed["audit_gap"] == {"head_was": records[3]["hash"]}
    code, report = verify(tmp_path)  # the new head matches, yet the cut is still reported
    assert code == 1 and "were missing from the end" in report


async def test_verify_finds_reordered_records(tmp_path: Path) -> None:
    await write_records(tmp_path, 4)
    lines = lines_of(tmp_path)
    lines[1], lines[2] = lines[2], lines[1]
    write_lines(tmp_path, lines)
    code, report = verify(tmp_path)
    assert code == 1
    assert "line 2 " in report and "line 3 " in report and "chain broken" in report


async def test_verify_finds_a_truncated_last_line(tmp_path: Path) -> None:
    await write_records(tmp_path, 3)
    lines = lines_of(tmp_path)
    lines[-1] = lines[-1][:40]
    write_lines(tmp_path, lines)
    code, report = verify(tmp_path)
    assert code == 1 and "line 3 is truncated" in report


async def test_a_torn_line_stays_visible_and_new_records_chain_to_the_last_good_one(
    tmp_path: Path,
) -> None:
    records = await write_records(tmp_path, 2)
    path = tmp_path / "audit" / "analyst.jsonl"
    with path.open("ab") as handle:
        handle.write(b'{"id": "torn", "ti')  # a crash mid-write
    [after] = await write_records(tmp_path, 1)
    assert after["prev"] == records[-1]["hash"]
    assert orjson.loads(lines_of(tmp_path)[-1]) == after
    code, report = verify(tmp_path)
    assert code == 1 and "line 3 is not a JSON record" in report
    assert report.count("line ") == 1


async def test_verify_finds_a_record_moved_between_agents(tmp_path: Path) -> None:
    await write_records(tmp_path, 1, agent="analyst")
    (tmp_path / "audit" / "analyst.jsonl").rename(tmp_path / "audit" / "trader.jsonl")
    code, report = verify(tmp_path)
    assert code == 1 and "belongs to agent 'analyst'" in report


def test_verify_without_audit_logs_says_so(tmp_path: Path) -> None:
    code, report = verify(tmp_path)
    assert code == 1 and "no audit logs" in report


async def test_large_integers_from_a_model_do_not_break_the_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    await log.append(
        "analyst", {"tool_trace": [{"round": 1, "calls": [{"arguments": {"n": 10**30}}]}]}
    )
    await log.close()
    assert verify(tmp_path)[0] == 0


def test_trace_call_entry() -> None:
    outcome = ToolOutcome(
        envelope={},
        error_code=None,
        status=200,
        executed=True,
        latency_ms=3.14159,
        truncated=True,
        original_bytes=99999,
    )
    entry = trace_call("call_1", TOOL, "trading-api_execute_trade", '{"symbol": "AAPL"}', outcome)
    assert entry == {
        "id": "call_1",
        "name": "trading-api.execute_trade",
        "presented": "trading-api_execute_trade",
        "arguments": {"symbol": "AAPL"},
        "executed": True,
        "status": 200,
        "error_code": None,
        "latency_ms": 3.142,
        "truncated": True,
        "original_bytes": 99999,
    }


def test_trace_call_keeps_unparseable_arguments_and_unknown_tools() -> None:
    entry = trace_call(
        "c", None, "not_ours", '{"broken": ', refused("unknown_tool", "no such tool")
    )
    assert entry["name"] is None and entry["arguments"] == '{"broken": '
    assert entry["error_code"] == "unknown_tool" and entry["executed"] is False


async def test_show_summarises_requests_and_tool_calls(tmp_path: Path) -> None:
    await write_records(tmp_path, 3)
    await write_records(tmp_path, 1, agent="trader")
    out = io.StringIO()
    assert show_command(tmp_path, out, agent="analyst", limit=2) == 0
    text = out.getvalue()
    assert text.startswith("== analyst\n")
    assert "trader" not in text
    assert text.count("/v1/chat/completions") == 2
    assert "openai/gpt-4o" in text and "rounds=1 tokens=20/2" in text
    assert "round 1: trading-api.execute_trade -> ok 200 12.5 ms" in text
    assert 'args={"symbol":"AAPL"}' in text


def test_show_for_an_unknown_agent_fails(tmp_path: Path) -> None:
    out = io.StringIO()
    assert show_command(tmp_path, out, agent="ghost") == 1
    assert "ghost" in out.getvalue()


async def test_a_record_appended_after_close_is_still_written(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    first = await log.append("analyst", request_record(0))
    await log.close()
    late = await log.append("analyst", request_record(1))
    assert late["prev"] == first["hash"]
    assert verify(tmp_path) == (0, "audit/analyst.jsonl: 2 records, chain intact\nOK\n")


async def test_verify_finds_formatting_only_edits_and_blank_lines(tmp_path: Path) -> None:
    await write_records(tmp_path, 3)
    lines = lines_of(tmp_path)
    lines[0] = lines[0].replace(b'"route":', b'"route": ')
    lines.insert(2, b"\n")
    write_lines(tmp_path, lines)
    code, report = verify(tmp_path)
    assert code == 1
    assert "line 1 " in report and "(reformatted)" in report
    assert "line 3 is not a JSON record" in report


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_single_byte_edit_is_detected(tmp_path_factory: pytest.TempPathFactory, data) -> None:
    state = tmp_path_factory.mktemp("audit")
    asyncio.run(write_records(state, 4))
    path = state / "audit" / "analyst.jsonl"
    original = path.read_bytes()
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    action = data.draw(st.sampled_from(["replace", "delete", "insert"]), label="action")
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != original[position]), label="byte")
    edited = {
        "replace": original[:position] + bytes([byte]) + original[position + 1 :],
        "delete": original[:position] + original[position + 1 :],
        "insert": original[:position] + bytes([byte]) + original[position:],
    }[action]
    path.write_bytes(edited)
    assert verify(state)[0] == 1


def test_trace_call_bounds_huge_arguments() -> None:
    outcome = refused("invalid_arguments", "too big")
    huge = {"blob": "x" * 200_000}
    entry = trace_call("c", TOOL, TOOL.presented, huge, outcome)
    assert isinstance(entry["arguments"], str)
    assert (
        entry["arguments"].startswith('{"blob":"xxx')
        and "(cut, 200011 bytes)" in entry["arguments"]
    )
    assert len(entry["arguments"]) < 70_000
    raw = "not json " * 20_000
    assert trace_call("c", TOOL, TOOL.presented, raw, outcome)["arguments"].endswith(
        "(cut, 180000 bytes)"
    )


async def test_show_describes_event_records(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, key=KEY)
    event = {"event": "state_write_failed", "request": "req_1", "store": "continuity"}
    await log.append("analyst", {**event, "error": "No space left on device"})
    await log.close()
    out = io.StringIO()
    assert show_command(tmp_path, out) == 0
    assert "state_write_failed  request=req_1  store=continuity  error=No space" in out.getvalue()
