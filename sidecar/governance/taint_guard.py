"""Argument guards of a tainted request (SPEC §17): once untrusted content entered a request,
its tool arguments may not carry a credential the sidecar holds (in any encoding its redactor
knows), an agent's token, or a URL to a host outside the egress allow-list. Such a call is
refused with ``tainted_argument``; the refusal is the call's audited outcome."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

import orjson

from ..credential_files import credential_names
from ..manifest import AgentBuild, Build, ManagedTool, Taint
from ..model.conversation import ToolOutcome, refused
from ..model.redaction import REDACTED, Redactor
from ..model.taint import TAINTED_ARGUMENT
from .urls import url_hosts

# Agent tokens as clawc mints them: the prefix and 32 random bytes, URL-safe base64.
AGENT_TOKEN = re.compile(rb"claw_[A-Za-z0-9_-]{43}")
# A run that may be base64 (either alphabet) of a token: 48 bytes encode to 64 characters.
BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{64,}={0,2}")
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")


class ArgumentGuard:
    def __init__(
        self, taint: Taint, agents: Mapping[str, AgentBuild], credentials: Iterable[str]
    ) -> None:
        self._credentials = Redactor(value.encode() for value in credentials if value)
        self._token_digests = {bytes.fromhex(build.agent.token_sha256) for build in agents.values()}
        self._pod_hosts = tuple(taint.egress_allow)
        self._service_hosts = taint.service_egress_allow

    def refusal(self, tool: ManagedTool, arguments: Mapping[str, Any]) -> ToolOutcome | None:
        """Why a tainted request may not make this call; None when its arguments are clean."""
        text = orjson.dumps(arguments)
        if self._credentials.found_in(text):
            return _refused(tool, "carry a credential the sidecar holds")
        strings = list(_strings(arguments))
        if any(self._is_token(candidate) for candidate in _token_candidates(strings)):
            return _refused(tool, "carry an agent's token")
        allowed = (*self._pod_hosts, *self._service_hosts.get(tool.execution.service, ()))
        for host in (host for text in strings for host in url_hosts(text)):
            if host is None:
                return _refused(tool, "carry a URL whose host cannot be read")
            if not any(_host_matches(host.rstrip("."), pattern) for pattern in allowed):
                return _refused(tool, f"name a host outside the egress allow-list ({host})")
        return None

    def scrubbed(self, value: Any) -> Any:
        """``value`` (JSON) with the credentials and agent tokens it carries redacted: what the
        sidecar keeps (audit, continuity) of a request whose call was refused for them."""
        text = self._credentials(orjson.dumps(value))
        text = AGENT_TOKEN.sub(
            lambda found: REDACTED if self._is_token(found.group()) else found.group(), text
        )
        return orjson.loads(text)

    def _is_token(self, candidate: bytes) -> bool:
        return hashlib.sha256(candidate).digest() in self._token_digests


def held_credentials(build: Build, env: Mapping[str, str]) -> list[str]:
    """Every provider key and service credential the build has the sidecar read from ``env``."""
    return [env[name] for name in sorted(credential_names(build)) if env.get(name)]


def _refused(tool: ManagedTool, what: str) -> ToolOutcome:
    return refused(
        TAINTED_ARGUMENT,
        f"this request read untrusted content, and the arguments of {tool.presented} {what}; "
        "the call is not executed",
    )


def _strings(value: Any) -> Iterator[str]:
    """Every string in the arguments, object keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _decoded_forms(text: str) -> list[bytes]:
    """The text as given, URL-decoded, and each base64 run in it decoded."""
    raw = text.encode("utf-8", "surrogatepass")
    forms = [raw, unquote(text).encode("utf-8", "surrogatepass")]
    for run in BASE64_RUN.findall(raw):
        stripped = run.rstrip(b"=").translate(_TO_STANDARD)
        try:
            forms.append(base64.b64decode(stripped + b"=" * (-len(stripped) % 4)))
        except (binascii.Error, ValueError):
            continue
    return forms


def _token_candidates(strings: list[str]) -> Iterator[bytes]:
    for text in strings:
        for form in _decoded_forms(text):
            yield from AGENT_TOKEN.findall(form)


def _host_matches(host: str, pattern: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern
