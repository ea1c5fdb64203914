"""Tokens at the door never leak (SPEC §21): with tracing on, neither the agent's JWT nor the end
user's token is in any span, audit record, log line or error; the suite's credential sweep
(tests/support/secret_sweep.py) searches everything else the session wrote for both."""

from __future__ import annotations

import logging

import openai
import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.identity.conftest import DoorPod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support import secret_sweep
from tests.support.sidecar import audit_records_when
from tests.support.upstream import Reply


def _everything_in(spans: InMemorySpanExporter) -> str:
    return "\n".join(span.to_json() for span in spans.get_finished_spans())


async def test_no_token_in_spans_audit_logs_or_errors(
    door: DoorPod, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    agent_jwt = door.agent_jwt("analyst")
    secret_sweep.register(agent_jwt)
    user = door.user_token("alice")
    door.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("c1", "desk_quote", {"symbol": "AAPL"}))),
        Reply.json(oa_text("done")),
    )
    client = door.openai(agent_jwt, end_user=user)
    await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "q"}]
    )
    expired = door.user_token("alice", exp=1)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await door.openai(agent_jwt, end_user=expired).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "q"}]
        )
    (record,) = await audit_records_when(door.state_dir, "analyst", 1)  # the door audits no refusal
    assert record["end_user"] == "alice"
    texts = {
        "spans": _everything_in(spans),
        "audit": orjson.dumps(door.audit("analyst")).decode(),
        "logs": "\n".join(
            r.getMessage() + str(r.exc_info) for r in caplog.records if r.name.startswith("clawpod")
        ),
        "error": str(refused.value.body),
    }
    assert "execute_tool desk.quote" in texts["spans"]
    for where, text in texts.items():
        for token in (agent_jwt, user, expired):
            for part in token.split("."):  # not even the signature or the claims alone
                assert part not in text, where
