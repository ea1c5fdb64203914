"""The JWT check every identity at the door goes through (``sidecar/identity/``, SPEC §21), fed
hostile tokens and hostile key-set URLs: a real JWKS server on 127.0.0.1 counts every fetch."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid

import pytest

from clawpod.sidecar.identity.jwks import MAX_JWKS_BYTES, KeySet
from clawpod.sidecar.identity.tokens import JwtVerifier, TokenRejected
from clawpod.sidecar.manifest import TokenIssuer
from clawpod.sidecar.transport.client import HttpClient
from tests.support.jwks_server import (
    AUDIENCE,
    ISSUER,
    SigningKey,
    claims,
    jwks_server,
    key_set,
)

GUARD_S = 30.0  # against a hang, never a timing assertion


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict, payload: dict, signature: bytes = b"") -> str:
    head = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())
    return head + "." + _b64(signature)


def _from_file(*keys: SigningKey, claim: str = "sub") -> JwtVerifier:
    issuer = TokenIssuer(issuer=ISSUER, audience=AUDIENCE, jwks=key_set(*keys), claim=claim)
    return JwtVerifier(issuer, KeySet(document=issuer.jwks))


@pytest.fixture
def key() -> SigningKey:
    return SigningKey("k1")


async def test_a_valid_token_names_its_subject(key: SigningKey) -> None:
    verified = await _from_file(key).verify(key.sign(claims("alice")))
    assert verified.subject == "alice"


async def test_the_pods_claim_names_the_subject(key: SigningKey) -> None:
    token = key.sign(claims("svc-account", agent="trader"))
    assert (await _from_file(key, claim="agent").verify(token)).subject == "trader"
    with pytest.raises(TokenRejected, match="'agent' claim"):
        await _from_file(key, claim="agent").verify(key.sign(claims("x")))


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"exp": int(time.time()) - 600}, "expired"),
        ({"nbf": int(time.time()) + 600}, "not valid yet"),
        ({"aud": "another-pod"}, "audience"),
        ({"iss": "https://evil.test"}, "issuer"),
        ({"exp": None}, "'exp'"),
        ({"aud": None}, "'aud'"),
    ],
)
async def test_claims_out_of_bounds_are_refused(key: SigningKey, overrides, reason) -> None:
    with pytest.raises(TokenRejected, match=reason):
        await _from_file(key).verify(key.sign(claims("alice", **overrides)))


async def test_alg_none_is_refused(key: SigningKey) -> None:
    for alg in ("none", "None", "NONE"):
        token = _unsigned({"alg": alg, "kid": key.kid}, claims("alice"))
        with pytest.raises(TokenRejected, match="algorithm"):
            await _from_file(key).verify(token)


async def test_hs256_signed_with_the_rsa_public_key_is_refused(key: SigningKey) -> None:
    """The classic confusion: the public key's bytes used as an HMAC secret."""
    for secret in (key.public_pem, json.dumps(key.jwk).encode()):
        header, payload = {"alg": "HS256", "kid": key.kid, "typ": "JWT"}, claims("alice")
        head = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())
        signature = hmac.new(secret, head.encode(), hashlib.sha256).digest()
        with pytest.raises(TokenRejected, match="algorithm 'HS256' is not its key's"):
            await _from_file(key).verify(head + "." + _b64(signature))


async def test_another_keys_signature_is_refused(key: SigningKey) -> None:
    forger = SigningKey(key.kid)  # same kid, other key
    with pytest.raises(TokenRejected, match="signature"):
        await _from_file(key).verify(forger.sign(claims("alice")))


@pytest.mark.parametrize(
    "garbage",
    ["", "a.b.c", "not a token", "eyJhbGciOiJSUzI1NiJ9..", "x" * 20000, "é.é.é"],
)
async def test_garbage_is_refused_without_echo(key: SigningKey, garbage: str) -> None:
    with pytest.raises(TokenRejected) as refused:
        await _from_file(key).verify(garbage)
    assert garbage[:8] not in str(refused.value) or not garbage


async def test_symmetric_and_private_keys_in_a_key_set_are_never_used(key: SigningKey) -> None:
    secret = _b64(b"shared-secret-of-the-idp")
    document = {"keys": [{"kty": "oct", "k": secret, "kid": "hs", "alg": "HS256"}, key.jwk]}
    issuer = TokenIssuer(issuer=ISSUER, audience=AUDIENCE, jwks=document)
    verifier = JwtVerifier(issuer, KeySet(document=document))
    header = {"alg": "HS256", "kid": "hs"}
    head = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims("eve")).encode())
    signature = hmac.new(b"shared-secret-of-the-idp", head.encode(), hashlib.sha256).digest()
    with pytest.raises(TokenRejected, match="key the issuer does not publish"):
        await verifier.verify(head + "." + _b64(signature))


def _from_url(url: str, client: HttpClient, refresh_ms: int = 60000) -> JwtVerifier:
    issuer = TokenIssuer(issuer=ISSUER, audience=AUDIENCE, jwks_url=url, jwks_refresh_ms=refresh_ms)
    return JwtVerifier(issuer, KeySet(url=url, client=client, refresh_interval_s=refresh_ms / 1000))


@pytest.fixture
async def client():  # type: ignore[no-untyped-def]
    client = HttpClient(keepalive_s=30, connect_timeout_s=5)
    yield client
    await client.close()


async def test_an_unknown_kid_flood_fetches_the_key_set_once(
    key: SigningKey, client: HttpClient
) -> None:
    async with jwks_server(key) as server:
        verifier = _from_url(server.jwks_url, client)
        assert (await verifier.verify(key.sign(claims("alice")))).subject == "alice"
        assert server.fetches == 1
        flood = [SigningKey(uuid.uuid4().hex[:8]) for _ in range(3)]
        tokens = [flood[i % 3].sign(claims("mallory"), kid=uuid.uuid4().hex) for i in range(300)]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(verifier.verify(t) for t in tokens), return_exceptions=True),
            GUARD_S,
        )
        assert all(isinstance(o, TokenRejected) for o in outcomes)
        assert server.fetches == 1  # the interval has not passed since the first fetch


async def test_a_flood_before_any_fetch_fetches_once(key: SigningKey, client: HttpClient) -> None:
    async with jwks_server(key) as server:
        verifier = _from_url(server.jwks_url, client)
        tokens = [key.sign(claims("m"), kid=uuid.uuid4().hex) for _ in range(200)]
        await asyncio.wait_for(
            asyncio.gather(*(verifier.verify(t) for t in tokens), return_exceptions=True),
            GUARD_S,
        )
        assert server.fetches == 1  # single-flight, then the interval


async def test_a_rotated_key_is_accepted_after_one_refresh(
    key: SigningKey, client: HttpClient
) -> None:
    async with jwks_server(key) as server:
        verifier = _from_url(server.jwks_url, client, refresh_ms=200)
        await verifier.verify(key.sign(claims("alice")))
        rotated = SigningKey("k2")
        server.keys = [rotated]
        token = rotated.sign(claims("alice"))
        deadline = time.monotonic() + GUARD_S
        while True:  # refused until the interval since the last fetch has passed
            try:
                assert (await verifier.verify(token)).subject == "alice"
                break
            except TokenRejected:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        assert server.fetches == 2
        with pytest.raises(TokenRejected):  # the old key is gone with its set
            await verifier.verify(key.sign(claims("alice")))


async def test_a_hanging_key_set_url_fails_closed(key: SigningKey, client: HttpClient) -> None:
    async with jwks_server(key) as server:
        verifier = _from_url(server.hanging_url, client)
        with pytest.raises(TokenRejected, match="does not publish"):
            await asyncio.wait_for(verifier.verify(key.sign(claims("alice"))), GUARD_S)
        assert verifier.keys.fetches == 1


async def test_a_key_set_url_answering_1gb_fails_closed(
    key: SigningKey, client: HttpClient
) -> None:
    async with jwks_server(key) as server:
        verifier = _from_url(server.endless_url, client)
        with pytest.raises(TokenRejected, match="does not publish"):
            await asyncio.wait_for(verifier.verify(key.sign(claims("alice"))), GUARD_S)
        await asyncio.sleep(0.2)  # let the server notice the closed connection
        # What was read is bounded; what the server got out before the close is its buffers'.
        assert server.hostile_bytes_sent < 64 * MAX_JWKS_BYTES


async def test_a_remembered_token_is_checked_again_once_its_keys_changed(
    key: SigningKey, client: HttpClient
) -> None:
    """Accepted tokens are remembered (a verification costs ~160 µs), never past a change of
    the issuer's keys: a key the issuer withdrew stops its tokens at the next refresh."""
    async with jwks_server(key) as server:
        verifier = _from_url(server.jwks_url, client, refresh_ms=200)
        token = key.sign(claims("alice"))
        await verifier.verify(token)
        await verifier.verify(token)
        assert server.fetches == 1
        server.keys = [SigningKey("k2")]  # k1 withdrawn
        probe = server.keys[0].sign(claims("bob"))
        deadline = time.monotonic() + GUARD_S
        while server.fetches < 2:  # an unknown kid refreshes once the interval allows
            try:
                await verifier.verify(probe)
            except TokenRejected:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        with pytest.raises(TokenRejected, match="does not publish"):
            await verifier.verify(token)
