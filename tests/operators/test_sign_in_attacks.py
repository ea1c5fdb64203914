"""Attacks on the operator listener's door (issue 46), against a real sidecar: a weak operator
token, guessing it through the console or the API (once 112 tries/s, unaudited), DNS
rebinding (a page at another name pointed at the listener), and a form field sent as a file."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp
import pytest

from clawpod.sidecar.manifest import load_build
from clawpod.sidecar.server.app import create_app
from clawpod.sidecar.server.operator.operator_auth import OperatorTokenError
from tests.execution.test_governance import ENV, OPERATOR_TOKEN, Desk, pass_sign_in_delays
from tests.operators.console_client import ConsoleClient, csrf_of
from tests.support.sidecar import audit_records

GUARD_S = 30.0  # against a hang, never a timing assertion


@pytest.mark.parametrize("token", ["1999", "x" * 64, "operator-secret-3"])
async def test_a_weak_operator_token_refuses_to_start(
    desk: Desk, tmp_path: Path, token: str
) -> None:
    env = {**ENV, "CLAW_OPERATOR_TOKEN": token}
    with pytest.raises(OperatorTokenError, match="CLAW_OPERATOR_TOKEN is too weak"):
        create_app(load_build(desk.out), state_dir=tmp_path / "state2", env=env)


async def test_the_sidecar_process_says_why_it_refuses_a_weak_token(desk: Desk) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "clawpod.sidecar", "--build", str(desk.out),
        "--host", "127.0.0.1", "--port", "0", "--admin-port", "0",
        "--state-dir", str(desk.state_dir.parent / "state2"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **ENV, "CLAW_OPERATOR_TOKEN": "1999"},
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), GUARD_S)
    assert process.returncode == 1 and b"listening" not in stdout
    message = stderr.decode()
    assert "refusing to start: CLAW_OPERATOR_TOKEN is too weak" in message
    assert "openssl rand -hex 32" in message and "1999" not in message


def _failures(desk: Desk) -> list[dict]:
    records = audit_records(desk.state_dir, "claw-sidecar")
    return [r for r in records if r.get("event") == "operator_sign_in_failed"]


async def _failures_when(desk: Desk, count: int) -> list[dict]:
    while len(found := _failures(desk)) < count:
        await asyncio.sleep(0.02)
    return found


async def test_a_wrong_console_token_makes_the_peer_wait_and_is_audited(desk: Desk) -> None:
    async with ConsoleClient(desk.sidecar.admin_url) as client:
        status, _, _ = await client.sign_in("1999")
        assert status == 403
        # At once, even the right token is not looked at: the guesser must wait.
        status, page, response = await client.sign_in(OPERATOR_TOKEN)
        assert status == 429 and "retry in 1 s" in page
        assert response.headers["Retry-After"] == "1"
        assert client.session_cookie() is None
    [failure] = await asyncio.wait_for(_failures_when(desk, 1), GUARD_S)
    assert failure["via"] == "console" and failure["peer"] == "127.0.0.1"
    assert failure["failures"] == 1 and failure["retry_after_s"] == 1.0
    assert "1999" not in str(failure)
    pass_sign_in_delays(desk)
    async with ConsoleClient(desk.sidecar.admin_url) as client:
        status, _, _ = await client.sign_in(OPERATOR_TOKEN)
        assert status == 303  # once the wait is over, the right token signs in


async def test_parallel_guesses_at_the_api_are_checked_one_at_a_time(desk: Desk) -> None:
    """Many guesses at once from one peer: one is compared, the rest refused unread; each
    further failure doubles the wait."""

    async def guess(session: aiohttp.ClientSession, token: str) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        async with session.get(
            desk.sidecar.admin_url + "/operator/approvals", headers=headers
        ) as r:
            return r.status

    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(*(guess(session, f"{n:04d}") for n in range(40)))
        assert sorted(statuses) == [403] + [429] * 39
        assert await guess(session, OPERATOR_TOKEN) == 429
        pass_sign_in_delays(desk)
        assert await guess(session, "2000") == 403
        pass_sign_in_delays(desk)
        assert await guess(session, OPERATOR_TOKEN) == 200
    failures = await asyncio.wait_for(_failures_when(desk, 2), GUARD_S)
    assert [(f["via"], f["failures"], f["retry_after_s"]) for f in failures] == [
        ("operator_api", 1, 1.0),
        ("operator_api", 2, 2.0),
    ]


@pytest.mark.parametrize("path", ["/console/sign-in", "/operator/approvals", "/metrics", "/readyz"])
async def test_a_rebound_name_is_refused_on_the_operator_listener(desk: Desk, path: str) -> None:
    """A page at evil.example whose name now resolves to the listener: its requests carry
    Host: evil.example. The listener's own names and IP addresses are served."""
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    port = desk.sidecar.admin.address[1]
    async with aiohttp.ClientSession(headers=headers) as session:
        for host, status in [
            ("evil.example", 403),
            (f"evil.example:{port}", 403),
            ("127.0.0.1.evil.example", 403),
            (f"127.0.0.1:{port}", 200),
            (f"[::1]:{port}", 200),
            ("claw-sidecar-admin:9090", 200),
            ("localhost", 200),
        ]:
            async with session.get(
                desk.sidecar.admin_url + path, headers={"Host": host}, allow_redirects=False
            ) as response:
                assert response.status == status, (host, await response.text())
                if status == 403:
                    assert (await response.json())["error"]["code"] == "forbidden_host"


async def test_a_form_field_sent_as_a_file_is_a_clear_400(desk: Desk) -> None:
    async with ConsoleClient(desk.sidecar.admin_url) as client:
        _, page, _ = await client.get("/console/sign-in")
        form = aiohttp.FormData()
        form.add_field("token", OPERATOR_TOKEN)
        form.add_field("csrf", csrf_of(page).encode(), filename="csrf.txt")
        async with client.session.post(
            client.base + "/console/sign-in", data=form, allow_redirects=False
        ) as response:
            assert response.status == 400
            assert "must be text" in await response.text()
        await client.sign_in(OPERATOR_TOKEN)
        form = aiohttp.FormData()
        form.add_field("csrf", client.csrf.encode(), filename="csrf.txt")
        async with client.session.post(
            client.base + "/console/sign-out", data=form, allow_redirects=False
        ) as response:
            assert response.status == 400
            assert "must be text" in await response.text()
