"""An identity provider's public keys (a JSON Web Key Set, RFC 7517), as the sidecar holds
them (SPEC §21): read from the build (the pod's ``jwks-file``) or fetched from the issuer's
``jwks-url``, cached, and fetched again only for a ``kid`` the cache does not know, at most
once per interval, whatever a flood of made-up ``kid``s asks (one fetch, single-flight).

Every answer of the JWKS URL is bounded: in time (``JWKS_TIMEOUT_S``, the whole exchange) and
in bytes (``MAX_JWKS_BYTES``); a URL that hangs or answers too much fails closed (the tokens
it would have verified are refused) and the reason is logged once per fetch.

Only asymmetric keys are kept (RSA, EC, OKP): an HMAC key (``kty: oct``) in a published key set
would let anyone who read it sign tokens, and an ``HS*`` token verified with an RSA key's
public bytes as its secret is the classic algorithm confusion. Each key is pinned to one
algorithm, its ``alg`` or the one its type implies; a token's ``alg`` must be its key's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from ..transport.client import HttpClient
from ..transport.errors import TransportError

log = logging.getLogger(__name__)
JWKS_TIMEOUT_S = 5.0
MAX_JWKS_BYTES = 256 * 1024
MAX_KEYS = 64
# The algorithm a key without ``alg`` is used with, by key type and curve.
_IMPLIED_ALGORITHM = {
    ("RSA", None): "RS256",
    ("EC", "P-256"): "ES256",
    ("EC", "P-384"): "ES384",
    ("EC", "P-521"): "ES512",
    ("OKP", "Ed25519"): "EdDSA",
}
_ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class JwksUnavailable(Exception):
    """The key set could not be read; the message says why (it holds no key material)."""


@dataclass(frozen=True, slots=True)
class PinnedKey:
    kid: str | None
    algorithm: str
    key: PyJWK


def parse_key_set(document: Any) -> list[PinnedKey]:
    """The usable keys of a JWKS document, each pinned to its algorithm. Keys of other uses
    (``use: enc``), symmetric keys and keys of unknown types are skipped; a document with no
    usable key is refused."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksUnavailable("the key set is not a JSON object with a 'keys' list")
    keys: list[PinnedKey] = []
    for entry in document["keys"][:MAX_KEYS]:
        pinned = _pinned(entry)
        if pinned is not None:
            keys.append(pinned)
    if not keys:
        raise JwksUnavailable("the key set holds no usable signing key (RSA, EC or OKP)")
    return keys


def _pinned(entry: Any) -> PinnedKey | None:
    if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
        return None
    kty, kid = entry.get("kty"), entry.get("kid")
    if kid is not None and not isinstance(kid, str):
        return None
    algorithm = entry.get("alg")
    if algorithm is None:
        algorithm = _IMPLIED_ALGORITHM.get((kty, entry.get("crv") if kty != "RSA" else None))
    if algorithm not in _ASYMMETRIC:
        return None  # HS*, none, or a type this verifier does not pin
    try:
        key = PyJWK(entry, algorithm)
    except (PyJWKError, ValueError, TypeError):
        return None
    return PinnedKey(kid, algorithm, key)


class KeySet:
    """One issuer's keys: a fixed set (from the build), or a URL's, fetched on demand."""

    def __init__(
        self,
        *,
        url: str | None = None,
        document: Mapping[str, Any] | None = None,
        client: HttpClient | None = None,
        refresh_interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._client = client
        self._interval = refresh_interval_s
        self._clock = clock
        self._keys: list[PinnedKey] = parse_key_set(document) if document is not None else []
        self._last_fetch: float | None = None
        self._fetching: asyncio.Lock | None = None
        self.fetches = 0
        """Fetches of the URL so far (the refresh bound's tests and the console read it)."""
        self.generation = 0
        """Changes whenever the keys do: a token verified under other keys is checked again."""

    async def key_for(self, kid: str | None) -> PinnedKey | None:
        """The key a token's ``kid`` names (a token without one: the set's only key), fetching
        the set once if the cache does not know it and the interval allows."""
        found = self._find(kid)
        if found is not None or self._url is None:
            return found
        if self._fetching is None:
            self._fetching = asyncio.Lock()
        async with self._fetching:
            found = self._find(kid)  # a fetch another token waited for may have brought it
            if found is None and self._may_fetch():
                await self._fetch()
                found = self._find(kid)
        return found

    def _find(self, kid: str | None) -> PinnedKey | None:
        if kid is None:
            return self._keys[0] if len(self._keys) == 1 else None
        return next((key for key in self._keys if key.kid == kid), None)

    def _may_fetch(self) -> bool:
        return self._last_fetch is None or self._clock() - self._last_fetch >= self._interval

    async def _fetch(self) -> None:
        assert self._url is not None and self._client is not None
        self._last_fetch = self._clock()  # a failed fetch counts: a flood cannot hammer a down IdP
        self.fetches += 1
        try:
            self._keys = parse_key_set(await self._download(self._url, self._client))
            self.generation += 1
        except JwksUnavailable as exc:
            log.warning("JWKS of %s not refreshed (its tokens are refused): %s", self._url, exc)

    @staticmethod
    async def _download(url: str, client: HttpClient) -> Any:
        try:
            response = await client.request(
                "GET",
                url,
                headers={"Accept": "application/json"},
                timeout_s=JWKS_TIMEOUT_S,
                max_body_bytes=MAX_JWKS_BYTES,
            )
            try:
                body = await response.read(MAX_JWKS_BYTES)
                status = response.status
            finally:
                response.release()
        except TransportError as exc:
            raise JwksUnavailable(f"fetching the key set failed: {exc.message}") from None
        except (TimeoutError, ValueError, OSError) as exc:
            raise JwksUnavailable(f"fetching the key set failed: {type(exc).__name__}") from None
        if status != 200:
            raise JwksUnavailable(f"the key set URL answered HTTP {status}")
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise JwksUnavailable("the key set URL answered something that is not JSON") from None
