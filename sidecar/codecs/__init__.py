"""One home per wire protocol (``chat/``, ``messages/``, ``responses/``), each between the
provider's format and the neutral shapes: the engine's conversation and translation's
``model/neutral.py``.

A new protocol is one package with a ``Codec`` subclass and one line in ``CODECS``.
"""

from collections.abc import Mapping

from .base import Codec, WireCodec
from .chat.codec import OpenAICodec
from .messages.codec import AnthropicCodec
from .responses.codec import ResponsesCodec

# Codecs hold no state: one instance serves every request.
CODECS: tuple[Codec, ...] = (OpenAICodec(), AnthropicCodec(), ResponsesCodec())

# Every protocol route is under it; clients whose base URL lacks it reach the same routes.
V1 = "/v1"
_BY_PATH = {path: codec for codec in CODECS for path in (codec.route, *codec.side_routes)}


def codec_for_path(path: str) -> Codec | None:
    """The codec of a client route (mediated or side route), or None."""
    return _BY_PATH.get(path)


def codec_for_caller(path: str, headers: Mapping[str, str]) -> WireCodec:
    """The protocol a request to any path speaks, to answer it in (a model list, an error): its
    route's (with or without ``/v1``); else one whose default headers the client sent
    (Anthropic clients send ``anthropic-version``), else one under whose route the path is;
    else the first codec's (Chat Completions)."""
    versioned = path if path.startswith(V1 + "/") else V1 + path
    codec = _BY_PATH.get(versioned)
    if codec is not None:
        return codec
    for codec in CODECS:
        if any(name in headers for name in codec.default_headers):
            return codec
    for codec in CODECS:
        if versioned.startswith(codec.route):
            return codec
    return CODECS[0]
