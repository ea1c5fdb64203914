"""Credentials removed from text that a provider or a tool service sent back, in every form an
echo can take (contract §10).

A service that echoes its ``Authorization`` header may send the secret raw, JSON-escaped (all
of it ``\\u``-escaped, or only some characters, as PHP and Go encoders do), URL-encoded,
hex-encoded (either case), or base64-encoded, standard or URL-safe, at any alignment inside a
longer base64 text, unwrapped or wrapped into lines (MIME's 76 columns, PEM's 64, any width,
LF or CRLF). One regular expression per set of secrets matches all of those forms. No library
does this: redaction libraries look for patterns of known token formats, not for given values
in their encodings.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Iterable
from urllib.parse import quote

REDACTED = b"[redacted]"
# Shorter values would match ordinary text; credentials are longer than this.
MIN_SECRET_BYTES = 6
# JSON encoders escape these with a backslash rather than \uXXXX.
_JSON_SHORT_ESCAPES = {ord('"'): rb'\\"', ord("\\"): rb"\\\\", ord("/"): rb"\\/"}


class Redactor:
    """Replaces every encoded form of a fixed set of secrets with ``[redacted]``."""

    __slots__ = ("_pattern", "longest_match")

    def __init__(self, secrets: Iterable[bytes]) -> None:
        usable = [secret for secret in secrets if len(secret) >= MIN_SECRET_BYTES]
        forms = {form for secret in usable for form in _forms(secret)}
        # Longest first: a raw secret must not pre-empt the longer encoded form it sits in.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(ordered)) if ordered else None
        # The most bytes one echo can take: every byte as a \u00XX escape, or base64 (4 per 3
        # bytes) with an escaped CRLF (4 more) after each character.
        self.longest_match = max((8 * len(secret) for secret in usable), default=0)

    def safe_cut(self, data: bytes, at: int) -> int:
        """``at``, or the start of a match that reaches past it: cutting there splits no echo."""
        if self._pattern is None:
            return at
        for match in self._pattern.finditer(data):
            if match.start() < at < match.end():
                return match.start()
            if match.start() >= at:
                break
        return at

    def __call__(self, data: bytes) -> bytes:
        if self._pattern is None or not data:
            return data
        return self._pattern.sub(REDACTED, data)

    def found_in(self, data: bytes) -> bool:
        """Whether any form of any of the secrets occurs in ``data``."""
        return self._pattern is not None and self._pattern.search(data) is not None

    def text(self, text: str) -> str:
        """The same for a message built from provider or service text."""
        if self._pattern is None:
            return text
        return self(text.encode("utf-8", "surrogatepass")).decode("utf-8", "replace")


@functools.lru_cache(maxsize=256)
def redactor_for(secrets: tuple[bytes, ...]) -> Redactor:
    """One compiled redactor per set of secrets (tools share their service's credential)."""
    return Redactor(secrets)


def credential_secrets(secret: str, auth_type: str) -> tuple[bytes, ...]:
    """The values to redact for a service credential: the secret, for basic auth
    (``user:password``) also the password alone and the base64 the header carries, and for a
    query parameter the percent-encoding the URL carries (which an echoed URL shows)."""
    values = [secret.encode()]
    if auth_type == "basic":
        values.append(secret.partition(":")[2].encode())
        values.append(base64.b64encode(secret.encode()))
    if auth_type == "query" and quote(secret, safe="") != secret:
        values.append(quote(secret, safe="").encode())
    return tuple(values)


class StreamRedactor:
    """Redaction of the error events of a stream of server-sent events whose chunks may split
    a secret.

    Events are released whole: what ``feed`` returns ends at an event boundary and the rest
    waits for its end (an upstream sends whole events, so nothing is held back in practice). An
    event larger than ``max_pending`` is released early, all but a window as long as the
    longest echo, never cutting through a match. Only text that names an ``error`` is searched:
    a provider echoes a key in an error message, never in a model's tokens, and searching every
    token event would cost about 5 µs each. An ``"error":null`` names none: every Responses
    event that carries the response object holds one, and searching the chunks around them
    was half of what a Responses stream cost the sidecar.
    """

    __slots__ = ("_in_event", "_pending", "_redact", "_window", "max_pending")

    def __init__(self, redact: Redactor, max_pending: int = 64 * 1024) -> None:
        self._redact = redact
        self._window = redact.longest_match
        self._pending = b""
        self._in_event = False  # part of the current event went out early: search the rest too
        self.max_pending = max(max_pending, 2 * self._window)

    def feed(self, chunk: bytes) -> bytes:
        if not self._pending and chunk.endswith((b"\n\n", b"\r\n\r\n")):
            return self._released(chunk)  # the usual chunk: whole events, nothing held
        data = self._pending + chunk
        cut = _last_event_end(data)
        if cut == 0:
            if len(data) <= self.max_pending:
                self._pending = data
                return b""
            cut = self._redact.safe_cut(data, len(data) - self._window)
            self._pending, self._in_event = data[cut:], True
            return self._redact(data[:cut])
        self._pending = data[cut:]
        return self._released(data[:cut])

    def flush(self) -> bytes:
        """What is still held back (the stream ended)."""
        data, self._pending = self._pending, b""
        return self._released(data)

    def _released(self, data: bytes) -> bytes:
        searched = self._in_event or _names_an_error(data)
        self._in_event = False
        return self._redact(data) if searched else data


def _names_an_error(data: bytes) -> bool:
    """Whether ``data`` has an ``error`` that is not a JSON ``"error":null``."""
    named = data.count(b"error")
    return named > 0 and named != data.count(b'"error":null')


_EVENT_SEPARATORS = (b"\r\n\r\n", b"\n\n", b"\r\r")


def _last_event_end(data: bytes) -> int:
    """The index just after the last blank line in ``data``; 0 when there is none."""
    return max(
        (
            found + len(separator)
            for separator in _EVENT_SEPARATORS
            if (found := data.rfind(separator)) >= 0
        ),
        default=0,
    )


def _forms(secret: bytes) -> list[bytes]:
    """Patterns for the secret raw or JSON-escaped (any mix), URL-encoded (any mix), hex and
    base64 (wrapped or not)."""
    return [_escaped(secret), _url_encoded(secret), _hex(secret), *_base64_cores(secret)]


def _hex(secret: bytes) -> bytes:
    return b"".join(_hex_either_case(byte) for byte in secret)


def _escaped(secret: bytes) -> bytes:
    """Each byte as itself or as a JSON escape of it (non-ASCII bytes only as themselves)."""
    parts = []
    for byte in secret:
        alternatives = [re.escape(bytes([byte]))]
        if byte < 0x80:
            alternatives.append(rb"\\u00" + _hex_either_case(byte))
            if byte in _JSON_SHORT_ESCAPES:
                alternatives.append(_JSON_SHORT_ESCAPES[byte])
        parts.append(b"(?:" + b"|".join(alternatives) + b")")
    return b"".join(parts)


def _url_encoded(secret: bytes) -> bytes:
    """Each byte as itself or percent-encoded (a space also as ``+``)."""
    parts = []
    for byte in secret:
        alternatives = [re.escape(bytes([byte])), b"%" + _hex_either_case(byte)]
        if byte == 0x20:
            alternatives.append(rb"\+")
        parts.append(b"(?:" + b"|".join(alternatives) + b")")
    return b"".join(parts)


def _hex_either_case(byte: int) -> bytes:
    return b"".join(
        b"[" + c.upper() + c.lower() + b"]" if c.isalpha() else c
        for c in (bytes([h]) for h in f"{byte:02x}".encode())
    )


def _base64_cores(secret: bytes) -> list[bytes]:
    """The base64 characters that depend on the secret alone, for each of the three byte
    alignments it can have inside a longer encoded text, standard and URL-safe alphabets."""
    cores = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret)
        # Characters carrying bits of the bytes before the secret, or after it, vary.
        start = (offset * 8 + 5) // 6
        end = ((offset + len(secret)) * 8) // 6
        core = encoded[start:end]
        if len(core) >= MIN_SECRET_BYTES:
            cores.append(_wrappable(core))
            cores.append(_wrappable(core.translate(_URL_SAFE)))
    return cores


def _wrappable(core: bytes) -> bytes:
    """``core`` with a line break (LF or CRLF, raw or JSON-escaped) allowed between any two
    characters: MIME wraps base64 at 76 columns, PEM at 64, and the secret may sit anywhere in
    a line."""
    return _LINE_BREAK.join(re.escape(bytes([c])) for c in core)


# A real line break, or one JSON-escaped: a service that puts wrapped base64 in a JSON string
# sends its line breaks as ``\r\n`` escapes.
_LINE_BREAK = rb"(?:\r?\n|(?:\\r)?\\n)?"


_URL_SAFE = bytes.maketrans(b"+/", b"-_")
