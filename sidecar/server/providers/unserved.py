"""The one place that refuses a request whose protocol its provider does not serve.

A provider's ``api`` covers several protocols (``openai``: Chat Completions and Responses), and
an OpenAI-compatible local server often serves only Chat Completions: it answers the other
routes with a bare ``404 {"detail": "Not Found"}``. Relayed as is, that names no provider and
suggests nothing. Until the sidecar translates between protocols (contract §18), such an
answer becomes this refusal, in the caller's protocol: the provider, the protocol it lacks,
and what to do instead. A provider declared with the protocols it serves (``api:
chat-completions``) is never asked for another: the request is translated (``translated.py``).
"""

from __future__ import annotations

import orjson

from ...codecs import CODECS
from ...codecs.base import WireCodec

NOT_SERVED = "not_served"
"""The ``ModelFailed`` kind (and ``upstream_failure`` kind) of this refusal."""
# Statuses a server answers for a route it does not have: no other answer is tested.
NO_SUCH_ROUTE = frozenset({404, 405})


def not_served_message(codec: WireCodec, provider: str, status: int, body: bytes) -> str | None:
    """The refusal's message when the provider's answer says it has no route for ``codec``'s
    protocol; None for any other answer (a 404 about the model is the provider's own error)."""
    if status not in NO_SUCH_ROUTE or (status == 404 and _names_a_model(body)):
        return None
    others = [
        f"{other.title} ({other.route})"
        for other in CODECS
        if other.api == codec.api and other is not codec
    ]
    instead = f"use {' or '.join(others)} with it, or " if others else ""
    return (
        f"provider {provider!r} does not serve {codec.title} (it answered {status} to "
        f"{codec.upstream_path}); {instead}route this model to a provider that serves "
        f"{codec.title}. If it should serve it, check the provider's base-url. If it serves "
        "only Chat Completions, declare it `api: chat-completions` in the pod file: requests "
        "in the other protocols are then translated for it (docs/translation.md)."
    )


def _names_a_model(body: bytes) -> bool:
    """An error about the model (OpenAI's ``model_not_found``, Anthropic's ``model: x``), not
    about the route."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return "model" in orjson.dumps(parsed).decode().lower()
