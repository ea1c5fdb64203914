"""The codec that mediates a provider API's recorded exchanges (recordings name the API)."""

from __future__ import annotations

from clawpod.sidecar.codecs import codec_for_path
from clawpod.sidecar.codecs.base import Codec

_ROUTE = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}


# Every codec in CODECS, by the API label tests name it with (a test checks none is missing).
EVERY_API = list(_ROUTE)


def codec_of(api: str) -> Codec:
    codec = codec_for_path(_ROUTE[api])
    assert codec is not None
    return codec
