"""Credentials removed from text that a provider or a tool service sent back, in every form an
echo can take (contract §10).

A service that echoes its ``Authorization`` header may send the secret raw, JSON-escaped (all
of it ``\\u``-escaped, or only some characters, as PHP and Go encoders do), URL-encoded, or
base64-encoded, standard or URL-safe, at any alignment inside a longer base64 text. One regular
expression per set of secrets matches all of those forms. No library does this: redaction
libraries look for patterns of known token formats, not for given values in their encodings.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Iterable

REDACTED = b"[redacted]"
# Shorter values would match ordinary text; credentials are longer than this.
MIN_SECRET_BYTES = 6
# JSON encoders escape these with a backslash rather than \uXXXX.
_JSON_SHORT_ESCAPES = {ord('"'): rb'\\"', ord("\\"): rb"\\\\", ord("/"): rb"\\/"}


class Redactor:
    """Replaces every encoded form of a fixed set of secrets with ``[redacted]``."""

    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[bytes]) -> None:
        usable = [secret for secret in secrets if len(secret) >= MIN_SECRET_BYTES]
        forms = {form for secret in usable for form in _forms(secret)}
        # Longest first: a raw secret must not pre-empt the longer encoded form it sits in.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(ordered)) if ordered else None

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


def _forms(secret: bytes) -> list[bytes]:
    """Patterns for the secret raw or JSON-escaped (any mix), URL-encoded (any mix) and base64."""
    return [_escaped(secret), _url_encoded(secret), *_base64_cores(secret)]


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
            cores.append(re.escape(core))
            cores.append(re.escape(core.translate(_URL_SAFE)))
    return cores


_URL_SAFE = bytes.maketrans(b"+/", b"-_")
