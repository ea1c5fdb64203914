"""``x-claw.identity``, ``end-users`` and ``end-user-limits`` (SPEC §21): checked by clawc, which
names what is missing or wrong, and carried to the sidecar (a key set file inside the build)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from clawpod.sidecar.manifest import load_build
from tests.compiler.conftest import REPO
from tests.compiler.test_kubernetes import EXAMPLE
from tests.compiler.test_shared_limits import _compile
from tests.support.jwks_server import SigningKey, key_set

URL_IDENTITY = """  identity: {issuer: https://idp.example, jwks-url: http://idp:8080/jwks,
              audience: clawpod, agent-claim: agent}
"""
FILE_END_USERS = """  end-users: {header: X-User-Token, issuer: https://idp.example,
              jwks-file: idp.jwks.json, audience: clawpod-users, user-claim: email,
              jwks-refresh-ms: 5000}
  end-user-limits: {tokens-per-day: 50000, usd-per-day: 2.5, requests: 60/minute}
"""


@pytest.fixture
def pod_with(tmp_path: Path) -> Callable[[str], Path]:
    """The example pod with ``claw`` added to its x-claw, in a copy of its tree."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "descriptors", root / "descriptors")
    desk = root / "compose" / "examples" / "trading-desk"
    shutil.copytree(EXAMPLE.parent, desk)

    def write(claw: str) -> Path:
        pod = desk / "pod.yml"
        pod.write_text(EXAMPLE.read_text().replace("x-claw:\n", "x-claw:\n" + claw, 1))
        return pod

    return write


def test_the_sidecar_gets_both_issuers_and_the_end_user_limits(
    tmp_path: Path, pod_with: Callable[[str], Path]
) -> None:
    pod = pod_with(URL_IDENTITY + FILE_END_USERS)
    document = key_set(SigningKey("k1"))
    (pod.parent / "idp.jwks.json").write_text(json.dumps(document))
    code, err = _compile(pod, tmp_path / "out")
    assert code == 0, err
    config = load_build(tmp_path / "out").config
    assert config.identity is not None and config.end_users is not None
    assert (config.identity.jwks_url, config.identity.claim) == ("http://idp:8080/jwks", "agent")
    assert config.identity.jwks is None
    users = config.end_users
    assert (users.header, users.claim, users.audience) == ("x-user-token", "email", "clawpod-users")
    assert users.jwks == document and users.jwks_refresh_ms == 5000  # in the signed build
    assert config.governance is not None and config.governance.end_user_limits is not None
    limits = config.governance.end_user_limits
    assert (limits.tokens_per_day, limits.usd_per_day) == (50000, 2.5)
    assert limits.requests is not None
    assert (limits.requests.count, limits.requests.per) == (60, "minute")


@pytest.mark.parametrize(
    ("claw", "key_file", "message"),
    [
        ("  identity: {issuer: i, audience: a}\n", None, "set jwks-url"),
        (
            "  identity: {issuer: i, audience: a, jwks-url: http://x/j, jwks-file: f.json}\n",
            None,
            "set jwks-url (fetched by the sidecar) or jwks-file",
        ),
        ("  identity: {jwks-url: http://x/j, audience: a}\n", None, "issuer"),
        ("  identity: {issuer: i, jwks-url: http://x/j}\n", None, "audience"),
        ("  identity: {issuer: i, audience: a, jwks-url: 'file:///etc/x'}\n", None, "jwks-url"),
        ("  identity: {issuer: i, audience: a, jwks-url: http://x/j, agent: x}\n", None, "agent"),
        (
            "  end-users: {issuer: i, audience: a, jwks-url: http://x/j, header: 'a b'}\n",
            None,
            "header",
        ),
        (
            "  end-users: {issuer: i, audience: a, jwks-url: http://x/j, header: Authorization}\n",
            None,
            "the agent's token or a header the sidecar forwards",
        ),
        (
            "  end-users: {issuer: i, audience: a, jwks-url: http://x/j, header: anthropic-beta}\n",
            None,
            "forwards",
        ),
        (
            "  end-user-limits: {tokens-per-day: 5}\n",
            None,
            "end-user-limits needs x-claw.end-users",
        ),
        (
            "  end-users: {issuer: i, audience: a, jwks-url: http://x/j}\n"
            "  end-user-limits: {requests: lots}\n",
            None,
            "write N/second, N/minute or N/hour",
        ),
        (
            "  end-users: {issuer: i, audience: a, jwks-url: http://x/j}\n  end-user-limits: {}\n",
            None,
            "tokens-per-day, usd-per-day",
        ),
        ("  identity: {issuer: i, audience: a, jwks-file: missing.json}\n", None, "not found"),
        ("  identity: {issuer: i, audience: a, jwks-file: ../../../../x.json}\n", None, "leaves"),
        ("  identity: {issuer: i, audience: a, jwks-file: k.json}\n", "not json", "is not JSON"),
        ("  identity: {issuer: i, audience: a, jwks-file: k.json}\n", '{"k": 1}', "not a JWKS"),
        (
            "  identity: {issuer: i, audience: a, jwks-file: k.json}\n",
            '{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}',
            "not a public signing key",
        ),
        (
            "  identity: {issuer: i, audience: a, jwks-file: k.json}\n",
            '{"keys": [{"kty": "RSA", "n": "x", "e": "AQAB", "d": "private"}]}',
            "private key",
        ),
        (
            "  identity: {issuer: i, audience: a, jwks-url: http://x/j, jwks-refresh-ms: 5}\n",
            None,
            "jwks-refresh-ms",
        ),
    ],
)
def test_what_clawc_refuses(
    tmp_path: Path, pod_with: Callable[[str], Path], claw: str, key_file: str | None, message: str
) -> None:
    pod = pod_with(claw)
    if key_file is not None:
        (pod.parent / "k.json").write_text(key_file)
    code, err = _compile(pod, tmp_path / "out")
    assert code == 1 and message in err, err
