"""Credential redaction in every form an echo takes, whatever the secret and its surroundings."""

from __future__ import annotations

import base64
import itertools
import json
import re
from urllib.parse import quote, quote_plus

from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.model.redaction import Redactor, StreamRedactor, credential_secrets

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
        "hex": raw.hex().encode(),
        "HEX": raw.hex().upper().encode(),
        "base64, MIME lines (76, CRLF)": _wrapped(base64.b64encode(before + raw + after), 76),
        "base64, PEM lines (64, LF)": _wrapped(base64.b64encode(before + raw + after), 64, b"\n"),
        "base64, 76 columns, LF": base64.encodebytes(before + raw + after),
        "base64url, 64 columns, CRLF": _wrapped(base64.urlsafe_b64encode(before + raw + after), 64),
    }


def _wrapped(encoded: bytes, width: int, newline: bytes = b"\r\n") -> bytes:
    return newline.join(encoded[i : i + width] for i in range(0, len(encoded), width))


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


def test_a_long_secret_wrapped_across_lines_is_redacted() -> None:
    secret = b"sk-live-" + bytes(range(48, 123))  # long enough to span two base64 lines
    for newline in (b"\n", b"\r\n"):
        for width in (76, 64):
            echoed = _wrapped(base64.b64encode(b"user=" + secret + b";"), width, newline)
            assert newline in echoed
            out = Redactor([secret])(echoed)
            assert b"[redacted]" in out
            assert base64.b64encode(secret)[4:-4] not in out.replace(newline, b"")


def test_basic_auth_redacts_the_password_alone() -> None:
    redact = Redactor(credential_secrets("svc-user:pa55-w0rd-basic", "basic"))
    assert redact(b'{"error": "bad password pa55-w0rd-basic"}') == (
        b'{"error": "bad password [redacted]"}'
    )
    assert b"pa55" not in redact(b"c3ZjLXVzZXI6cGE1NS13MHJkLWJhc2lj")
    assert credential_secrets("tok-123456", "bearer") == (b"tok-123456",)


def _stream(redactor: StreamRedactor, pieces: list[bytes]) -> bytes:
    return b"".join(redactor.feed(piece) for piece in pieces) + redactor.flush()


@settings(max_examples=100, deadline=None)
@given(secret=SECRETS, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_a_stream_error_event_is_redacted_wherever_the_chunks_split_it(
    secret: str, cuts: list[int]
) -> None:
    event = b'data: {"error": {"message": "bad key ' + json.dumps(secret)[1:-1].encode()
    stream = b'data: {"delta": "hi"}\n\n' + event + b'"}}\n\ndata: [DONE]\n\n'
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    pieces = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    out = _stream(StreamRedactor(Redactor([secret.encode()])), pieces)
    assert b"[redacted]" in out and secret.encode() not in out
    assert out.startswith(b'data: {"delta": "hi"}\n\n') and out.endswith(b"data: [DONE]\n\n")


def test_a_stream_releases_whole_events_and_leaves_token_events_alone() -> None:
    redactor = StreamRedactor(Redactor([b"sk-key-123456"]))
    assert redactor.feed(b'data: {"delta": "sk-key-123456"}\n\ndata: {"er') == (
        b'data: {"delta": "sk-key-123456"}\n\n'  # a token event is not searched
    )
    assert redactor.feed(b'ror": "sk-key-123456"}\n\n') == b'data: {"error": "[redacted]"}\n\n'


def test_an_oversized_event_is_released_early_without_cutting_an_echo() -> None:
    secret = b"sk-key-0123456789"
    redactor = StreamRedactor(Redactor([secret]), max_pending=0)
    event = b'data: {"error": "' + b"x" * 500 + secret + b"y" * 3 + secret + b'"}\n\n'
    out = _stream(redactor, [event[i : i + 7] for i in range(0, len(event), 7)])
    assert secret not in out and out.count(b"[redacted]") == 2


class _CountingRedactor(Redactor):
    def __init__(self, secrets: list[bytes]) -> None:
        super().__init__(secrets)
        self.searched: list[bytes] = []

    def __call__(self, data: bytes) -> bytes:
        self.searched.append(data)
        return super().__call__(data)


def test_a_null_error_is_not_searched_and_a_real_one_beside_it_is() -> None:
    """Every Responses event carrying the response object holds ``"error":null``: a chunk of
    those is not searched, one that also holds an error is."""
    secret = b"sk-key-123456789"
    redacting = _CountingRedactor([secret])
    redactor = StreamRedactor(redacting)
    created = b'data: {"type":"response.created","response":{"error":null,"id":"r1"}}\n\n'
    assert redactor.feed(created * 3) == created * 3
    assert redacting.searched == []
    failed = b'data: {"type":"response.failed","response":{"error":{"message":"' + secret
    out = redactor.feed(created + failed + b'"}}}\n\n')
    assert secret not in out and b"[redacted]" in out and len(redacting.searched) == 1
    spaced = b'data: {"error": null, "message": "' + secret + b'"}\n\n'
    assert secret not in redactor.feed(spaced)  # another spelling is searched
