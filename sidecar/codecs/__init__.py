"""One codec per wire protocol, between the provider's format and the neutral conversation.

A new protocol is one module with a ``Codec`` subclass and one line in ``CODECS``.
"""

from clawpod.sidecar.codecs.anthropic import AnthropicCodec
from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.codecs.openai import OpenAICodec
from clawpod.sidecar.codecs.responses import ResponsesCodec

# Codecs hold no state: one instance serves every request.
CODECS: tuple[Codec, ...] = (OpenAICodec(), AnthropicCodec(), ResponsesCodec())

_BY_PATH = {path: codec for codec in CODECS for path in (codec.route, *codec.side_routes)}


def codec_for_path(path: str) -> Codec | None:
    """The codec of a client route (mediated or side route), or None."""
    return _BY_PATH.get(path)


def codec_for_api(api: str) -> Codec:
    """The first registered codec of a provider API: the one whose shapes a request without
    a protocol route (the model list, an unknown route) is answered in."""
    return next(codec for codec in CODECS if codec.api == api)
