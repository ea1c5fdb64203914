"""The suite's authorization server (tests/support/authorization_server.py) does what the
sidecar's OAuth tests rely on, checked with joserfc against its own published JWKS."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet

from tests.support.authorization_server import AuthorizationServerProcess

REDIRECT = "http://127.0.0.1:1/callback"


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def verified(server: AuthorizationServerProcess, token: str) -> dict[str, Any]:
    keys = KeySet.import_key_set(get_json(server.jwks_url))
    return dict(jwt.decode(token, keys, algorithms=["RS256", "ES256"]).claims)


def header_of(token: str) -> dict[str, Any]:
    import base64

    head = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))


def test_metadata_names_the_endpoints(authorization_server: AuthorizationServerProcess) -> None:
    server = authorization_server
    document = get_json(f"{server.issuer}/.well-known/oauth-authorization-server")
    assert document["issuer"] == server.issuer
    assert document["token_endpoint"] == server.token_url
    assert document["jwks_uri"] == server.jwks_url
    assert "urn:ietf:params:oauth:grant-type:token-exchange" in document["grant_types_supported"]
    assert get_json(f"{server.issuer}/.well-known/openid-configuration") == document


def test_client_credentials_issue_a_signed_jwt_for_the_resource(
    authorization_server: AuthorizationServerProcess,
) -> None:
    server = authorization_server
    server.add_client("svc", "s3cret", scopes=("orders.write",), audiences=("https://api",))
    answer = server.client_credentials("svc", "s3cret", "orders.write other", "https://api")
    claims = verified(server, answer["access_token"])
    assert answer["token_type"].lower() == "bearer" and answer["expires_in"] == 3600
    assert claims["aud"] == "https://api" and claims["sub"] == "svc"
    assert claims["scope"] == "orders.write" and claims["iss"] == server.issuer
    assert header_of(answer["access_token"])["alg"] == "RS256"
    with pytest.raises(RuntimeError, match="invalid_client"):
        server.client_credentials("svc", "wrong")
    with pytest.raises(RuntimeError, match="invalid_target"):
        server.client_credentials("svc", "s3cret", resource="https://elsewhere")


def test_rotation_signs_with_a_new_kid_and_keeps_the_old_one_published(
    authorization_server: AuthorizationServerProcess,
) -> None:
    server = authorization_server
    server.add_client("rotor", "pw")
    before = header_of(server.client_credentials("rotor", "pw")["access_token"])["kid"]
    kid = server.rotate_key("ES256")
    token = server.client_credentials("rotor", "pw")["access_token"]
    assert header_of(token) == {"alg": "ES256", "typ": "at+jwt", "kid": kid} and kid != before
    published = {key["kid"] for key in get_json(server.jwks_url)["keys"]}
    assert {before, kid} <= published
    assert verified(server, token)["sub"] == "rotor"
    server.rotate_key("RS256")


def test_end_user_token_by_code_and_pkce_then_exchanged_for_the_actor(
    authorization_server: AuthorizationServerProcess,
) -> None:
    server = authorization_server
    server.add_user("alice", "wonderland")
    server.add_client(
        "runner",
        scopes=("openid", "orders.read"),
        audiences=("clawpod",),
        grant_types=("authorization_code",),
        redirect_uris=(REDIRECT,),
    )
    server.add_client(
        "pod-sidecar",
        "pod-secret",
        scopes=("orders.read",),
        audiences=("https://orders",),
        grant_types=("urn:ietf:params:oauth:grant-type:token-exchange",),
    )
    user = server.end_user_token("alice", "wonderland", "runner", REDIRECT, "openid", "clawpod")
    user_claims = verified(server, user["access_token"])
    assert user_claims["sub"] == "alice" and user_claims["aud"] == "clawpod"
    with pytest.raises(RuntimeError, match="refused"):
        server.end_user_token("alice", "guess", "runner", REDIRECT)

    exchanged = server.exchange(
        user["access_token"], "pod-sidecar", "pod-secret", "orders.read", "https://orders"
    )
    claims = verified(server, exchanged["access_token"])
    assert exchanged["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert claims["sub"] == "alice" and claims["act"] == {"sub": "pod-sidecar"}
    assert claims["aud"] == "https://orders" and claims["scope"] == "orders.read"
    assert claims["exp"] <= user_claims["exp"]
    with pytest.raises(RuntimeError, match="invalid_request"):
        server.exchange("not-a-token", "pod-sidecar", "pod-secret")


def test_failures_on_demand_and_counts(authorization_server: AuthorizationServerProcess) -> None:
    server = authorization_server
    server.add_client("flaky", "pw")
    server.fail_next(1, 503)
    with pytest.raises(RuntimeError, match="503"):
        server.client_credentials("flaky", "pw")
    server.client_credentials("flaky", "pw")
    assert server.counts()["failed"] >= 1
