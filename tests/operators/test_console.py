"""The operator console (SPEC §15) over HTTP, attacker's side first: who can sign in, what a
session cookie is worth elsewhere, CSRF, escaping; then the pages an operator uses."""

from __future__ import annotations

import asyncio
import html
import re
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from clawpod.sidecar.server.admin import create_admin_app
from clawpod.sidecar.server.operator.console import CHECKS_KEY, SESSIONS_KEY
from clawpod.sidecar.server.operator.console_session import SESSION_IDLE_S
from clawpod.sidecar.server.request.context import STATE_KEY
from clawpod.sidecar.state.approvals import ARGUMENTS_PREVIEW_BYTES
from tests.execution.test_governance import (
    OPERATOR_TOKEN,
    TRADE,
    Desk,
    ask_analyst,
    pass_sign_in_delays,
    trade,
)
from tests.operators.console_client import ConsoleClient, csrf_of
from tests.operators.desk import start_desk
from tests.support.services import ToolService
from tests.support.sidecar import audit_records
from tests.support.upstream import StubUpstream
from tests.transport.test_client import _certificate as certificate

# What one pending approval may cost in the list, whatever its arguments (about 2 KiB of them).
LISTED_ITEM_CAP = 8192
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
async def console(desk: Desk) -> AsyncIterator[ConsoleClient]:
    async with ConsoleClient(desk.sidecar.admin_url) as client:
        status, _, _ = await client.sign_in(OPERATOR_TOKEN)
        assert status == 303
        yield client


async def _pending_in_console(console: ConsoleClient, count: int = 1) -> list[dict]:
    while True:
        pending = await console.pending()
        if len(pending) >= count:
            return pending
        await asyncio.sleep(0.02)


async def test_sign_in_sets_a_strict_http_only_session_cookie(desk: Desk) -> None:
    async with ConsoleClient(desk.sidecar.admin_url) as client:
        status, _, response = await client.sign_in(OPERATOR_TOKEN)
        assert status == 303 and response.headers["Location"] == "/console/approvals"
        cookie = next(
            v for k, v in response.headers.items() if k == "Set-Cookie" and "claw_console=" in v
        )
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
        assert "Secure" not in cookie  # plain HTTP here; over TLS it is set
        status, page, response = await client.get("/console/approvals")
        assert status == 200 and "Pending approvals" in page
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Frame-Options"] == "DENY"


async def test_agent_tokens_and_wrong_tokens_cannot_sign_in(desk: Desk) -> None:
    for token, says in [
        (desk.tokens["analyst"], "Agent tokens cannot sign in"),
        (desk.tokens["trader"], "Agent tokens cannot sign in"),
        ("guess", "not this sidecar's operator token"),
        (OPERATOR_TOKEN + "x", "not this sidecar's operator token"),
    ]:
        pass_sign_in_delays(desk)  # each wrong token makes the next attempt wait
        async with ConsoleClient(desk.sidecar.admin_url) as client:
            status, page, _ = await client.sign_in(token)
            assert status == 403 and says in html.unescape(page)
            assert client.session_cookie() is None
            status, _, response = await client.get("/console/approvals")
            assert status == 303 and response.headers["Location"] == "/console/sign-in"


async def test_the_sign_in_form_needs_its_own_csrf_token(desk: Desk) -> None:
    async with ConsoleClient(desk.sidecar.admin_url) as client:
        status, _, _ = await client.post("/console/sign-in", {"token": OPERATOR_TOKEN})
        assert status == 403 and client.session_cookie() is None
        status, _, _ = await client.post(
            "/console/sign-in", {"token": OPERATOR_TOKEN, "csrf": "forged"}
        )
        assert status == 403 and client.session_cookie() is None


async def test_posts_without_the_right_csrf_token_are_refused(
    desk: Desk, console: ConsoleClient
) -> None:
    waiting = asyncio.create_task(trade(desk, TRADE))
    [approval] = await _pending_in_console(console)
    path = f"/console/approvals/{approval['id']}"
    for form in [{"decision": "approve"}, {"decision": "approve", "csrf": "wrong"}]:
        status, page, _ = await console.post(path, form)
        assert status == 403 and "CSRF" in page
    # The right token from another site (a browser names it in Origin) is refused too.
    status, page, _ = await console.post(
        path,
        {"decision": "approve", "csrf": console.csrf},
        headers={"Origin": "https://evil.example"},
    )
    assert status == 403 and "another site" in page
    status, _, _ = await console.post("/console/sign-out", {})
    assert status == 403
    assert [a["id"] for a in await console.pending()] == [approval["id"]]  # still pending
    assert desk.service.requests == []
    status, _, _ = await console.post(
        path, {"decision": "deny", "reason": "csrf test", "csrf": console.csrf}
    )
    assert status == 303
    assert (await waiting)["error"]["code"] == "approval_denied"


async def test_expired_forged_and_signed_out_cookies_are_refused(
    desk: Desk, console: ConsoleClient
) -> None:
    sessions = desk.sidecar.admin.app[SESSIONS_KEY]
    real = console.session_cookie()
    assert real
    console.set_session_cookie("forged-" + real[7:])
    status, _, _ = await console.get("/console/audit")
    assert status == 303
    console.set_session_cookie(real)
    assert (await console.get("/console/audit"))[0] == 200
    clock = sessions.clock
    sessions.clock = lambda: clock() + SESSION_IDLE_S + 1
    try:
        assert (await console.get("/console/audit"))[0] == 303
        status, _, _ = await console.post("/console/sign-out", {"csrf": console.csrf})
        assert status == 403
    finally:
        sessions.clock = clock
    assert (await console.get("/console/audit"))[0] == 303  # gone for good once expired
    async with ConsoleClient(desk.sidecar.admin_url) as again:
        await again.sign_in(OPERATOR_TOKEN)
        status, _, response = await again.post("/console/sign-out", {"csrf": again.csrf})
        assert status == 303 and response.headers["Location"] == "/console/sign-in"
        assert (await again.get("/console/approvals"))[0] == 303


async def test_a_session_of_one_sidecar_is_nothing_to_another(
    desk: Desk, console: ConsoleClient, tmp_path: Path, service: ToolService
) -> None:
    """Two pods with the same operator token: a cookie and CSRF token from one do not open
    the other."""
    async with StubUpstream() as upstream:
        other = await start_desk(tmp_path / "other", service, upstream, pod_name="other")
        try:
            async with ConsoleClient(other.sidecar.admin_url) as stranger:
                stranger.set_session_cookie(console.session_cookie() or "")
                assert (await stranger.get("/console/approvals"))[0] == 303
                status, _, _ = await stranger.post("/console/sign-out", {"csrf": console.csrf})
                assert status == 403
        finally:
            await other.sidecar.close()


async def test_tool_arguments_with_html_are_escaped_everywhere(
    desk: Desk, console: ConsoleClient
) -> None:
    hostile_trade = {**TRADE, "symbol": HOSTILE}
    waiting = asyncio.create_task(trade(desk, hostile_trade))
    [item] = await _pending_in_console(console)
    _, page, _ = await console.get("/console/approvals")
    for rendered in (item["html"], page):
        assert "<script>alert" not in rendered and "<img src=x" not in rendered
        assert "&lt;script&gt;alert(" in rendered
    status, _, _ = await console.post(
        f"/console/approvals/{item['id']}",
        {"decision": "deny", "reason": HOSTILE, "csrf": console.csrf},
    )
    assert status == 303
    await waiting
    _, page, _ = await console.get("/console/audit?agent=trader")
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(" in page
    _, page, _ = await console.get("/console/approvals")
    assert "<script>alert" not in page and "&lt;img src=x" in page


async def test_approve_from_the_console_runs_the_call_once(
    desk: Desk, console: ConsoleClient
) -> None:
    waiting = asyncio.create_task(trade(desk, TRADE))
    [item] = await _pending_in_console(console)
    for shown in ("desk.execute_trade", "trader", "desk-trader", "approvals.require", "NVDA"):
        assert shown in item["html"]
    status, _, response = await console.post(
        f"/console/approvals/{item['id']}",
        {"decision": "approve", "reason": "checked the size", "csrf": console.csrf},
    )
    assert status == 303
    _, page, _ = await console.get(response.headers["Location"])
    assert f"{item['id']} approved" in page
    result = await waiting
    assert result["ok"] is True and len(desk.service.requests) == 1
    [decided] = [r for r in audit_records(desk.state_dir, "trader") if r.get("event")]
    assert (decided["decision"], decided["reason"], decided["who"]) == (
        "approved",
        "checked the size",
        "operator (console)",
    )
    status, page, _ = await console.post(
        f"/console/approvals/{item['id']}", {"decision": "approve", "csrf": console.csrf}
    )
    assert status == 409 and len(desk.service.requests) == 1  # decided once


async def test_audit_page_filters_and_shows_traces_tokens_and_the_chain(
    desk: Desk, console: ConsoleClient
) -> None:
    await ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "AAPL"}))
    await ask_analyst(desk, ("c2", "desk_get_quote", {"symbol": "MSFT"}))
    _, page, _ = await console.get("/console/audit?agent=analyst")
    assert "Agent analyst" in page and "Chain intact: 2 records verified" in page
    assert (
        page.count("<caption>Tool trace</caption>") == 2
        and "desk.get_quote" in page
        and "AAPL" in page
    )
    assert re.search(r"tokens \d+ in / \d+ out", page)
    _, page, _ = await console.get("/console/audit?agent=analyst&limit=1")
    assert "MSFT" in page and "AAPL" not in page  # newest first
    _, page, _ = await console.get("/console/audit?tool=execute_trade")
    assert "AAPL" not in page
    _, page, _ = await console.get("/console/audit?outcome=error")
    assert "AAPL" not in page
    _, page, _ = await console.get("/console/audit?since=2999-01-01")
    assert "No record matches" in page
    # A priced request's cost (the record's cost_usd) shows beside its tokens.
    priced = {"route": "/v1/chat/completions", "mode": "mediated", "outcome": {"status": "ok"}}
    await desk.sidecar.app[STATE_KEY].audit.append("analyst", {**priced, "cost_usd": 0.0123})
    _, page, _ = await console.get("/console/audit?agent=analyst&limit=1")
    assert "cost $0.0123" in page
    # A record edited on disk shows on the page as a broken chain.
    await desk.sidecar.app[STATE_KEY].audit.close()  # on disk before it is edited
    log = desk.state_dir / "audit" / "analyst.jsonl"
    log.write_bytes(log.read_bytes().replace(b"AAPL", b"AAPX"))
    _, page, _ = await console.get("/console/audit?agent=analyst")
    assert "problem(s)" in page and "content does not match its hash" in page


async def test_a_tool_call_over_mcp_shows_no_model_tokens(
    desk: Desk, console: ConsoleClient
) -> None:
    """An MCP tools/call reaches no model: "tokens 0 in / 0 out" on its card said otherwise."""
    quote = await trade(desk, {"symbol": "NVDA"}, tool="desk_get_quote")
    assert quote["ok"] is True
    _, page, _ = await console.get("/console/audit?agent=trader")
    assert "<code>/mcp</code>" in page and "desk.get_quote" in page
    assert "tokens " not in page


async def test_the_time_filters_suggest_the_last_hour_not_a_fixed_date(
    console: ConsoleClient,
) -> None:
    _, page, _ = await console.get("/console/audit")
    since = re.search(r'id="f-since"[^>]*placeholder="([^"]*)"', page)
    until = re.search(r'id="f-until"[^>]*placeholder="([^"]*)"', page)
    assert since and until
    now = datetime.now(UTC)
    shown = [
        datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M").replace(tzinfo=UTC) for m in (since, until)
    ]
    assert shown[1] - shown[0] == timedelta(hours=1)
    assert abs(now - shown[1]) < timedelta(hours=1)  # today's, whatever the day


async def test_limits_tools_and_health_pages(desk: Desk, console: ConsoleClient) -> None:
    await ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "HOT"}))
    _, page, _ = await console.get("/console/limits")
    assert "analyst" in page and "20" in page  # the analyst's 20-token budget
    assert "2/minute" in page and re.search(r"desk.get_quote</code>: 1\.\d+<", page)
    _, page, _ = await console.get("/console/tools")
    assert "No tool is quarantined" in page
    desk.sidecar.app[STATE_KEY].executor.quarantine.hold("desk.get_quote", "definition changed")
    _, page, _ = await console.get("/console/tools")
    assert "desk.get_quote" in page and "definition changed" in page
    _, page, _ = await console.get("/console/health")
    assert "writable" in page and "keyed" in page


async def test_the_console_is_closed_without_an_operator_token(
    tmp_path: Path, service: ToolService
) -> None:
    async with StubUpstream() as upstream:
        desk = await start_desk(tmp_path, service, upstream, env={"CLAW_OPERATOR_TOKEN": ""})
        try:
            async with ConsoleClient(desk.sidecar.admin_url) as client:
                status, page, _ = await client.sign_in("")
                assert status == 403 and "closed" in page
        finally:
            await desk.sidecar.close()


async def test_a_chain_is_checked_once_per_change_and_a_huge_one_is_left_to_clawc(
    desk: Desk, console: ConsoleClient
) -> None:
    """Page views must not re-read a large log each time (CPU the agents need)."""
    await ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "AAPL"}))
    checks = desk.sidecar.admin.app[CHECKS_KEY]
    state = desk.sidecar.app[STATE_KEY]
    [first] = checks.check(state, ["analyst"])
    [again] = checks.check(state, ["analyst"])
    assert again is first  # unchanged log: the earlier result
    await ask_analyst(desk, ("c2", "desk_get_quote", {"symbol": "MSFT"}))
    [changed] = checks.check(state, ["analyst"])
    assert changed.records == 2
    checks.max_bytes = 100
    _, page, _ = await console.get("/console/audit?agent=analyst")
    assert "Chain not checked on this page" in page and "clawc audit verify" in page


async def test_a_restart_signs_everyone_out(desk: Desk, console: ConsoleClient) -> None:
    cookie = console.session_cookie()
    await desk.restart()
    restarted = ConsoleClient(desk.sidecar.admin_url)
    async with restarted:
        restarted.set_session_cookie(cookie or "")
        assert (await restarted.get("/console/approvals"))[0] == 303
        status, _, _ = await restarted.post("/console/sign-out", {"csrf": console.csrf})
        assert status == 403


async def test_over_tls_the_session_cookie_is_secure(desk: Desk, tmp_path: Path) -> None:
    """The operator app served over TLS (as behind a TLS-terminating listener of its own): the
    session cookie is marked Secure so it never travels in the clear."""
    cert, key = certificate(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    client_side = ssl.create_default_context(cafile=str(cert))
    runner = web.AppRunner(create_admin_app(desk.sidecar.app[STATE_KEY]))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_side).start()
    base = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        connector = aiohttp.TCPConnector(ssl=client_side)
        jar = aiohttp.CookieJar(unsafe=True)  # keep cookies of an IP address host
        async with aiohttp.ClientSession(connector=connector, cookie_jar=jar) as session:
            async with session.get(base + "/console/sign-in") as response:
                form = {"token": OPERATOR_TOKEN, "csrf": csrf_of(await response.text())}
                assert "Secure" in response.headers["Set-Cookie"]
            async with session.post(
                base + "/console/sign-in", data=form, allow_redirects=False
            ) as response:
                assert response.status == 303
                cookie = response.headers.getall("Set-Cookie")
                [session_cookie] = [c for c in cookie if c.startswith("claw_console=")]
                assert "Secure" in session_cookie and "HttpOnly" in session_cookie
    finally:
        await runner.cleanup()


async def test_budgets_in_tokens_and_dollars(tmp_path: Path, service: ToolService) -> None:
    budgets = "{{analyst: {{usd-per-day: 2.5}}, trader: {{tokens-per-day: 500, usd-per-day: 1.0}}}}"
    async with StubUpstream() as upstream:
        desk = await start_desk(tmp_path, service, upstream, budgets=budgets)
        try:
            async with ConsoleClient(desk.sidecar.admin_url) as console:
                await console.sign_in(OPERATOR_TOKEN)
                _, page, _ = await console.get("/console/limits")
        finally:
            await desk.sidecar.close()
    analyst = page[page.index("<td>analyst</td>") :].split("</tr>")[0]
    trader = page[page.index("<td>trader</td>") :].split("</tr>")[0]
    assert "no token budget" in analyst and "$2.5" in analyst
    assert "<td>500</td>" in trader and "$1.0" in trader


async def test_huge_arguments_show_as_a_preview_with_size_and_digest(
    desk: Desk, console: ConsoleClient
) -> None:
    huge = {**TRADE, "symbol": "<b>" + "X" * (ARGUMENTS_PREVIEW_BYTES + 1000)}
    waiting = asyncio.create_task(trade(desk, huge))
    [item] = await _pending_in_console(console)
    assert "read them all to decide" in item["html"] and "&lt;b&gt;XXX" in item["html"]
    assert 'action="/console/approvals/' not in item["html"]  # decided on its own page
    _, page, _ = await console.get("/console/approvals")
    assert item["id"] in page
    status, page, _ = await console.get(f"/console/approvals/{item['id']}")
    assert status == 200 and "bytes (canonical JSON, digest" in page
    assert (
        len(page) < 2 * ARGUMENTS_PREVIEW_BYTES
        and f'action="/console/approvals/{item["id"]}"' in page
    )
    await console.post(
        f"/console/approvals/{item['id']}", {"decision": "deny", "csrf": console.csrf}
    )
    await waiting


async def test_an_idle_poll_of_a_queue_of_large_arguments_costs_a_few_bytes(
    desk: Desk, console: ConsoleClient
) -> None:
    """Eight approvals of near-64 KiB arguments wait (every poll once re-rendered them all:
    19 MB a poll for a full queue, and three open tabs slowed every agent). The script's poll
    now carries the version, the ids only when it moved, each item once, its arguments cut."""
    queue = 8
    symbol = "Q" * (ARGUMENTS_PREVIEW_BYTES - 1024)
    waiting = [
        asyncio.create_task(trade(desk, {**TRADE, "symbol": symbol, "quantity": n}))
        for n in range(1, queue + 1)
    ]
    items = await _pending_in_console(console, queue)
    assert all(len(item["html"]) < LISTED_ITEM_CAP for item in items)
    for _ in range(3):  # what each tab's script then asks each second
        async with console.session.get(
            console.base + "/console/approvals/pending", params={"version": console.version}
        ) as response:
            idle_poll = await response.read()
        assert len(idle_poll) < 100 and b"ids" not in idle_poll
    _, page, _ = await console.get("/console/approvals")
    assert len(page) < queue * LISTED_ITEM_CAP + 16384
    status, page, _ = await console.get(f"/console/approvals/{items[0]['id']}")
    assert status == 200 and symbol in page  # the whole arguments, on the approval's own page
    for item in items:
        await console.post(
            f"/console/approvals/{item['id']}", {"decision": "deny", "csrf": console.csrf}
        )
    await asyncio.gather(*waiting)
