"""Thin OpenAI and Anthropic codecs between provider wire formats and the neutral conversation."""

from clawpod.sidecar.codecs.anthropic import AnthropicCodec
from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.codecs.openai import OpenAICodec


def codec_for(api: str) -> Codec:
    """The codec of an API; codecs hold no state, so one instance serves every request."""
    return _CODECS[api]


_CODECS: dict[str, Codec] = {"openai": OpenAICodec(), "anthropic": AnthropicCodec()}
