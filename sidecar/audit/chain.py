"""What links audit records into a chain: the bytes a record's hash covers, the hash itself
(HMAC-SHA256 under the audit key, plain SHA-256 without one) and the head file's line.

With a key, rewriting the chain consistently after an edit (recomputing every hash) needs the
key; without one, anyone who can write the file can. The head names the last record and, when
keyed, carries a MAC of that name, so a log cut short cannot be given a matching head either.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

GENESIS = "0" * 64
AUDIT_KEY_ENV = "CLAW_AUDIT_KEY"
# A short key can be guessed offline from one record; 16 bytes is the HMAC minimum we accept.
MIN_KEY_BYTES = 16
KEYED = "hmac-sha256"
_HEAD_LABEL = b"claw-audit-head\x00"


class AuditKeyError(ValueError):
    """The configured audit key cannot be used."""


def audit_key(env: Mapping[str, str], name: str = AUDIT_KEY_ENV) -> bytes | None:
    """The audit key from ``env[name]``; None when unset or empty."""
    value = env.get(name)
    if not value:
        return None
    key = value.encode()
    if len(key) < MIN_KEY_BYTES:
        raise AuditKeyError(
            f"{name} is too short: use at least {MIN_KEY_BYTES} bytes "
            "(for example the output of `openssl rand -hex 32`)"
        )
    return key


def canonical_json(record: dict[str, Any]) -> bytes:
    """The bytes a record's hash covers: compact JSON, keys sorted, ``hash`` excluded."""
    # append() hashes a record before it has one: no copy needed then.
    body = (
        {key: value for key, value in record.items() if key != "hash"}
        if "hash" in record
        else record
    )
    try:
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # orjson refuses integers beyond 64 bits; such values are stored as text instead.
        return orjson.dumps(_json_safe(body), option=orjson.OPT_SORT_KEYS)


def digest(canonical: bytes, key: bytes | None) -> str:
    if key is None:
        return hashlib.sha256(canonical).hexdigest()
    return _mac(key, canonical)


def _mac(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of ``message`` from a copy of the key's own HMAC: the key's padded blocks
    are hashed once per key, not once per record (2.0 -> 1.3 us a record)."""
    mac = _keyed(key).copy()
    mac.update(message)
    return mac.hexdigest()


@functools.lru_cache(maxsize=8)
def _keyed(key: bytes) -> hmac.HMAC:
    # The digest named, not passed as hashlib.sha256: OpenSSL need not map a function to it.
    return hmac.new(key, digestmod="sha256")


def record_hash(record: dict[str, Any], key: bytes | None = None) -> str:
    return digest(canonical_json(record), key)


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str), parse_int=_int_or_text)


def _int_or_text(text: str) -> int | str:
    number = int(text)
    return number if -(2**63) <= number < 2**64 else text


# --- the head file ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Head:
    last: str  # the hash of the last record written (GENESIS for an empty log)
    mac: str | None  # present when the head was written with a key

    def valid_for(self, key: bytes | None) -> bool:
        if key is None:
            return self.mac is None
        return self.mac is not None and hmac.compare_digest(self.mac, _head_mac(self.last, key))


def head_line(last: str, key: bytes | None) -> bytes:
    """Fixed length for a given key setting, so it can be rewritten in place."""
    if key is None:
        return f"{last}\n".encode()
    return f"{last} {_head_mac(last, key)}\n".encode()


def parse_head(text: str) -> Head | None:
    parts = text.split()
    if len(parts) not in (1, 2) or not all(_is_hex64(part) for part in parts):
        return None
    return Head(parts[0], parts[1] if len(parts) == 2 else None)


def _head_mac(last: str, key: bytes) -> str:
    return _mac(key, _HEAD_LABEL + last.encode())


def _is_hex64(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)
