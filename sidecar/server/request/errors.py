"""Telling a client about an error in its protocol: a whole response, or in-band mid-stream."""

from __future__ import annotations

import contextlib

from ...codecs.base import WireCodec
from ...model.errors import ApiError
from .exchange import Exchange

JSON_HEADERS = {"Content-Type": "application/json"}
# SPEC 7.2: the official openai and anthropic SDKs send a request again on 408/409/429/5xx
# unless the answer says not to. Errors the sidecar decides, and errors after a side effect,
# carry this.
FINAL_HEADERS = {**JSON_HEADERS, "x-should-retry": "false"}


async def reply_error(
    exchange: Exchange, codec: WireCodec, err: ApiError, *, final: bool = False
) -> None:
    """Tell the client about ``err``: a whole error response, or, when the response head is
    already gone, the protocol's in-band stream error that ends the body. ``final``: the
    sidecar decided it, retrying the same request cannot help (``x-should-retry: false``)."""
    with contextlib.suppress(ConnectionError):
        if exchange.started:
            await exchange.write(codec.stream_error(err))
            await exchange.end()
        else:
            headers = FINAL_HEADERS if final else JSON_HEADERS
            if err.headers:
                headers = {**headers, **err.headers}
            await exchange.respond(err.status, codec.error_json(err), headers)
