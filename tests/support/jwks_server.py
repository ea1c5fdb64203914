"""Signing keys made with ``cryptography``, tokens signed with PyJWT, and a real aiohttp server
on 127.0.0.1 that publishes their JWKS (counting each fetch), for tests of the sidecar's door
that need keys under the test's control: rotation at will, and the hostile answers of a JWKS
URL (one that never answers, one that answers without end).

Tests of the whole identity flow use the real authorization server
(``tests/support/authorization_server.py``) where it is on the branch."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://idp.test"
AUDIENCE = "clawpod"
HOUR_S = 3600


@dataclass
class SigningKey:
    kid: str
    private: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    @property
    def jwk(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "alg": "RS256", "use": "sig"}

    @property
    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        return jwt.encode(
            claims, self.private, algorithm="RS256", headers={"kid": self.kid, **header}
        )


def claims(subject: str, **overrides: Any) -> dict[str, Any]:
    """Valid claims for ``subject`` (an hour left), with ``overrides`` (None removes a claim)."""
    now = int(time.time())
    base = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": subject,
        "iat": now,
        "exp": now + HOUR_S,
        "jti": uuid.uuid4().hex,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def key_set(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [key.jwk for key in keys]}


@dataclass
class JwksServer:
    url: str
    keys: list[SigningKey]
    fetches: int = 0
    hostile_bytes_sent: int = 0

    @property
    def jwks_url(self) -> str:
        return self.url + "/jwks"

    @property
    def hanging_url(self) -> str:
        return self.url + "/hang"

    @property
    def endless_url(self) -> str:
        return self.url + "/endless"


@asynccontextmanager
async def jwks_server(*keys: SigningKey) -> AsyncIterator[JwksServer]:
    """``/jwks``: the keys now in ``server.keys``; ``/hang``: headers, then nothing, ever;
    ``/endless``: a 1 GB body (Content-Length says so), sent as fast as it is read."""
    server = JwksServer("", list(keys))

    async def published(request: web.Request) -> web.Response:
        server.fetches += 1
        return web.json_response(key_set(*server.keys))

    async def hang(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await asyncio.sleep(3600)
        return response

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 1 << 30
        await response.prepare(request)
        chunk = b'{"keys":[' + b" " * (64 * 1024 - 9)
        try:
            while server.hostile_bytes_sent < 1 << 30:
                await response.write(chunk)
                server.hostile_bytes_sent += len(chunk)
                chunk = b" " * (64 * 1024)
        except (ConnectionError, asyncio.CancelledError):
            pass
        return response

    app = web.Application()
    app.router.add_get("/jwks", published)
    app.router.add_get("/hang", hang)
    app.router.add_get("/endless", endless)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()
