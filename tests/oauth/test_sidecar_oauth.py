"""A running sidecar calling an OAuth-protected service for a native agent (SPEC §21): the
client secret comes from ``NAME_FILE``, the token from the suite's authorization server, and
neither appears in the audit, the logs, the spans or what the agent sees (every token the
server issued joins the session's credential sweep, which reads the state directory, every
log record and the texts collected here)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clawpod.sidecar.credential_files import credential_names, with_credential_files
from clawpod.sidecar.manifest import ToolAuth, load_build
from clawpod.sidecar.observability import tracing
from tests.mcp.conftest import mcp_client
from tests.oauth.test_service_tokens import (
    AUDIENCE,
    ENV,
    SECRET,
    client_credentials,
    registered,  # noqa: F401 (the fixture)
)
from tests.support import secret_sweep
from tests.support.authorization_server import AuthorizationServerProcess
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.protected_resources import TokenCheck, protected_http_service
from tests.support.sidecar import TEST_PROVIDER_KEYS, audit_records, start_sidecar


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)


async def test_a_native_call_gets_its_token_and_leaves_it_nowhere(
    registered: AuthorizationServerProcess,  # noqa: F811
    tmp_path: Path,
    spans: InMemorySpanExporter,
) -> None:
    # Like a secrets mount: outside the directories the credential sweep reads.
    mount = tempfile.TemporaryDirectory(prefix="claw-secrets-")
    secret_file = Path(mount.name) / "orders-client-secret"
    secret_file.write_text(SECRET + "\n")
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE)) as service:
        auth = ToolAuth.model_validate(client_credentials(registered.token_url))
        tool = http_tool("orders", "whoami", service.url, auth=auth)
        build_dir = tmp_path / "build"
        tokens = write_build(
            build_dir,
            [AgentSpec("trader", tools=[tool], mode="native")],
            providers_for(openai_url="http://127.0.0.1:9/v1"),
        )
        build = load_build(build_dir)
        assert {"ORDERS_CLIENT_ID", "ORDERS_CLIENT_SECRET"} <= credential_names(build)
        env = with_credential_files(
            {
                **TEST_PROVIDER_KEYS,
                "ORDERS_CLIENT_ID": ENV["ORDERS_CLIENT_ID"],
                "ORDERS_CLIENT_SECRET_FILE": str(secret_file),
            },
            credential_names(build),
        )
        sidecar = await start_sidecar(build_dir, tmp_path / "state", env=env)
        try:
            async with mcp_client(sidecar.url + "/mcp", tokens["trader"]) as client:
                first = await client.call_tool("orders_whoami", {})
                second = await client.call_tool("orders_whoami", {})
            held = sidecar.state.executor.tokens.secrets()
        finally:
            await sidecar.close()
            mount.cleanup()
    secret_sweep.register(*held)
    for result in (first, second):
        assert result.structured_content["data"]["sub"] == "orders-agent"
        secret_sweep.collect("mcp result", result.model_dump_json())
    # The service echoed the token it got: the agent sees it redacted.
    assert service.check.tokens[0] not in first.model_dump_json()
    records = audit_records(tmp_path / "state", "trader")
    assert len(records) == 2
    for span in spans.get_finished_spans():
        secret_sweep.collect(f"span {span.name}", json.dumps(dict(span.attributes or {})))
        secret_sweep.collect(
            f"span {span.name} events", orjson.dumps([e.name for e in span.events])
        )
    assert all(token not in json.dumps(records) for token in service.check.tokens)
