"""Credential redaction in every form an echo takes, whatever the secret and its surroundings."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.model.redaction import Redactor

SECRETS = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=8, max_size=40
)
AROUND = st.binary(max_size=40).filter(lambda b: b"[redacted]" not in b)


def echoes(secret: str, before: bytes, after: bytes) -> dict[str, bytes]:
    raw = secret.encode()
    return {
        "raw": raw,
        "json": json.dumps(secret)[1:-1].encode(),
        "json \\u": "".join(f"\\u{ord(c):04x}" for c in secret).encode(),
        "json \\U": "".join(f"\\u{ord(c):04X}" for c in secret).encode(),
        "json, every other char": "".join(
            f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(secret)
        ).encode(),
        "url": quote(secret, safe="").encode(),
        "url, lower hex": re.sub(
            r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(secret, safe="")
        ).encode(),
        "url, plus": quote_plus(secret).encode(),
        "base64": base64.b64encode(before + raw + after),
        "base64url": base64.urlsafe_b64encode(before + raw + after),
    }


@settings(max_examples=150, deadline=None)
@given(secret=SECRETS, before=AROUND, after=AROUND, prefix=AROUND, suffix=AROUND)
def test_no_echo_of_a_secret_survives(
    secret: str, before: bytes, after: bytes, prefix: bytes, suffix: bytes
) -> None:
    redact = Redactor([secret.encode()])
    for form, echoed in echoes(secret, before, after).items():
        text = prefix + b" " + echoed + b" " + suffix
        out = redact(text)
        assert b"[redacted]" in out, form
        if form.startswith("base64"):
            continue  # the characters that also carry neighbouring bytes may stay
        assert echoed not in out, form


def test_text_around_a_secret_is_kept() -> None:
    redact = Redactor([b"sv-token-1234"])
    assert redact(b'{"auth": "Bearer sv-token-1234", "n": 1}') == (
        b'{"auth": "Bearer [redacted]", "n": 1}'
    )
    assert redact.text("key sv-token-1234 rejected") == "key [redacted] rejected"


def test_short_values_are_not_redacted() -> None:
    # A credential of a few characters would match ordinary text everywhere.
    assert Redactor([b"abc"])(b"abc abc") == b"abc abc"
