"""The compiled example pod on a real Docker engine: mediation, isolation, secrecy, durability.

Every agent-side action runs inside the agent's own container on the pod's networks, with the
real openai SDK or the official MCP client, exactly as an unmodified runner would.
"""

from __future__ import annotations

import io
import json
import socket
import tarfile
import threading
from collections.abc import Iterable, Iterator
from typing import IO, Any

import pytest

from tests.docker.pod import (
    MEDIATED_AGENT,
    NATIVE_AGENT,
    SIDECAR,
    STATE_DIR,
    TOOL_SERVICES,
    UPSTREAM,
    UPSTREAM_PORT,
    Pod,
)
from tests.docker.upstream.app import ANSWER_PREFIX

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

QUESTION = {"role": "user", "content": "How is my portfolio doing?"}


def _tool_data(answer: str) -> dict:
    """The tool envelope the scripted model quoted back in its answer."""
    assert answer.startswith(ANSWER_PREFIX), answer
    return json.loads(answer.removeprefix(ANSWER_PREFIX))


def _names() -> list[str]:
    return [f"{svc}:{port}" for svc, port in [*TOOL_SERVICES.items(), (UPSTREAM, UPSTREAM_PORT)]]


def _addresses(pod: Pod) -> list[str]:
    """Every address of every tool service and the upstream, on all of their networks."""
    return [
        f"{ip}:{port}"
        for svc, port in [*TOOL_SERVICES.items(), (UPSTREAM, UPSTREAM_PORT)]
        for ip in pod.addresses(svc)
    ]


def test_mediated_tool_call_round_trips_through_the_service(pod: Pod) -> None:
    seen_before = len(pod.upstream_requests())
    audited_before = len(pod.audit(MEDIATED_AGENT))

    reply = pod.chat(MEDIATED_AGENT, [QUESTION])

    envelope = _tool_data(reply["content"])
    assert envelope["ok"] is True and envelope["status"] == 200
    assert envelope["data"]["agent"] == MEDIATED_AGENT  # {claw_id} filled by the sidecar
    assert envelope["data"]["buying_power"] > 0
    assert reply["finish_reason"] == "stop"
    # The model saw the injected tool, was called twice (tool call, then answer), and every call
    # carried the provider key the sidecar holds, not the agent's token.
    first, second = pod.upstream_requests()[seen_before:]
    assert any("get_market_context" in name for name in first["tools"])
    assert first["roles"] == ["user"] and second["roles"] == ["user", "assistant", "tool"]
    assert first["authorized"] and second["authorized"]
    # The usage the agent sees is the sum over both upstream calls.
    assert reply["usage"]["total_tokens"] == 2 * 18
    record = pod.audit(MEDIATED_AGENT)[audited_before]
    assert record["outcome"]["status"] == "ok"
    calls = [call for round_ in record["tool_trace"] for call in round_["calls"]]
    assert [call["name"] for call in calls] == ["trading-api.get_market_context"]


def test_streaming_client_gets_the_mediated_answer_streamed(pod: Pod) -> None:
    seen_before = len(pod.upstream_requests())

    reply = pod.chat(MEDIATED_AGENT, [QUESTION], stream=True)

    assert _tool_data(reply["content"])["data"]["agent"] == MEDIATED_AGENT
    assert reply["finish_reason"] == "stop"
    assert reply["usage"]["total_tokens"] == 2 * 18
    # A streaming client's model calls stream too, tool round included (contract §8.1).
    upstream = pod.upstream_requests()[seen_before:]
    assert len(upstream) == 2 and all(request["stream"] for request in upstream)


def test_agent_cannot_resolve_or_reach_tool_services_or_upstream(pod: Pod) -> None:
    names, addresses = _names(), _addresses(pod)

    from_agent = pod.reach(MEDIATED_AGENT, names + addresses)
    from_sidecar = pod.reach(SIDECAR, names)

    for name in names:
        assert from_agent[name]["resolved"] is None, from_agent[name]
        assert not from_agent[name]["connected"], from_agent[name]
        assert from_sidecar[name]["resolved"], from_sidecar[name]
        assert from_sidecar[name]["connected"], from_sidecar[name]
    for address in addresses:
        assert not from_agent[address]["connected"], from_agent[address]
    # The one thing the agent can reach is the sidecar.
    assert pod.reach(MEDIATED_AGENT, [f"{SIDECAR}:8080"])[f"{SIDECAR}:8080"]["connected"]


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the Docker host bound to 0.0.0.0: accepts and closes; its port."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_agent_cannot_reach_the_docker_host(pod: Pod, host_server: int) -> None:
    """Issue 13 finding 10: not through the gateway of its network, nor of the tools network.
    Docker >= 28 leaves the host no address there; older engines need the firewall step
    (docs/running-a-pod.md), which scripts/provision-docker.sh applies."""
    internal = [
        f"{ip}:{host_server}" for n in ("claw-agents", "claw-tools") for ip in pod.gateways(n)
    ]
    assert internal
    from_agent = pod.reach(MEDIATED_AGENT, internal)
    for target in internal:
        assert not from_agent[target]["connected"], from_agent[target]
    # The server is there: the sidecar reaches it through the egress network's gateway.
    egress = [f"{ip}:{host_server}" for ip in pod.gateways("claw-egress")]
    assert any(r["connected"] for r in pod.reach(SIDECAR, egress).values())


def test_agent_cannot_reach_the_operator_listener(pod: Pod) -> None:
    """Issue 13 finding 8: /metrics and /readyz are bound to the sidecar's claw-admin address."""
    targets = [f"{SIDECAR}:9090", "claw-sidecar-admin:9090"]
    targets += [f"{ip}:9090" for ip in pod.addresses(SIDECAR)]
    from_agent = pod.reach(MEDIATED_AGENT, targets)
    for target in targets:
        assert not from_agent[target]["connected"], from_agent[target]
    assert pod.reach(SIDECAR, ["claw-sidecar-admin:9090"])["claw-sidecar-admin:9090"]["connected"]


def _files_containing(archive: IO[bytes], secrets: list[bytes]) -> list[str]:
    found = []
    with tarfile.open(fileobj=archive, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            handle = tar.extractfile(member)
            data = handle.read() if handle else b""
            found += [f"{member.name}: {s[:12]!r}..." for s in secrets if s in data]
    return found


class _ChunkStream(io.RawIOBase):
    """Readable stream over the chunks docker's export yields, so tarfile can stream it."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._chunk:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk = memoryview(chunk)
        size = min(len(buffer), len(self._chunk))
        buffer[:size] = self._chunk[:size]
        self._chunk = self._chunk[size:]
        return size


@pytest.mark.parametrize("agent", [MEDIATED_AGENT, NATIVE_AGENT])
def test_no_credential_is_visible_to_an_agent(pod: Pod, agent: str) -> None:
    secrets = list(pod.files.credentials.values())
    container = pod.container(agent)
    sidecar = pod.container(SIDECAR)
    # The sweep can see a value where it is: the sidecar holds every one of them.
    sidecar_config = json.dumps(sidecar.attrs)
    assert all(value in sidecar_config for value in secrets)

    inspected = json.dumps(container.attrs)
    code, environment = pod.exec(agent, "env")
    code_1, pid1_environment = pod.exec(agent, "cat", "/proc/1/environ")
    logs = container.logs().decode(errors="replace")
    assert code == 0 and code_1 == 0
    for value in secrets:
        assert value not in inspected
        assert value not in environment
        assert value not in pid1_environment
        assert value not in logs
    encoded = [value.encode() for value in secrets]
    exported = io.BufferedReader(_ChunkStream(container.export()))
    assert _files_containing(exported, encoded) == []
    # Mounts are not part of the export: the build files mounted into the agent (CONTEXT.md,
    # mcp.json) are read from inside.
    mounts = [m["Destination"] for m in container.attrs["Mounts"]]
    assert "/claw/CONTEXT.md" in mounts
    for mount in mounts:
        code, content = pod.exec(agent, "sh", "-c", f"find {mount} -type f -exec cat {{}} +")
        assert code == 0 and content, mount
        assert not any(value in content for value in secrets), mount


def test_sidecar_runs_unprivileged_and_reports_health(pod: Pod) -> None:
    container = pod.container(SIDECAR)
    image = pod.client.images.get(container.attrs["Config"]["Image"])

    code, uid = pod.exec(SIDECAR, "id", "-u")

    assert code == 0 and int(uid) != 0
    assert image.attrs["Config"]["User"] == "claw"
    assert image.attrs["Config"]["Healthcheck"]["Test"][0] == "CMD"
    assert container.attrs["State"]["Health"]["Status"] == "healthy"
    # The state volume is writable by that user: the audit lives there.
    code, owner = pod.exec(SIDECAR, "stat", "-c", "%u", STATE_DIR)
    assert code == 0 and owner.strip() == uid.strip()


def test_sidecar_logs_and_audit_hold_no_credential(pod: Pod) -> None:
    pod.chat(MEDIATED_AGENT, [QUESTION])
    logs = pod.container(SIDECAR).logs().decode(errors="replace")
    code, audit = pod.exec(SIDECAR, "sh", "-c", f"cat {STATE_DIR}/audit/*.jsonl")
    assert code == 0 and audit
    for value in pod.files.credentials.values():
        assert value not in logs
        assert value not in audit


def test_native_agent_uses_mcp_from_its_container(pod: Pod) -> None:
    audited_before = len(pod.audit(NATIVE_AGENT))

    outcome = pod.probe(NATIVE_AGENT, "mcp_native", "/claw/mcp.json", "get_market_context")

    assert any("execute_trade" in name for name in outcome["tools"])
    assert not outcome["result"].get("isError"), outcome["result"]
    text = outcome["result"]["content"][0]["text"]
    assert json.loads(text)["data"]["agent"] == NATIVE_AGENT
    records = pod.audit(NATIVE_AGENT)[audited_before:]
    assert any(
        call["name"] == "trading-api.get_market_context"
        for record in records
        for round_ in record.get("tool_trace") or []
        for call in round_["calls"]
    ), records


def test_sidecar_restart_keeps_audit_and_continuity(pod: Pod) -> None:
    first = pod.chat(MEDIATED_AGENT, [QUESTION])
    audit_before = pod.audit(MEDIATED_AGENT)
    container_before = pod.container(SIDECAR).attrs["State"]["StartedAt"]

    pod.restart(SIDECAR)

    assert pod.container(SIDECAR).attrs["State"]["StartedAt"] != container_before
    seen_before = len(pod.upstream_requests())
    follow_up = [
        QUESTION,
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": "And now?"},
    ]
    second = pod.chat(MEDIATED_AGENT, follow_up)
    _tool_data(second["content"])
    # Continuity: the hidden round of the first answer (tool call + result) was put back in
    # place before the model saw the follow-up, although the sidecar restarted in between.
    resumed = pod.upstream_requests()[seen_before]
    assert resumed["roles"] == ["user", "assistant", "tool", "assistant", "user"], resumed
    # Audit: nothing lost, the chain continues across the restart and verifies.
    audit_after = pod.audit(MEDIATED_AGENT)
    assert audit_after[: len(audit_before)] == audit_before
    assert len(audit_after) == len(audit_before) + 1
    assert audit_after[len(audit_before)]["prev"] == audit_before[-1]["hash"]
    code, report = pod.exec(SIDECAR, "clawc", "audit", "verify", STATE_DIR)
    assert code == 0, report
    code, shown = pod.exec(SIDECAR, "clawc", "audit", "show", STATE_DIR, "--agent", MEDIATED_AGENT)
    assert code == 0 and shown.count("trading-api.get_market_context") == len(audit_after), shown


def test_operators_decide_on_the_operator_listener_as_documented(pod: Pod) -> None:
    """docs/running-a-pod.md: `docker compose exec claw-sidecar clawc approvals list --sidecar
    http://claw-sidecar-admin:9090` works as written (the image has clawc, the sidecar's
    environment has the operator token), and the console is served there."""
    admin = "http://claw-sidecar-admin:9090"
    code, output = pod.exec(SIDECAR, "clawc", "approvals", "list", "--sidecar", admin)
    assert code == 0, output
    page = f"{admin}/console/sign-in"
    fetch = f"import urllib.request; print(urllib.request.urlopen('{page}').status)"
    code, output = pod.exec(SIDECAR, "python", "-c", fetch)
    assert (code, output.strip()) == (0, "200"), output
