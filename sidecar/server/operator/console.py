"""The operator console (SPEC §15): ``/console`` on the operator listener.

Server-rendered pages (Jinja2 templates shipped in the package, autoescaped) with one small
hand-written script that polls for pending approvals; no asset from outside the package and no
build step. Sign-in takes the operator token and opens a session (``console_session.py``);
every POST carries the session's CSRF token. Pages: approvals, audit, tools, limits, health.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import jinja2
import orjson
from aiohttp import web

from ...model.env_names import OPERATOR_TOKEN_ENV
from ...state.approvals import Approval, ApprovalError
from ...state.counters import SharedLimitsUnavailable
from ..front.edge import AuthError
from ..request.context import STATE_KEY, SidecarState
from . import console_data
from .console_session import (
    COOKIE_PATH,
    SESSION_COOKIE,
    SESSION_LIFETIME_S,
    SIGN_IN_COOKIE,
    SIGN_IN_FORM_S,
    Session,
    Sessions,
    same_secret,
)
from .operator_auth import SIGN_IN_KEY, audit_failure, peer_of, retry_after

SESSIONS_KEY: web.AppKey[Sessions] = web.AppKey("claw_console_sessions", Sessions)
TEMPLATES_KEY: web.AppKey[jinja2.Environment] = web.AppKey(
    "claw_console_templates", jinja2.Environment
)
CHECKS_KEY: web.AppKey[console_data.ChainChecks] = web.AppKey(
    "claw_console_chain_checks", console_data.ChainChecks
)
ASSETS = "console_assets"
STATIC = {"console.css": "text/css", "console.js": "text/javascript"}
MAX_REASON = 1000
MAX_FORM_BYTES = 16 * 1024
CONSOLE_WHO = "operator (console)"
# Arguments a list shows of each approval (indented JSON); the whole is on its own page.
LISTED_ARGUMENT_CHARS = 2048
JSON_SHOWN = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
FIELDS_ARE_TEXT = "Refused: every field of the form must be text (no files)."
NOTICE = re.compile(r"apr_[0-9a-f]{1,64} (approved|denied)")  # the only notice a page repeats
# Nothing but this sidecar's own pages, styles and script; no framing; no referrer elsewhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes browsers send "Origin: null"
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("clawpod.sidecar.server.operator", ASSETS),
        autoescape=True,  # every value is escaped: tool arguments are anyone's text
    )
    environment.filters["utc"] = _utc
    environment.filters["json"] = lambda value: orjson.dumps(value, option=JSON_SHOWN).decode()
    return environment


def _utc(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


# -- responses --------------------------------------------------------------------------------


def _page(request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
    state = request.app[STATE_KEY]
    html = (
        request.app[TEMPLATES_KEY]
        .get_template(template)
        .render(pod=state.config.pod, path=request.path, **values)
    )
    return web.Response(status=status, text=html, content_type="text/html")


def _refused(request: web.Request, status: int, message: str) -> web.Response:
    return _page(request, "refused.html.j2", status=status, message=message, session=None)


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def _set_cookie(
    response: web.StreamResponse, request: web.Request, name: str, value: str, max_age: int
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="Strict",
        secure=request.secure,  # over TLS the cookie never travels in the clear
    )


async def _add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path.startswith(COOKIE_PATH):
        response.headers.update(SECURITY_HEADERS)


# -- guards -----------------------------------------------------------------------------------


def _session(request: web.Request) -> Session | None:
    return request.app[SESSIONS_KEY].get(request.cookies.get(SESSION_COOKIE))


def _cross_origin(request: web.Request) -> bool:
    """A browser's POST from another site names it in ``Origin``; refuse those outright."""
    origin = request.headers.get("Origin")
    return origin is not None and urlsplit(origin).netloc != request.host


def page(handler: Callable[[web.Request, Session], Awaitable[web.StreamResponse]]) -> Handler:
    """A page for signed-in operators; others are sent to sign in."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        session = _session(request)
        if session is None:
            return _see_other(f"{COOKIE_PATH}/sign-in")
        return await handler(request, session)

    return guarded


def action(
    handler: Callable[[web.Request, Session, Any], Awaitable[web.StreamResponse]],
) -> Handler:
    """A state-changing POST: a live session, same origin, and the session's CSRF token."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        session = _session(request)
        if session is None:
            return _refused(request, 403, "Your session has ended: sign in again.")
        if _cross_origin(request):
            return _refused(request, 403, "Refused: the request came from another site.")
        form = await _form(request)
        if form is None:
            return _refused(request, 400, FIELDS_ARE_TEXT)
        presented = form.get("csrf") or request.headers.get("X-CSRF-Token")
        if not same_secret(presented, session.csrf):
            return _refused(request, 403, "Refused: missing or wrong CSRF token.")
        return await handler(request, session, form)

    return guarded


async def _form(request: web.Request) -> Any:
    """The posted form; None when a field is not text (a file sent as ``csrf`` was a 500)."""
    if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
        raise web.HTTPRequestEntityTooLarge(MAX_FORM_BYTES, request.content_length)
    form = await request.post()
    if not all(isinstance(value, str) for value in form.values()):
        return None
    return form


# -- sign-in ----------------------------------------------------------------------------------


async def sign_in_form(request: web.Request) -> web.StreamResponse:
    return _sign_in_page(request)


def _sign_in_page(
    request: web.Request, status: int = 200, error: str | None = None
) -> web.Response:
    token = secrets.token_urlsafe(32)
    response = _page(
        request, "sign_in.html.j2", status=status, csrf=token, error=error, session=None
    )
    _set_cookie(response, request, SIGN_IN_COOKIE, token, SIGN_IN_FORM_S)
    return response


async def sign_in(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    if _cross_origin(request):
        return _refused(request, 403, "Refused: the request came from another site.")
    form = await _form(request)
    if form is None:
        return _sign_in_page(request, 400, FIELDS_ARE_TEXT)
    if not same_secret(form.get("csrf"), request.cookies.get(SIGN_IN_COOKIE, "")):
        return _sign_in_page(request, 403, "The form expired or was not this console's: retry.")
    if state.operator_token is None:
        return _sign_in_page(
            request, 403, f"The console is closed: the sidecar has no {OPERATOR_TOKEN_ENV}."
        )
    throttle, peer = request.app[SIGN_IN_KEY], peer_of(request)
    wait_s = throttle.wait_s(peer)
    if wait_s > 0:
        seconds = retry_after(wait_s)
        message = f"Too many wrong tokens from your address: retry in {seconds} s."
        response = _sign_in_page(request, 429, message)
        response.headers["Retry-After"] = seconds
        return response
    token = str(form.get("token", "")).strip()
    if not same_secret(token, state.operator_token):
        await audit_failure(request, "console", *throttle.failed(peer))
        return _sign_in_page(request, 403, _wrong_token(state, token))
    throttle.succeeded(peer)
    session = request.app[SESSIONS_KEY].open()
    response = _see_other(f"{COOKIE_PATH}/approvals")
    _set_cookie(response, request, SESSION_COOKIE, session.id, SESSION_LIFETIME_S)
    response.del_cookie(SIGN_IN_COOKIE, path=COOKIE_PATH)
    return response


def _wrong_token(state: SidecarState, token: str) -> str:
    try:
        state.verifier.authenticate({"Authorization": f"Bearer {token}"})
    except AuthError:
        return "That is not this sidecar's operator token."
    return "Agent tokens cannot sign in to the console: use the operator token."


@action
async def sign_out(request: web.Request, session: Session, form: Any) -> web.StreamResponse:
    request.app[SESSIONS_KEY].close(session.id)
    response = _see_other(f"{COOKIE_PATH}/sign-in")
    response.del_cookie(SESSION_COOKIE, path=COOKIE_PATH)
    return response


# -- approvals --------------------------------------------------------------------------------


def _approval_view(approval: Approval, shown_chars: int | None = None) -> dict[str, Any]:
    """The approval as a page shows it: ``arguments_text`` is its arguments as indented JSON
    (or the store's preview of huge ones), cut to ``shown_chars`` in a list (``shortened``:
    the whole is on the approval's own page, where it is decided)."""
    view = approval.public()
    view["expires_in_s"] = max(0, round(approval.expires - time.time()))
    text = view.get("arguments_preview")
    if text is None:
        text = orjson.dumps(view["arguments"], option=JSON_SHOWN).decode()
    view["shortened"] = shown_chars is not None and len(text) > shown_chars
    view["arguments_text"] = text[:shown_chars] if view["shortened"] else text
    return view


def _pending(state: SidecarState) -> list[Approval]:
    return [a for a in state.governed.approvals.listing() if a.status == "pending"]


def _version(pending: list[Approval]) -> str:
    """Names the set of pending approvals: the page's script asks again only when it moves."""
    return hashlib.blake2b("".join(a.id for a in pending).encode(), digest_size=8).hexdigest()


@page
async def approvals_page(request: web.Request, session: Session) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    finished = [
        a.public()
        for a in reversed(state.governed.approvals.listing(include_finished=True))
        if a.status != "pending"
    ][:20]
    pending = _pending(state)
    return _page(
        request,
        "approvals.html.j2",
        session=session,
        pending=[_approval_view(a, LISTED_ARGUMENT_CHARS) for a in pending],
        version=_version(pending),
        finished=finished,
        notice=request.query.get("notice", "")
        if NOTICE.fullmatch(request.query.get("notice", ""))
        else "",
    )


@page
async def pending_approvals(request: web.Request, session: Session) -> web.StreamResponse:
    """What the page's script polls each second: the version of the pending set, and its ids
    only when the version is not the one the script holds (``?version=``). Each new item is
    fetched once (``approval_item``): three tabs polling a queue of 64 KiB arguments cost
    19 MB a poll when every item was rendered on every poll."""
    pending = _pending(request.app[STATE_KEY])
    version = _version(pending)
    answer: dict[str, Any] = {"version": version}
    if request.query.get("version") != version:
        answer["ids"] = [a.id for a in pending]
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


def _open_approval(request: web.Request) -> Approval:
    approval = request.app[STATE_KEY].governed.approvals.get(request.match_info["approval_id"])
    if approval is None:
        raise web.HTTPNotFound()
    return approval


@page
async def approval_item(request: web.Request, session: Session) -> web.StreamResponse:
    """One pending approval as the list shows it (its arguments cut), for the page's script."""
    approval = _open_approval(request)
    if approval.status != "pending":
        raise web.HTTPNotFound()
    item = request.app[TEMPLATES_KEY].get_template("approval_item.html.j2")
    html = item.render(approval=_approval_view(approval, LISTED_ARGUMENT_CHARS), session=session)
    return web.Response(text=html, content_type="text/html")


@page
async def approval_page(request: web.Request, session: Session) -> web.StreamResponse:
    """One approval with its whole arguments (the store's preview past 64 KiB), decided here."""
    approval = _open_approval(request)
    return _page(request, "approval.html.j2", session=session, approval=_approval_view(approval))


@action
async def decide(request: web.Request, session: Session, form: Any) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    decision = form.get("decision")
    if decision not in ("approve", "deny"):
        return _refused(request, 400, "Choose approve or deny.")
    reason = str(form.get("reason", "")).strip()[:MAX_REASON] or None
    approval_id = request.match_info["approval_id"]
    try:
        decided = await state.governed.decide(approval_id, decision, reason, CONSOLE_WHO)
    except ApprovalError as err:
        return _refused(request, err.status, str(err))
    return _see_other(f"{COOKIE_PATH}/approvals?notice={decided.id}+{decided.status}")


# -- audit, tools, limits, health -------------------------------------------------------------


@page
async def audit_page(request: web.Request, session: Session) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    wanted = console_data.AuditFilter.from_query(request.query)
    records = console_data.recent_records(state, wanted)
    chains = await asyncio.to_thread(request.app[CHECKS_KEY].check, state, list(records))
    return _page(
        request,
        "audit.html.j2",
        session=session,
        wanted=wanted,
        agents=console_data.audited_agents(state),
        records=records,
        chains={chain.agent: chain for chain in chains},
        last_hour=_last_hour(),
    )


def _last_hour() -> tuple[str, str]:
    """The filters' example times: the hour up to now, in the form the filters read."""
    now = time.time()
    return tuple(  # type: ignore[return-value]
        datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M") for t in (now - 3600, now)
    )


@page
async def tools_page(request: web.Request, session: Session) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    report = state.drift.report()
    return _page(
        request,
        "tools.html.j2",
        session=session,
        quarantined=report["quarantined"],
        backends=report["mcp_backends"],
    )


@page
async def limits_page(request: web.Request, session: Session) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        budgets, unreachable = await console_data.budgets(state), False
        end_users = await console_data.end_users(state)
    except SharedLimitsUnavailable:  # fail-closed, and the store away: nothing to show
        budgets, end_users, unreachable = [], None, True
    return _page(
        request,
        "limits.html.j2",
        session=session,
        budgets=budgets,
        end_users=end_users,
        store_unreachable=unreachable,
        rates=console_data.rate_limits(state),
    )


@page
async def health_page(request: web.Request, session: Session) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    return _page(request, "health.html.j2", session=session, health=console_data.health(state))


async def home(request: web.Request) -> web.StreamResponse:
    return _see_other(f"{COOKIE_PATH}/approvals")


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    body = resources.files("clawpod.sidecar.server.operator").joinpath(ASSETS, name).read_bytes()
    return web.Response(body=body, content_type=STATIC[name])


def add_console(app: web.Application) -> None:
    """Mount the console on the operator app (its state is ``app[STATE_KEY]``)."""
    app[SESSIONS_KEY] = Sessions()
    app[TEMPLATES_KEY] = _templates()
    app[CHECKS_KEY] = console_data.ChainChecks()
    app.on_response_prepare.append(_add_security_headers)
    router = app.router
    router.add_get(COOKIE_PATH, home)
    router.add_get(f"{COOKIE_PATH}/", home)
    router.add_get(f"{COOKIE_PATH}/sign-in", sign_in_form)
    router.add_post(f"{COOKIE_PATH}/sign-in", sign_in)
    router.add_post(f"{COOKIE_PATH}/sign-out", sign_out)
    router.add_get(f"{COOKIE_PATH}/approvals", approvals_page)
    router.add_get(f"{COOKIE_PATH}/approvals/pending", pending_approvals)
    router.add_get(f"{COOKIE_PATH}/approvals/{{approval_id}}", approval_page)
    router.add_get(f"{COOKIE_PATH}/approvals/{{approval_id}}/item", approval_item)
    router.add_post(f"{COOKIE_PATH}/approvals/{{approval_id}}", decide)
    router.add_get(f"{COOKIE_PATH}/audit", audit_page)
    router.add_get(f"{COOKIE_PATH}/tools", tools_page)
    router.add_get(f"{COOKIE_PATH}/limits", limits_page)
    router.add_get(f"{COOKIE_PATH}/health", health_page)
    router.add_get(f"{COOKIE_PATH}/static/{{name}}", static)
