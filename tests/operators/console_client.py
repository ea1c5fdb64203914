"""A browser-like client of the operator console for tests: its own cookie jar, sign-in through
the form, and the CSRF token read from the page as a browser's form would send it."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
from yarl import URL

CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = CSRF_FIELD.search(html)
    assert match, html
    return match.group(1)


class ConsoleClient:
    def __init__(self, admin_url: str) -> None:
        self.base = admin_url
        # unsafe: keep cookies of an IP address host (the test sidecar is on 127.0.0.1).
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf = ""
        self.version = ""  # of the pending approvals last seen by pending()
        self.items: dict[str, str] = {}  # each pending approval's item, fetched once

    async def __aenter__(self) -> ConsoleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def get(self, path: str) -> tuple[int, str, aiohttp.ClientResponse]:
        async with self.session.get(self.base + path, allow_redirects=False) as response:
            return response.status, await response.text(), response

    async def post(
        self, path: str, form: dict[str, str], headers: dict[str, str] | None = None
    ) -> tuple[int, str, aiohttp.ClientResponse]:
        async with self.session.post(
            self.base + path, data=form, headers=headers or {}, allow_redirects=False
        ) as response:
            return response.status, await response.text(), response

    async def sign_in(self, token: str) -> tuple[int, str, aiohttp.ClientResponse]:
        status, html, _ = await self.get("/console/sign-in")
        assert status == 200
        answer = await self.post("/console/sign-in", {"token": token, "csrf": csrf_of(html)})
        if answer[0] == 303:
            status, html, _ = await self.get("/console/approvals")
            assert status == 200, html
            self.csrf = csrf_of(html)
        return answer

    async def pending(self) -> list[dict[str, Any]]:
        """The pending approvals as the page's script sees them: it polls the version, gets
        the ids when it moved, and fetches each new item once (``id`` and ``html``)."""
        async with self.session.get(
            self.base + "/console/approvals/pending",
            params={"version": self.version},
            allow_redirects=False,
        ) as response:
            assert response.status == 200, await response.text()
            answer = await response.json()
        if "ids" in answer:
            self.items = {i: self.items.get(i) or await self._item(i) for i in answer["ids"]}
            self.version = answer["version"]
        return [{"id": i, "html": html} for i, html in self.items.items() if html]

    async def _item(self, approval_id: str) -> str:
        status, html, _ = await self.get(f"/console/approvals/{approval_id}/item")
        return html if status == 200 else ""

    def session_cookie(self) -> str | None:
        for cookie in self.session.cookie_jar:
            if cookie.key == "claw_console":
                return cookie.value
        return None

    def set_session_cookie(self, value: str) -> None:
        """Present ``value`` as the session cookie, as a browser holding it would."""
        self.session.cookie_jar.clear()
        self.session.cookie_jar.update_cookies(
            {"claw_console": value}, response_url=URL(self.base + "/console/")
        )
