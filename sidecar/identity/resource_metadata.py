"""Where an MCP service's tokens come from, when its descriptor names no ``token-url``
(SPEC §21): the service's RFC 9728 protected-resource metadata (named by the
``resource_metadata`` of its 401's ``WWW-Authenticate``, or at its well-known URL) names its
authorization server, whose RFC 8414 metadata names the token endpoint.

Every document on the way is hostile input that could aim the sidecar anywhere (SSRF): each URL
it follows must be http(s) on a host the descriptor lists in ``discovery-hosts``, never a
link-local address (cloud metadata services live there), and each exchange is bounded in time
and bytes like a token request (``oauth_client.bounded_json``)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from ..manifest import ToolAuth
from ..transport import HttpClient
from .oauth_client import TokenUnavailable, bounded_json

# WWW-Authenticate: Bearer resource_metadata="https://…" (RFC 9728 §5.1).
RESOURCE_METADATA = re.compile(r'resource_metadata\s*=\s*"([^"]{1,2048})"', re.IGNORECASE)
JSON_ACCEPT = {"Accept": "application/json"}
# What asks the service for its challenge: a ping, which no service acts on.
PROBE = b'{"jsonrpc":"2.0","id":0,"method":"ping"}'
PROBE_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def allowed_url(url: str, auth: ToolAuth, what: str) -> str:
    """``url`` when discovery may follow it; :class:`TokenUnavailable` naming ``what`` and why
    not (the URL itself is never repeated: it came from the service)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise TokenUnavailable(f"the {what} is not a URL") from None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host or parts.username or parts.password:
        raise TokenUnavailable(f"the {what} is not an http(s) URL without credentials")
    try:
        if ipaddress.ip_address(host).is_link_local:
            raise TokenUnavailable(f"the {what} is on a link-local address: refused")
    except ValueError:
        pass  # a name, not an address
    allowed = {entry.lower() for entry in auth.discovery_hosts or ()}
    if host not in allowed and f"{host}:{port}" not in allowed:
        raise TokenUnavailable(f"the {what} is on a host not in discovery-hosts: refused")
    return url


def metadata_url_from(challenge: str | None, endpoint: str) -> str:
    """The protected-resource metadata's URL: the challenge's ``resource_metadata``, else the
    well-known URL of ``endpoint`` (RFC 9728 §3.1)."""
    match = RESOURCE_METADATA.search(challenge or "")
    if match is not None:
        return match.group(1)
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}"


def authorization_server_metadata_url(issuer: str) -> str:
    """RFC 8414 §3.1: the well-known segment goes between the host and the issuer's path."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{path}"


async def discover_token_endpoint(
    client: HttpClient, auth: ToolAuth, endpoint: str, challenge: str | None
) -> str:
    """The token endpoint of the authorization server that protects ``endpoint``."""
    where = allowed_url(metadata_url_from(challenge, endpoint), auth, "resource metadata URL")
    document = await bounded_json(client, "GET", where, JSON_ACCEPT)
    if document.status != 200 or not isinstance(document.body, dict):
        raise TokenUnavailable("the service's protected-resource metadata could not be read")
    servers = document.body.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise TokenUnavailable("the service's protected-resource metadata names no server")
    issuer = allowed_url(servers[0], auth, "authorization server")
    metadata_url = authorization_server_metadata_url(issuer)
    metadata = await bounded_json(client, "GET", metadata_url, JSON_ACCEPT)
    if metadata.status != 200 or not isinstance(metadata.body, dict):
        raise TokenUnavailable("the authorization server's metadata could not be read")
    # RFC 8414 §3.3: the metadata must be the issuer's own, or it was not for this server.
    if str(metadata.body.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise TokenUnavailable("the authorization server's metadata names another issuer")
    token_endpoint = metadata.body.get("token_endpoint")
    if not isinstance(token_endpoint, str):
        raise TokenUnavailable("the authorization server's metadata names no token endpoint")
    return allowed_url(token_endpoint, auth, "token endpoint")


class TokenEndpoints:
    """The token endpoint of each OAuth auth: its ``token-url``, or discovered once per service
    endpoint (a failed discovery is tried again by the next call)."""

    def __init__(self) -> None:
        self._discovered: dict[tuple[ToolAuth, str], str] = {}

    async def for_service(self, client: HttpClient, auth: ToolAuth, endpoint: str) -> str:
        if auth.token_url:
            return auth.token_url
        known = self._discovered.get((auth, endpoint))
        if known is None:
            probe = await bounded_json(client, "POST", endpoint, PROBE_HEADERS, PROBE)
            challenge = probe.challenge if probe.status == 401 else None
            known = await discover_token_endpoint(client, auth, endpoint, challenge)
            self._discovered[(auth, endpoint)] = known
        return known
