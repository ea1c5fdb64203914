"""The argument guards of a tainted request (SPEC §17) against an attacker who knows how they
work: credentials and tokens in every encoding, URLs that only look allowed."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

import pytest

from clawpod.sidecar.governance.taint_guard import ArgumentGuard, held_credentials
from clawpod.sidecar.manifest import Provider, Taint, load_build, token_sha256
from tests.mediation.scripted import agent, tool
from tests.support.builds import AgentSpec, write_build

SECRET = "svc-secret/with+odd=chars"
TOKEN = "claw_" + "A" * 20 + "b-_" + "9" * 20
TAINT = Taint(
    mode="confirm",
    egress_allow=["intranet.example", "*.corp.example"],
    service_egress_allow={"desk": ["api.desk.example"], "other": ["other.example"]},
)
REPORT = tool("desk.report", method="POST")


@pytest.fixture
def guard() -> ArgumentGuard:
    build = agent(REPORT, agent_id="peer")
    peer = build.model_copy(
        update={"agent": build.agent.model_copy(update={"token_sha256": token_sha256(TOKEN)})}
    )
    return ArgumentGuard(TAINT, {"peer": peer}, [SECRET, ""])


def code(guard: ArgumentGuard, arguments: dict) -> str | None:
    refusal = guard.refusal(REPORT, arguments)
    return refusal.error_code if refusal is not None else None


@pytest.mark.parametrize(
    "value",
    [
        SECRET,
        f"prefix {SECRET} suffix",
        quote(SECRET, safe=""),
        base64.b64encode(SECRET.encode()).decode(),
        base64.urlsafe_b64encode(b"xy" + SECRET.encode()).decode(),
        base64.b64encode(b"user:" + SECRET.encode()).decode(),
    ],
    ids=["raw", "embedded", "url-encoded", "base64", "base64-urlsafe-shifted", "basic-auth"],
)
def test_a_credential_in_any_encoding_is_refused(guard: ArgumentGuard, value: str) -> None:
    assert code(guard, {"text": value}) == "tainted_argument"
    assert code(guard, {"nested": [{"deep": value}]}) == "tainted_argument"
    assert code(guard, {value: "as a key"}) == "tainted_argument"


@pytest.mark.parametrize(
    "value",
    [
        TOKEN,
        f"Bearer {TOKEN}",
        base64.b64encode(f"token={TOKEN}".encode()).decode(),
        base64.urlsafe_b64encode(TOKEN.encode()).decode(),
        "".join(f"%{b:02x}" for b in TOKEN.encode()),
    ],
    ids=["raw", "header", "base64", "base64-urlsafe", "percent-encoded"],
)
def test_an_agents_token_in_any_encoding_is_refused(guard: ArgumentGuard, value: str) -> None:
    assert code(guard, {"text": value}) == "tainted_argument"


def test_a_token_shaped_string_that_is_no_agents_token_passes(guard: ArgumentGuard) -> None:
    assert code(guard, {"text": "claw_" + "Z" * 43}) is None


@pytest.mark.parametrize(
    "url",
    [
        "https://attacker.example/?q=1",
        "https://intranet.example@attacker.example/",  # userinfo that looks like the host
        "https://intranet.example.attacker.example/",
        "https://corp.example/",  # *.corp.example names the hosts under it, not itself
        "https://other.example/",  # another service's allow-list
        "file:///etc/passwd",
        "HTTPS://ATTACKER.EXAMPLE",
        "https://[::1]:8080/",
        "https://[intranet.example/",  # an unclosed bracket: no host can be read
        # What browsers, Node's URL and fetch read as host attacker.example (WHATWG).
        "https:/attacker.example",
        "https:attacker.example",
        "https:\\\\attacker.example",
        "https://attacker.example\\@intranet.example",
        "//attacker.example/collect",
        "\\\\attacker.example\\collect",
        "ht\ttps://attacker.exam\nple/",
        "https://attacker%2Eexample/",
        "https://\uff41ttacker.example/",
        "http://0x7f.1/",
        "https://intranet.example:99999/",  # no port a client accepts
        "https://intranet.example%00/",
    ],
)
def test_urls_to_hosts_outside_the_allow_list_are_refused(guard: ArgumentGuard, url: str) -> None:
    assert code(guard, {"link": url}) == "tainted_argument"
    assert code(guard, {"text": f"see {quote(url, safe='')} now"}) == "tainted_argument"


@pytest.mark.parametrize(
    "url",
    [
        "https://intranet.example/x?y=z",
        "HTTPS://INTRANET.EXAMPLE./",
        "http://wiki.corp.example:8080/p",
        "https://api.desk.example/v1",  # this service's own allow-list
        "https:intranet.example/x",
        "//wiki.corp.example/page",
        "https://attacker.example@intranet.example/",
        "https://intranet.example\\@attacker.example",  # the host is intranet.example
        "see https: it is safer, and the attached file: a.pdf",
    ],
)
def test_allowed_hosts_pass(guard: ArgumentGuard, url: str) -> None:
    assert code(guard, {"link": url, "text": json.dumps({"u": url})}) is None


def test_plain_arguments_pass(guard: ArgumentGuard) -> None:
    assert code(guard, {"symbol": "NVDA", "quantity": 10, "note": "sell on news"}) is None


def test_what_is_kept_of_a_refused_call_is_scrubbed(guard: ArgumentGuard) -> None:
    value = {
        "text": f"{SECRET} and {base64.b64encode(SECRET.encode()).decode()}",
        "token": TOKEN,
        "other": "claw_" + "Z" * 43,
    }
    kept = json.dumps(guard.scrubbed([{"arguments": value}]))
    assert SECRET not in kept and TOKEN not in kept
    assert "claw_" + "Z" * 43 in kept  # not a token of this pod: left as it was
    assert kept.count("[redacted]") == 3


def test_every_key_of_a_provider_pool_is_a_held_credential(tmp_path: Path) -> None:
    pool = Provider(
        api="openai", base_url="http://127.0.0.1:9", key_env=["KEY_A", "KEY_B"], models=["gpt-*"]
    )
    write_build(tmp_path, [AgentSpec("analyst", [REPORT])], {"openai": pool})
    env = {"KEY_A": "sk-first-pool-key", "KEY_B": "sk-second-pool-key", "UNRELATED": "x" * 20}
    held = held_credentials(load_build(tmp_path), env)
    assert sorted(held) == ["sk-first-pool-key", "sk-second-pool-key"]
