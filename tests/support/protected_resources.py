"""Services protected by the suite's authorization server (SPEC §21), on 127.0.0.1: an HTTP
tool service and an MCP one (the official SDK's server), each accepting only an access token
that the server signed for it (checked with joserfc against the server's JWKS), recording the
claims of every call; and a hostile token endpoint (it hangs, answers 1 GB, answers what is not
a token)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import uvicorn
from aiohttp import web
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from tests.support.mcp_service import build_service


@dataclass
class TokenCheck:
    """Accepts a Bearer JWT of ``issuer`` for ``audience``; records what each request carried."""

    issuer: str
    audience: str
    reject: int = 0  # answer 401 to this many valid tokens first (-1: to every one)
    seen: list[dict[str, Any] | None] = field(default_factory=list)  # claims, None: refused
    tokens: list[str] = field(default_factory=list)

    def claims(self, authorization: str | None) -> dict[str, Any] | None:
        """The token's claims, or None when the request must be answered 401."""
        token = (authorization or "").removeprefix("Bearer ")
        self.tokens.append(token)
        claims = self._verified(token) if token else None
        if claims is not None and self.reject != 0:
            self.reject -= 1 if self.reject > 0 else 0
            claims = None
        self.seen.append(claims)
        return claims

    def _verified(self, token: str) -> dict[str, Any] | None:
        with urllib.request.urlopen(f"{self.issuer}/jwks", timeout=10) as answer:
            keys = KeySet.import_key_set(json.loads(answer.read()))
        try:
            claims = dict(jwt.decode(token, keys, algorithms=["RS256", "ES256"]).claims)
        except (JoseError, ValueError):
            return None
        audience = claims.get("aud")
        if claims.get("iss") != self.issuer or audience != self.audience:
            return None
        return claims

    @property
    def calls(self) -> int:
        return len(self.seen)


@dataclass
class HttpResource:
    url: str
    check: TokenCheck


@contextlib.asynccontextmanager
async def protected_http_service(check: TokenCheck) -> AsyncIterator[HttpResource]:
    """``GET /whoami``: the caller's claims (and its token echoed back, as a careless service
    would), 401 without a token the check accepts."""

    async def whoami(request: web.Request) -> web.Response:
        authorization = request.headers.get("Authorization")
        claims = check.claims(authorization)
        if claims is None:
            return web.json_response(
                {"error": "invalid_token"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return web.json_response(
            {"sub": claims["sub"], "act": claims.get("act"), "echo": authorization}
        )

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield HttpResource(f"http://127.0.0.1:{port}", check)
    finally:
        await runner.cleanup()


@dataclass
class McpResource:
    url: str  # the MCP endpoint
    check: TokenCheck
    metadata: dict[str, Any] = field(default_factory=dict)  # its RFC 9728 document


class _ProtectedMcp:
    """ASGI: RFC 9728 metadata at its well-known URL, the MCP endpoint behind the check (a 401
    names the metadata in ``WWW-Authenticate``, RFC 9728 §5.1)."""

    def __init__(self, app: Any, resource: McpResource, metadata_url: str) -> None:
        self.app = app
        self.resource = resource
        self.metadata_url = metadata_url

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith("/.well-known/oauth-protected-resource"):
            await _send(send, 200, orjson.dumps(self.resource.metadata), b"application/json")
            return
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization")
        claims = self.resource.check.claims(authorization.decode() if authorization else None)
        if claims is None:
            challenge = f'Bearer resource_metadata="{self.metadata_url}"'.encode()
            await _send(send, 401, b"unauthorized", b"text/plain", challenge)
            return
        await self.app(scope, receive, send)


async def _send(
    send: Any, status: int, body: bytes, content_type: bytes, challenge: bytes | None = None
) -> None:
    headers = [(b"content-type", content_type)]
    if challenge is not None:
        headers.append((b"www-authenticate", challenge))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def protected_mcp_service(
    check: TokenCheck, authorization_servers: list[str]
) -> AsyncIterator[McpResource]:
    service = build_service(token="")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    resource = McpResource(
        url, check, {"resource": url, "authorization_servers": authorization_servers}
    )
    metadata_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    app = _ProtectedMcp(
        service.server.streamable_http_app(json_response=True), resource, metadata_url
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield resource
    finally:
        server.should_exit = True
        await task
        sock.close()


Misbehaviour = Literal["hang", "huge", "not json", "no token", "echo secret"]
GIGABYTE = 1024**3


@dataclass
class HostileTokenEndpoint:
    url: str = ""
    behaviour: Misbehaviour = "hang"
    requests: int = 0
    bytes_sent: int = 0


@contextlib.asynccontextmanager
async def hostile_token_endpoint(behaviour: Misbehaviour) -> AsyncIterator[HostileTokenEndpoint]:
    endpoint = HostileTokenEndpoint(behaviour=behaviour)
    release = asyncio.Event()

    async def token(request: web.Request) -> web.StreamResponse:
        endpoint.requests += 1
        await request.read()
        if behaviour == "hang":
            await release.wait()
            return web.Response(status=503)
        if behaviour == "not json":
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        if behaviour == "no token":
            return web.json_response({"token_type": "Bearer", "expires_in": 3600})
        if behaviour == "echo secret":
            return web.json_response(
                {"error": "invalid_client", "error_description": request.headers["Authorization"]},
                status=401,
            )
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"access_token":"')
        block = b"a" * 65536
        with contextlib.suppress(ConnectionError):
            while endpoint.bytes_sent < GIGABYTE:
                await response.write(block)
                endpoint.bytes_sent += len(block)
        return response

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    endpoint.url = f"http://127.0.0.1:{port}/token"
    try:
        yield endpoint
    finally:
        release.set()
        await runner.cleanup()
