"""An Ed25519 signature over a build's ``digest.json`` (contract §10).

The digest alone detects accidents: whoever can edit ``tools.json`` can also re-run the digest
writer. A signature made with a key the operator keeps outside the build (``clawc compile
--sign-key-env VAR``) and checked with its public half (``python -m clawpod.sidecar
--verify-key-env VAR``) makes an edited build fail to start. Keys are PEM (as ``openssl genpkey
-algorithm ed25519`` writes them) or the base64 of the raw 32 bytes. ``cryptography`` is
imported only when a build is signed or verified.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from .manifest import BuildError, read_build_file

SIGNATURE_NAME = "digest.sig"
DIGEST_NAME = "digest.json"


class SignatureError(Exception):
    """The build is unsigned, its signature does not verify, or a key is unusable."""


def sign_digest(root: Path, private_key: str) -> None:
    """Write ``digest.sig`` beside ``digest.json``: base64 of its Ed25519 signature."""
    key = _private_key(private_key)
    signature = key.sign((root / DIGEST_NAME).read_bytes())
    (root / SIGNATURE_NAME).write_text(base64.b64encode(signature).decode() + "\n")


def verify_signature(root: Path, public_key: str, digest_json: bytes) -> None:
    """Raise :class:`SignatureError` unless ``digest.sig`` signs ``digest_json`` under the key.

    ``digest_json`` is the one read of ``digest.json`` that the digest check used too
    (``Build.digest_json``): reading the file again could see other bytes than were checked.
    """
    from cryptography.exceptions import InvalidSignature

    key = _public_key(public_key)
    path = root / SIGNATURE_NAME
    if not path.exists():
        raise SignatureError(f"{path}: the build is not signed (clawc compile --sign-key-env)")
    try:
        signature = base64.b64decode(read_build_file(path).strip(), validate=True)
    except (BuildError, binascii.Error, ValueError) as exc:
        raise SignatureError(f"{path}: unreadable signature ({exc})") from None
    try:
        key.verify(signature, digest_json)
    except InvalidSignature:
        raise SignatureError(f"{path}: the signature does not match digest.json") from None


def _private_key(text: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        if "-----BEGIN" in text:
            key = load_pem_private_key(text.encode(), password=None)
        else:
            key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(text.strip()))
    except (ValueError, TypeError, binascii.Error) as exc:
        raise SignatureError(f"not an Ed25519 private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError("the signing key is not an Ed25519 key")
    return key


def _public_key(text: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        if "-----BEGIN" in text:
            key = load_pem_public_key(text.encode())
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(text.strip()))
    except (ValueError, TypeError, binascii.Error) as exc:
        raise SignatureError(f"not an Ed25519 public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SignatureError("the verification key is not an Ed25519 key")
    return key
