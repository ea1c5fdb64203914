"""A real OAuth 2.1 / OpenID Connect authorization server for the suite (SPEC §21), run as its
own process on 127.0.0.1 (``python -m tests.support.authorization_server``; the fixture
:func:`running_authorization_server` starts and stops it).

It is built on authlib's server components (``authlib.oauth2``, the Flask integration), a
maintained implementation of the grants, client authentication, PKCE (RFC 7636) and metadata
(RFC 8414), so the sidecar meets the protocol as a real identity provider speaks it, errors
included, not as a hand-written stub would. What authlib leaves to its user is ours: the
storage (in memory), the RFC 8693 token-exchange grant (authlib ships no implementation: its
extension-grant interface carries ours) and the keys (joserfc, authlib's own JOSE library).

It offers:
- the client credentials grant, issuing RS256 (or, after a rotation to it, ES256) JWT access
  tokens (RFC 9068 claims) for a ``resource`` (RFC 8707) or ``audience`` and scopes;
- the authorization code grant with PKCE, its login posted as a form (no browser), for end
  users' access tokens;
- RFC 8693 token exchange: an end user's access token this server issued as the subject, the
  authenticated client as the actor (``act``), the user as ``sub``;
- ``/jwks`` and key rotation on demand (``POST /test/rotate``: a new ``kid`` signs from then
  on, the old keys stay published);
- ``/.well-known/oauth-authorization-server`` and ``/.well-known/openid-configuration``;
- test controls under ``/test/``: register clients and users, count token requests, fail the
  next token requests.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
REPO = Path(__file__).resolve().parents[2]


# --- the server process -------------------------------------------------------------------
# Everything below up to the client side runs inside the server process only; its imports
# (Flask, authlib, joserfc) stay inside so the suite's modules load without them.


def build_app(issuer_holder: dict[str, str]) -> Any:
    """The Flask application: authlib's authorization server over in-memory storage."""
    from authlib.integrations.flask_oauth2 import AuthorizationServer
    from authlib.oauth2 import OAuth2Error
    from authlib.oauth2.rfc6749 import ClientMixin, grants
    from authlib.oauth2.rfc6749.errors import InvalidGrantError, InvalidRequestError
    from authlib.oauth2.rfc6750 import BearerTokenGenerator
    from authlib.oauth2.rfc7636 import CodeChallenge
    from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
    from flask import Flask, jsonify, request
    from joserfc import jwt
    from joserfc.errors import JoseError
    from joserfc.jwk import ECKey, KeySet, RSAKey

    app = Flask("authorization_server")
    state = _State()

    class Keys:
        """The signing key of the moment and every key published so far (rotation keeps old
        ones in the JWKS so tokens already issued still verify)."""

        def __init__(self) -> None:
            self.published: list[Any] = []
            self.current: Any = None
            self.alg = "RS256"
            self.rotate("RS256")

        def rotate(self, alg: str) -> str:
            kid = f"{alg.lower()}-{secrets.token_hex(4)}"
            parameters = {"kid": kid, "use": "sig", "alg": alg}
            if alg == "RS256":
                key = RSAKey.generate_key(2048, parameters=parameters, private=True)
            elif alg == "ES256":
                key = ECKey.generate_key("P-256", parameters=parameters, private=True)
            else:
                raise ValueError(f"unsupported alg {alg}")
            self.published.append(key)
            self.current, self.alg = key, alg
            return kid

        def key_set(self) -> Any:
            return KeySet(self.published)

        def public_jwks(self) -> dict[str, Any]:
            return {"keys": [key.as_dict(private=False) for key in self.published]}

    keys = Keys()

    def sign(claims: dict[str, Any]) -> str:
        header = {"alg": keys.alg, "typ": "at+jwt", "kid": keys.current.kid}
        return jwt.encode(header, claims, keys.current)

    def verified_claims(token: str) -> dict[str, Any]:
        """The claims of an access token this server issued and that has not expired."""
        try:
            decoded = jwt.decode(token, keys.key_set(), algorithms=["RS256", "ES256"])
        except (JoseError, ValueError) as exc:
            raise InvalidRequestError("subject_token is not a token of this server") from exc
        claims = dict(decoded.claims)
        if claims.get("iss") != issuer_holder["issuer"] or claims.get("exp", 0) < time.time():
            raise InvalidGrantError("subject_token expired or not issued here")
        return claims

    class Client(ClientMixin):
        def __init__(self, record: dict[str, Any]) -> None:
            self.record = record

        def get_client_id(self) -> str:
            return self.record["client_id"]

        def get_default_redirect_uri(self) -> str:
            return self.record.get("redirect_uris", [""])[0]

        def get_allowed_scope(self, scope: str) -> str:
            allowed = set(self.record.get("scopes", []))
            return " ".join(s for s in (scope or "").split() if s in allowed)

        def check_redirect_uri(self, redirect_uri: str) -> bool:
            return redirect_uri in self.record.get("redirect_uris", [])

        def check_client_secret(self, client_secret: str) -> bool:
            expected = self.record.get("client_secret") or ""
            return bool(expected) and secrets.compare_digest(expected, client_secret)

        def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
            if self.record.get("client_secret"):
                return method in ("client_secret_basic", "client_secret_post")
            return method == "none"

        def check_response_type(self, response_type: str) -> bool:
            return response_type == "code"

        def check_grant_type(self, grant_type: str) -> bool:
            return grant_type in self.record.get("grant_types", [])

    @dataclass
    class User:
        username: str

        def get_user_id(self) -> str:
            return self.username

    def audience_of(client: Client) -> str:
        """The requested resource (RFC 8707) or audience, refused unless the client may ask
        for it; the client's id when it asked for none (RFC 9068 §3)."""
        wanted = request.form.get("resource") or request.form.get("audience")
        if not wanted:
            return client.get_client_id()
        if wanted not in client.record.get("audiences", []):
            raise OAuth2Error(error="invalid_target", description=f"{wanted} is not allowed")
        return wanted

    def issue(
        client: Client, grant_type: str, user: User | None, scope: str, act: Any = None
    ) -> str:
        now = int(time.time())
        lifetime = int(client.record.get("expires_in", 3600))
        claims: dict[str, Any] = {
            "iss": issuer_holder["issuer"],
            "sub": user.get_user_id() if user else client.get_client_id(),
            "aud": audience_of(client),
            "client_id": client.get_client_id(),
            "scope": scope,
            "iat": now,
            "exp": now + lifetime,
            "jti": secrets.token_hex(12),
        }
        if act is not None:
            claims["act"] = act
            subject_exp = getattr(user, "expires_at", None)
            if subject_exp is not None:  # an exchanged token outlives not its subject's
                claims["exp"] = min(claims["exp"], int(subject_exp))
        state.issued.append(claims)
        return sign(claims)

    def expires_in(client: Client, grant_type: str) -> int:
        return int(client.record.get("expires_in", 3600))

    generator = BearerTokenGenerator(
        lambda client, grant_type, user, scope: issue(client, grant_type, user, scope),
        expires_generator=expires_in,
    )

    class ClientCredentials(grants.ClientCredentialsGrant):
        TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    class AuthorizationCode(grants.AuthorizationCodeGrant):
        TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]

        def save_authorization_code(self, code: str, request: Any) -> None:
            state.codes[code] = {
                "client_id": request.client.get_client_id(),
                "redirect_uri": request.payload.redirect_uri,
                "scope": request.payload.scope,
                "user": request.user.username,
                "code_challenge": request.payload.data.get("code_challenge"),
                "code_challenge_method": request.payload.data.get("code_challenge_method"),
                "auth_time": time.time(),
            }

        def query_authorization_code(self, code: str, client: Client) -> Any:
            record = state.codes.get(code)
            if record and record["client_id"] == client.get_client_id():
                return _Code(code, record)
            return None

        def delete_authorization_code(self, authorization_code: Any) -> None:
            state.codes.pop(authorization_code.code, None)

        def authenticate_user(self, authorization_code: Any) -> User:
            return User(authorization_code.record["user"])

    class TokenExchange(grants.BaseGrant, grants.TokenEndpointMixin):
        """RFC 8693: the authenticated client (the agent's sidecar) acts for the user whose
        access token it presents; the issued token names the user as ``sub`` and the client
        in ``act`` (§4.1), and never outlives the subject token."""

        GRANT_TYPE = TOKEN_EXCHANGE
        TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

        def validate_token_request(self) -> None:
            client = self.authenticate_token_endpoint_client()
            if not client.check_grant_type(self.GRANT_TYPE):
                raise OAuth2Error(error="unauthorized_client")
            form = self.request.payload.data
            if form.get("subject_token_type") not in (ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE):
                raise InvalidRequestError("subject_token_type must name an access token")
            if not form.get("subject_token"):
                raise InvalidRequestError("subject_token is missing")
            subject = verified_claims(form["subject_token"])
            actor = {"sub": client.get_client_id()}
            if form.get("actor_token"):
                actor = {"sub": verified_claims(form["actor_token"])["sub"]}
            self.request.client = client
            self.request.user = _ExchangedUser(subject["sub"], subject["exp"], actor)

        def create_token_response(self) -> tuple[int, dict[str, Any], list[Any]]:
            client = self.request.client
            user = self.request.user
            scope = client.get_allowed_scope(self.request.payload.data.get("scope", ""))
            access_token = issue(client, self.GRANT_TYPE, user, scope, act=user.actor)
            lifetime = max(0, min(expires_in(client, self.GRANT_TYPE), user.expires_at - now()))
            token = {
                "access_token": access_token,
                "issued_token_type": ACCESS_TOKEN_TYPE,
                "token_type": "Bearer",
                "expires_in": lifetime,
                "scope": scope,
            }
            state.count(self.GRANT_TYPE)
            return 200, token, self.TOKEN_RESPONSE_HEADER

    def query_client(client_id: str) -> Client | None:
        record = state.clients.get(client_id)
        return Client(record) if record else None

    def save_token(token: dict[str, Any], request: Any) -> None:
        """Nothing to keep: the tokens are self-contained JWTs."""

    server = AuthorizationServer(app, query_client=query_client, save_token=save_token)
    server.register_token_generator("default", generator)
    server.register_grant(ClientCredentials)
    server.register_grant(AuthorizationCode, [CodeChallenge(required=True)])
    server.register_grant(TokenExchange)

    def metadata() -> dict[str, Any]:
        issuer = issuer_holder["issuer"]
        document = AuthorizationServerMetadata(
            {
                "issuer": issuer,
                "authorization_endpoint": f"{issuer}/authorize",
                "token_endpoint": f"{issuer}/token",
                "jwks_uri": f"{issuer}/jwks",
                "response_types_supported": ["code"],
                "grant_types_supported": [
                    "client_credentials",
                    "authorization_code",
                    TOKEN_EXCHANGE,
                ],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                    "none",
                ],
                "code_challenge_methods_supported": ["S256"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            }
        )
        document.validate()
        return dict(document)

    @app.post("/token")
    def token() -> Any:
        grant_type = request.form.get("grant_type", "")
        if state.failures:
            state.failures -= 1
            state.count("failed")
            return jsonify(error="temporarily_unavailable"), state.failure_status
        if grant_type != TOKEN_EXCHANGE:
            state.count(grant_type)
        return server.create_token_response()

    @app.route("/authorize", methods=["GET", "POST"])
    def authorize() -> Any:
        """GET: the login form a browser would show. POST: the login, answered with the
        redirect that carries the code."""
        if request.method == "GET":
            return (
                "<form method=post><input name=username><input name=password type=password>"
                "<button>Sign in</button></form>"
            )
        username = request.form.get("username", "")
        expected = state.users.get(username)
        password = request.form.get("password", "")
        user = User(username) if expected and secrets.compare_digest(expected, password) else None
        try:
            return server.create_authorization_response(grant_user=user)
        except OAuth2Error as error:
            return jsonify(error=error.error, error_description=error.description), 400

    @app.get("/jwks")
    def jwks() -> Any:
        state.count("jwks")
        return jsonify(keys.public_jwks())

    @app.get("/.well-known/oauth-authorization-server")
    @app.get("/.well-known/openid-configuration")
    def well_known() -> Any:
        return jsonify(metadata())

    @app.post("/test/clients")
    def register_client() -> Any:
        record = request.get_json()
        state.clients[record["client_id"]] = record
        return jsonify(ok=True)

    @app.post("/test/users")
    def register_user() -> Any:
        record = request.get_json()
        state.users[record["username"]] = record["password"]
        return jsonify(ok=True)

    @app.post("/test/rotate")
    def rotate() -> Any:
        kid = keys.rotate((request.get_json(silent=True) or {}).get("alg", "RS256"))
        return jsonify(kid=kid)

    @app.post("/test/fail")
    def fail_next() -> Any:
        settings = request.get_json()
        state.failures = int(settings.get("count", 1))
        state.failure_status = int(settings.get("status", 503))
        return jsonify(ok=True)

    @app.get("/test/counts")
    def counts() -> Any:
        return jsonify(state.counts)

    @app.get("/test/issued")
    def issued() -> Any:
        return jsonify(state.issued)

    return app


def now() -> int:
    return int(time.time())


@dataclass
class _State:
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    issued: list[dict[str, Any]] = field(default_factory=list)
    failures: int = 0
    failure_status: int = 503
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1


@dataclass
class _Code:
    """A stored authorization code, as authlib's grant reads it (AuthorizationCodeMixin)."""

    code: str
    record: dict[str, Any]

    def get_redirect_uri(self) -> str:
        return self.record["redirect_uri"]

    def get_scope(self) -> str:
        return self.record["scope"]

    def get_nonce(self) -> None:
        return None

    def get_auth_time(self) -> float:
        return self.record["auth_time"]

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None

    @property
    def code_challenge(self) -> str | None:
        return self.record["code_challenge"]

    @property
    def code_challenge_method(self) -> str | None:
        return self.record["code_challenge_method"]


@dataclass
class _ExchangedUser:
    username: str
    expires_at: int
    actor: dict[str, Any]

    def get_user_id(self) -> str:
        return self.username


def serve(port: int) -> None:
    """Serve on 127.0.0.1:``port`` (0: any free port) and print the port on the first line."""
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    issuer_holder = {"issuer": ""}
    app = build_app(issuer_holder)
    server = make_server("127.0.0.1", port, app, threaded=True)
    issuer_holder["issuer"] = f"http://127.0.0.1:{server.server_port}"
    print(server.server_port, flush=True)
    server.serve_forever()


# --- the client side: what tests use ------------------------------------------------------


@dataclass
class AuthorizationServerProcess:
    """A running authorization server and the test controls it offers."""

    issuer: str
    process: subprocess.Popen[bytes]

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    def control(self, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.issuer}{path}", data=data)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def add_client(
        self,
        client_id: str,
        client_secret: str | None = None,
        *,
        scopes: tuple[str, ...] = (),
        audiences: tuple[str, ...] = (),
        grant_types: tuple[str, ...] = ("client_credentials",),
        redirect_uris: tuple[str, ...] = (),
        expires_in: int = 3600,
    ) -> None:
        """Register a client: a confidential one with a secret, a public one (PKCE) without."""
        self.control(
            "/test/clients",
            {
                "client_id": client_id,
                "client_secret": client_secret,
                "scopes": list(scopes),
                "audiences": list(audiences),
                "grant_types": list(grant_types),
                "redirect_uris": list(redirect_uris),
                "expires_in": expires_in,
            },
        )

    def add_user(self, username: str, password: str) -> None:
        self.control("/test/users", {"username": username, "password": password})

    def rotate_key(self, alg: str = "RS256") -> str:
        """Sign from now on with a new key (RS256 or ES256); its ``kid``."""
        return self.control("/test/rotate", {"alg": alg})["kid"]

    def fail_next(self, count: int = 1, status: int = 503) -> None:
        """The next ``count`` token requests answer ``status`` with an OAuth error body."""
        self.control("/test/fail", {"count": count, "status": status})

    def counts(self) -> dict[str, int]:
        """Token requests served, by grant type (``failed``: the ones :meth:`fail_next` made)."""
        return self.control("/test/counts")

    def issued(self) -> list[dict[str, Any]]:
        """The claims of every access token issued so far."""
        return self.control("/test/issued")

    def client_credentials(
        self, client_id: str, client_secret: str, scope: str = "", resource: str = ""
    ) -> dict[str, Any]:
        form = {"grant_type": "client_credentials", "scope": scope}
        if resource:
            form["resource"] = resource
        return self._token(form, (client_id, client_secret))

    def end_user_token(
        self,
        username: str,
        password: str,
        client_id: str,
        redirect_uri: str,
        scope: str = "",
        resource: str = "",
    ) -> dict[str, Any]:
        """An end user's token by the authorization code grant with PKCE (S256), the login
        posted as a browser would post the form: the token response (``access_token`` …)."""
        verifier = secrets.token_urlsafe(48)
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            .rstrip(b"=")
            .decode()
        )
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": secrets.token_hex(8),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        if resource:
            query["resource"] = resource
        url = f"{self.issuer}/authorize?{urllib.parse.urlencode(query)}"
        login = urllib.parse.urlencode({"username": username, "password": password}).encode()
        location = _redirect_location(url, login)
        params = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
        if "code" not in params:
            raise RuntimeError(f"the login was refused: {location}")
        form = {
            "grant_type": "authorization_code",
            "code": params["code"][0],
            "redirect_uri": redirect_uri,
            "client_id": client_id,
            "code_verifier": verifier,
        }
        if resource:
            form["resource"] = resource
        return self._token(form, None)

    def exchange(
        self,
        subject_token: str,
        client_id: str,
        client_secret: str,
        scope: str = "",
        resource: str = "",
    ) -> dict[str, Any]:
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": subject_token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "scope": scope,
        }
        if resource:
            form["resource"] = resource
        return self._token(form, (client_id, client_secret))

    def _token(self, form: dict[str, str], basic: tuple[str, str] | None) -> dict[str, Any]:
        request = urllib.request.Request(self.token_url, data=urllib.parse.urlencode(form).encode())
        if basic is not None:
            pair = f"{basic[0]}:{basic[1]}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"token request refused: {error.code} {error.read()!r}") from None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _redirect_location(url: str, login: bytes) -> str:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        opener.open(urllib.request.Request(url, data=login), timeout=10)
    except urllib.error.HTTPError as error:
        if error.code in (301, 302, 303, 307):
            return error.headers["Location"]
        raise RuntimeError(f"the login answered {error.code}: {error.read()!r}") from None
    raise RuntimeError("the login did not redirect")


@contextmanager
def running_authorization_server() -> Iterator[AuthorizationServerProcess]:
    """Start the server as a process on a free port of 127.0.0.1; stop it (by its PID) after."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.authorization_server"],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the authorization server did not start: {line!r}")
        yield AuthorizationServerProcess(f"http://127.0.0.1:{int(line)}", process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    serve(parser.parse_args().port)
