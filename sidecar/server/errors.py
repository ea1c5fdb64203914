"""Telling a client about an error in its protocol: a whole response, or in-band mid-stream."""

from __future__ import annotations

import contextlib

from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.model.errors import ApiError
from clawpod.sidecar.server.exchange import Exchange

JSON_HEADERS = {"Content-Type": "application/json"}


async def reply_error(exchange: Exchange, codec: Codec, err: ApiError) -> None:
    """Tell the client about ``err``: a whole error response, or, when the response head is
    already gone, the protocol's in-band stream error that ends the body."""
    with contextlib.suppress(ConnectionError):
        if exchange.started:
            await exchange.write(codec.stream_error(err))
            await exchange.end()
        else:
            await exchange.respond(err.status, codec.error_json(err), JSON_HEADERS)
