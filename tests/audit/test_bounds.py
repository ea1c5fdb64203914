"""Issue 14 finding 7: every string in an audit record is bounded (256 bytes and a digest of
the rest), except the argument copy, which trace.py bounds as a whole."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from clawpod.sidecar.audit.log import (
    MAX_ARGUMENT_BYTES,
    MAX_STRING_BYTES,
    AuditLog,
    bounded_string,
    may_hold_long_strings,
    trace_call,
)
from clawpod.sidecar.model.conversation import refused
from tests.audit.test_audit import KEY, TOOL, verify
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import RunningSidecar, start_sidecar

HUGE = 4 * 1024 * 1024
# A record's own fields, the bounded strings and their digests: a few KiB at most.
RECORD_BOUND = 8 * 1024


def test_a_long_string_keeps_its_start_and_a_digest_of_the_rest() -> None:
    text = "é" * 1000  # two bytes each: the cut must not split a character
    bounded = bounded_string(text)
    kept, _, note = bounded.partition("...(cut ")
    assert kept == "é" * (MAX_STRING_BYTES // 2)
    rest = ("é" * (1000 - MAX_STRING_BYTES // 2)).encode()
    assert note == f"{len(rest)} bytes, sha256 {hashlib.sha256(rest).hexdigest()})"
    assert bounded_string("x" * MAX_STRING_BYTES) == "x" * MAX_STRING_BYTES


def test_json_of_short_strings_needs_no_walk() -> None:
    record = {"id": "req_1", "usage": {"input_tokens": 3}, "tool_trace": [], "n": [1, 2.5]}
    assert not may_hold_long_strings(orjson.dumps(record))
    assert may_hold_long_strings(orjson.dumps({"k": "x" * (MAX_STRING_BYTES // 4 + 1)}))


@pytest.mark.parametrize(
    "long",
    [
        '"' * 300,  # escaped in JSON: no long run of plain bytes shows it
        "a\\" * 150,
        "line\n" * 60,
        "é" * 200,  # 200 characters, 400 bytes
        "x" * 300,
    ],
)
async def test_a_long_string_is_cut_however_its_json_looks(tmp_path: Path, long: str) -> None:
    """The log skips the walk over every value for records of short strings (the record of
    every request): whatever makes a long string hard to see in JSON must not let it by."""
    cut = bounded_string(long)
    assert cut != long
    record = {"id": "r", "outcome": {"code": long}, "extra": [1, {long: "v"}, [long]]}
    log = AuditLog(tmp_path, key=KEY)
    await log.append("analyst", record)
    await log.append("analyst", {"big": 2**70, "code": long})  # beyond orjson's integers
    await log.close()
    lines = (tmp_path / "audit" / "analyst.jsonl").read_bytes().splitlines()
    first, second = (orjson.loads(line) for line in lines)
    assert first["outcome"] == {"code": cut}
    assert first["extra"] == [1, {cut: "v"}, [cut]]
    assert second["code"] == cut
    assert verify(tmp_path)[0] == 0


async def test_huge_strings_anywhere_in_a_record_are_bounded(tmp_path: Path) -> None:
    outcome = refused("unknown_tool", "no such tool")
    call = trace_call("i" * HUGE, None, "n" * HUGE, {"symbol": "AAPL"}, outcome)
    record = {
        "id": "r" * HUGE,
        "route": "/mcp",
        "outcome": {"status": "error", "code": "c" * HUGE},
        "extra": ["x" * HUGE, {"k" * HUGE: "v"}],
        "tool_trace": [{"round": 1, "calls": [call]}],
    }
    log = AuditLog(tmp_path, key=KEY)
    written = await log.append("analyst", record)
    await log.close()
    assert (tmp_path / "audit" / "analyst.jsonl").stat().st_size < RECORD_BOUND
    stored = written["tool_trace"][0]["calls"][0]
    assert stored["presented"].startswith("n" * MAX_STRING_BYTES + "...(cut ")
    assert stored["arguments"] == {"symbol": "AAPL"}
    assert verify(tmp_path)[0] == 0


async def test_the_argument_copy_keeps_its_own_larger_bound(tmp_path: Path) -> None:
    outcome = refused("invalid_arguments", "too big")
    arguments = {"note": "a" * (MAX_ARGUMENT_BYTES // 2)}
    call = trace_call("c", TOOL, TOOL.presented, arguments, outcome)
    log = AuditLog(tmp_path, key=KEY)
    written = await log.append("analyst", {"tool_trace": [{"round": 1, "calls": [call]}]})
    await log.close()
    assert written["tool_trace"][0]["calls"][0]["arguments"] == arguments


@pytest.fixture
async def native_sidecar(tmp_path: Path, service: ToolService) -> AsyncIterator[RunningSidecar]:
    tool = http_tool("desk", "get_item", service.url, path="/items/{item}")
    tokens = write_build(
        tmp_path / "build",
        [AgentSpec("trader", tools=[tool], mode="native", token="claw_" + "t" * 40)],
        providers_for("http://127.0.0.1:9"),
        max_body_bytes=16 * 1024 * 1024,
    )
    assert tokens["trader"]
    async with await start_sidecar(tmp_path / "build", tmp_path / "state") as sidecar:
        yield sidecar


async def test_an_mcp_call_with_a_4mb_name_and_id_grows_the_log_by_a_bounded_amount(
    native_sidecar: RunningSidecar, tmp_path: Path
) -> None:
    headers = {
        "Authorization": "Bearer claw_" + "t" * 40,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    url = native_sidecar.url + "/mcp"
    log = tmp_path / "state" / "audit" / "trader.jsonl"
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            url,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params},
            headers=headers,
        ) as response:
            assert response.status == 200
            headers["Mcp-Session-Id"] = response.headers["Mcp-Session-Id"]
        before = log.stat().st_size
        for _ in range(3):
            call = {
                "jsonrpc": "2.0",
                "id": "i" * HUGE,
                "method": "tools/call",
                "params": {"name": "n" * HUGE, "arguments": {}},
            }
            async with http.post(url, data=orjson.dumps(call), headers=headers) as response:
                await response.read()
    await native_sidecar.close()  # flushes the audit
    records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert len(records) == 3
    assert log.stat().st_size - before < 3 * RECORD_BOUND
