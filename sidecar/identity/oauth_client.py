"""The service tokens the sidecar fetches and sends (SPEC §21): OAuth 2.1 client credentials,
and RFC 8693 token exchange of the verified end user's token (the end user as subject, the
pod's client as actor).

One :class:`ServiceTokens` serves HTTP and MCP tools alike. A token is fetched once for every
call waiting on it (single flight), kept until its expiry less a skew, fetched anew before a
call that would send it later than that, and dropped when the service answered 401 to it
(:meth:`ServiceTokens.token` with ``stale``). Everything from a token endpoint is hostile input:
each exchange is bounded in time and bytes, and a failure is a :class:`TokenUnavailable` whose
message says what went wrong without repeating what the endpoint said (only an RFC 6749 error
code, checked against its grammar). Tokens and client secrets live in this object's memory
only: never logged, audited or traced, and callers redact them like every credential.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from ..manifest import ToolAuth
from ..model.end_user import EndUser
from ..transport import BodyTooLarge, HttpClient, Timeout, TransportError

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
# One token endpoint's answer: a token response is well under 16 KiB.
MAX_TOKEN_RESPONSE_BYTES = 64 * 1024
MAX_ACCESS_TOKEN_CHARS = 16 * 1024
# The longest a fetch may take, whatever the call's own timeout.
TOKEN_TIMEOUT_S = 10.0
# A token is fetched anew this long before it expires (at most half its lifetime), so a call
# never leaves with a token that expires on the way.
EXPIRY_SKEW_S = 30.0
# A token response without expires_in (RFC 6749 lets the server leave it out) is kept this long.
DEFAULT_LIFETIME_S = 60.0
# However long a server says a token lives, it is fetched anew after this.
MAX_LIFETIME_S = 24 * 3600.0
MAX_CACHED_TOKENS = 10_000
# RFC 6749 §5.2: error codes are %x20-21 / %x23-5B / %x5D-7E.
ERROR_CODE = re.compile(r"^[\x20\x21\x23-\x5b\x5d-\x7e]{1,64}$")
# RFC 6750 §2.1 b64token: what may follow "Bearer " in a header.
BEARER_TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")


class TokenUnavailable(Exception):
    """No token could be had; the message is for the model and the operator (no secret in it)."""


@dataclass(frozen=True, slots=True)
class TokenKey:
    """What one cached token is for: the endpoint and client, the scopes and audience asked,
    and for an exchange, the end user (per (user, service, scopes))."""

    token_url: str
    client_id_env: str
    scopes: tuple[str, ...]
    audience: str | None
    resource: str | None
    end_user: tuple[str, str] | None  # (issuer, subject)


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    refresh_at: float  # on the monotonic clock


class ServiceTokens:
    """The sidecar's tokens for services, fetched through ``client`` (set by the executor's
    start) with the client credentials read from ``env``."""

    def __init__(self, env: Mapping[str, str], clock: Callable[[], float] = time.monotonic) -> None:
        self._env = env
        self._clock = clock
        self.client: HttpClient | None = None
        self._tokens: dict[TokenKey, _Token] = {}
        self._fetching: dict[TokenKey, asyncio.Future[_Token]] = {}

    def key(self, auth: ToolAuth, token_url: str, end_user: EndUser | None) -> TokenKey:
        exchange = auth.type == "token-exchange" and end_user is not None
        user = (end_user.issuer, end_user.subject) if exchange and end_user else None
        return TokenKey(
            token_url,
            auth.client_id_env or "",
            auth.scopes or (),
            auth.audience,
            auth.resource,
            user,
        )

    async def token(
        self,
        auth: ToolAuth,
        end_user: EndUser | None,
        *,
        timeout_s: float,
        token_url: str | None = None,
        stale: str | None = None,
    ) -> str:
        """A token for ``auth`` (and ``end_user``, for an exchange) to send now: the cached one
        unless it is near expiry or is ``stale`` (the service refused it). ``token_url``: a
        discovered endpoint, for an ``auth`` without its own."""
        url = token_url or auth.token_url
        if url is None:
            raise TokenUnavailable("no token endpoint is known for the service")
        if auth.type == "token-exchange" and end_user is None:
            raise TokenUnavailable(
                "this tool acts on behalf of the end user, and the request carries no verified "
                "end-user token; it is never sent with a shared credential"
            )
        if auth.type == "token-exchange" and end_user is not None:
            _refuse_past_expiry(end_user)
        key = self.key(auth, url, end_user)
        cached = self._tokens.get(key)
        if cached is not None and cached.value != stale and self._clock() < cached.refresh_at:
            return cached.value
        if stale is not None and cached is not None and cached.value == stale:
            del self._tokens[key]
        fetching = self._fetching.get(key)
        if fetching is None:
            fetching = asyncio.ensure_future(self._fetch(key, auth, end_user))
            self._fetching[key] = fetching
            fetching.add_done_callback(lambda done: self._fetched(key, done))
        try:
            async with asyncio.timeout(min(timeout_s, TOKEN_TIMEOUT_S)):
                # Shielded: one waiter giving up does not stop the fetch the others wait for.
                return (await asyncio.shield(fetching)).value
        except TimeoutError:
            raise TokenUnavailable(
                f"the token endpoint did not answer within {min(timeout_s, TOKEN_TIMEOUT_S):g} s"
            ) from None

    def _fetched(self, key: TokenKey, done: asyncio.Future[_Token]) -> None:
        if self._fetching.get(key) is done:
            del self._fetching[key]
        if done.cancelled() or done.exception() is not None:
            return  # every waiter got the failure; the next call asks again
        if len(self._tokens) >= MAX_CACHED_TOKENS:
            self._tokens.pop(next(iter(self._tokens)))
        self._tokens[key] = done.result()

    async def _fetch(self, key: TokenKey, auth: ToolAuth, end_user: EndUser | None) -> _Token:
        form = token_form(auth, end_user)
        headers = {
            "Authorization": client_authorization(self._client_credentials(auth)),
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        }
        started = self._clock()
        answer = await bounded_json(self._http(), "POST", key.token_url, headers, form)
        token = self._token_from(answer, started)
        if key.end_user is not None and end_user is not None:
            # Nothing done for the user outlives their own token (model/end_user.py).
            user_left = end_user.expires_at - time.time()
            token = _Token(token.value, min(token.refresh_at, started + user_left))
        return token

    def _token_from(self, answer: JsonAnswer, started: float) -> _Token:
        body = answer.body
        if answer.status != 200:
            raise TokenUnavailable(f"the token endpoint refused: {answer.status}{error_code(body)}")
        if not isinstance(body, dict):
            raise TokenUnavailable("the token endpoint answered 200 without a JSON object")
        value = body.get("access_token")
        if not isinstance(value, str) or not value:
            raise TokenUnavailable("the token endpoint answered 200 without an access_token")
        if len(value) > MAX_ACCESS_TOKEN_CHARS or not BEARER_TOKEN.match(value):
            raise TokenUnavailable("the token endpoint's access_token is not a bearer token")
        token_type = body.get("token_type", "Bearer")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise TokenUnavailable("the token endpoint issued a token that is not a Bearer token")
        lifetime = body.get("expires_in", DEFAULT_LIFETIME_S)
        if isinstance(lifetime, bool) or not isinstance(lifetime, int | float) or lifetime <= 0:
            raise TokenUnavailable("the token endpoint's expires_in is not a positive number")
        lifetime = min(float(lifetime), MAX_LIFETIME_S)
        return _Token(value, started + lifetime - min(EXPIRY_SKEW_S, lifetime / 2))

    def _client_credentials(self, auth: ToolAuth) -> tuple[str, str]:
        pair = []
        for name in (auth.client_id_env, auth.client_secret_env):
            value = self._env.get(name or "")
            if not value:
                raise TokenUnavailable(
                    f"the OAuth client credentials are not configured: environment variable "
                    f"{name} is not set in the sidecar"
                )
            pair.append(value)
        return pair[0], pair[1]

    def _http(self) -> HttpClient:
        if self.client is None:
            raise RuntimeError("ServiceTokens.client is set by ToolExecutor.start()")
        return self.client

    def secrets(self) -> tuple[str, ...]:
        """Every token held now (for tests' credential sweeps)."""
        return tuple(token.value for token in self._tokens.values())


def _refuse_past_expiry(end_user: EndUser) -> None:
    """No call acts for an end user after their token's ``exp``, not even with an exchanged token
    still cached: a long request outlives the token the door verified (docs/identity.md)."""
    if time.time() >= end_user.expires_at:
        raise TokenUnavailable(
            "the end user's token expired while the request ran; nothing is done on their behalf "
            "after it (the runner sends a fresh token with its next request)"
        )


def token_form(auth: ToolAuth, end_user: EndUser | None) -> bytes:
    """The token request's form (RFC 6749 §4.4, RFC 8693 §2.1), with RFC 8707's resource."""
    fields: list[tuple[str, str]] = []
    if auth.type == "token-exchange":
        assert end_user is not None
        fields += [
            ("grant_type", TOKEN_EXCHANGE_GRANT),
            ("subject_token", end_user.token),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
        ]
    else:
        fields.append(("grant_type", "client_credentials"))
    if auth.scopes:
        fields.append(("scope", " ".join(auth.scopes)))
    if auth.audience:
        fields.append(("audience", auth.audience))
    if auth.resource:
        fields.append(("resource", auth.resource))
    return urlencode(fields).encode()


def client_authorization(credentials: tuple[str, str]) -> str:
    """client_secret_basic (RFC 6749 §2.3.1): id and secret form-encoded, then base64."""
    client_id, secret = (quote(part, safe="") for part in credentials)
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


def error_code(body: Any) -> str:
    """`` (invalid_client)``: the RFC 6749 error code of a refusal, when it is one; nothing
    else an endpoint says is repeated."""
    code = body.get("error") if isinstance(body, dict) else None
    return f" ({code})" if isinstance(code, str) and ERROR_CODE.match(code) else ""


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    status: int
    body: Any  # the parsed JSON, or None when it was not JSON
    challenge: str | None = None  # WWW-Authenticate


async def bounded_json(
    client: HttpClient,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None = None,
    *,
    timeout_s: float = TOKEN_TIMEOUT_S,
    max_bytes: int = MAX_TOKEN_RESPONSE_BYTES,
) -> JsonAnswer:
    """One exchange with an OAuth endpoint, its answer at most ``max_bytes`` and the whole
    exchange at most ``timeout_s``; :class:`TokenUnavailable` otherwise. Redirects are not
    followed (the transport never does)."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.request(
                method, url, headers=headers, body=body, timeout_s=timeout_s
            )
            try:
                data = await response.read(max_bytes)
            finally:
                response.release()
    except (TimeoutError, Timeout):
        raise TokenUnavailable(
            f"the OAuth endpoint did not answer within {timeout_s:g} s"
        ) from None
    except BodyTooLarge:
        raise TokenUnavailable(
            f"the OAuth endpoint's answer is larger than {max_bytes} bytes"
        ) from None
    except TransportError as exc:
        raise TokenUnavailable(f"the OAuth endpoint could not be reached ({exc.message})") from None
    try:
        parsed = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        if response.status == 200:
            raise TokenUnavailable(
                "the OAuth endpoint answered 200 with a body that is not JSON"
            ) from None
        parsed = None
    return JsonAnswer(response.status, parsed, response.headers.get("www-authenticate"))
