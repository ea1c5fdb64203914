"""Protocol translation between Chat Completions, Responses and Messages (contract §18), sans-IO.

Design (for whoever wires or extends it; docs/translation.md has the tables):

- Translation happens at ONE boundary, the model call: the caller's request body is written
  in the target provider's protocol just before it goes upstream, and the provider's answer
  (or error) is written back in the caller's protocol as soon as it is read. Everything
  between the client and that boundary stays in the caller's protocol, unchanged: the codecs,
  the mediation engine (its hidden rounds, continuity fingerprints, tool choice rewriting),
  pass-through accounting. A fallback target of another protocol is one more translation at
  the same boundary.
- Each protocol's part lives in its one home, ``codecs/<protocol>/neutral.py``: four functions
  over ``model/neutral.py``'s shape, ``read_request``/``write_request`` and
  ``read_reply``/``write_reply``. A direction is a read in one home and a write in another, so
  six directions need three homes, not six. This package is the glue; it knows no protocol.
- Public surface (stable; the server imports only these):
  ``translate_request(body, source, target) -> Translated`` (raises ``Untranslatable``),
  ``translate_reply(body, translated) -> dict`` (raises ``Untranslatable`` for a reply that is
  not a valid answer of the target protocol), ``translate_error(status, body, provider,
  target) -> ApiError``, ``untranslatable_error(exc, provider, source, target) -> ApiError``
  and ``target_protocol(caller, served)``. Protocols are named as the codecs name themselves
  (``Codec.name``): ``chat``, ``messages``, ``responses``.
- Reasoning is opaque: a Messages thinking block reaches a Responses client as a reasoning item
  whose ``encrypted_content`` carries the block (and a Responses reasoning item reaches a
  Messages client as a thinking block whose ``signature`` carries the item); sent back, it is
  restored for its own protocol and dropped for any other. Chat has no place for it.
- Streams are read live by ``streams.py`` (each home's reader into ``model/neutral.py``),
  hooked by ``server/translated/translated_stream.py``: a streamed pass-through is written out
  of those events by the caller's writer (``StreamTranslator``), and a mediated request's
  streamed call folds them into its turn (``TranslatedTurn``), written once at its end by the
  caller's ``write_reply``, as a whole answer is. An answer that comes whole is still
  translated whole here and re-rendered by the caller's codec.
- The server's side is ``server/translated/translated.py`` (every hook in one module):
  ``plan(ctx, body)`` after routing (refusal up front; sets ``ctx.translations``);
  pass-through: ``passthrough_send`` (in the failover ``send``), ``answered_in`` +
  ``relay_translated`` (the answer; streamed callers re-rendered); mediated:
  ``call_model(ctx, command)``, the one whole model call over targets of any protocol (the
  driver calls it instead of its own when ``ctx.translations`` is set); side routes:
  ``counts_here`` + ``answer_count`` (token counts estimated).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import orjson

from ..codecs.chat import neutral as chat
from ..codecs.messages import neutral as messages
from ..codecs.messages.codec import ERROR_TYPES
from ..codecs.responses import neutral as responses
from ..codecs.responses.neutral import reshaped_tools
from ..model.errors import ApiError
from ..model.neutral import Request, Untranslatable

__all__ = [
    "PROTOCOLS",
    "PROTOCOL_TITLES",
    "Translated",
    "Untranslatable",
    "reshaped_tools",
    "target_protocol",
    "translate_error",
    "translate_reply",
    "translate_request",
    "untranslatable_error",
    "unusable_reply",
]

# Each protocol's bodies read into the neutral shape and written from it, by its name.
PROTOCOLS: dict[str, ModuleType] = {"chat": chat, "messages": messages, "responses": responses}
PROTOCOL_TITLES = {"chat": "Chat Completions", "messages": "Messages", "responses": "Responses"}
# A provider serving several protocols is spoken to in the first it serves of this order:
# Chat Completions is what every OpenAI-compatible server has.
_PREFERENCE = ("chat", "messages", "responses")
_MAX_PROVIDER_MESSAGE = 500
# What a reader may raise on a body of the wrong shape beyond its own Untranslatable.
_MALFORMED = (Untranslatable, TypeError, KeyError, ValueError, AttributeError)


@dataclass(slots=True)
class Translated:
    """A request written in the target protocol, and what its answer's translation needs."""

    body: dict[str, Any]
    source: str
    target: str
    request: Request
    dropped: tuple[str, ...]
    """Caller fields with no counterpart, dropped (audited)."""


@functools.cache  # asked for every target of every request; a pod has few pairs
def target_protocol(caller: str, served: tuple[str, ...]) -> str:
    """The protocol to speak to a provider that serves ``served``: the caller's own when it
    is served, else the first served one in order of preference."""
    if caller in served:
        return caller
    return next(p for p in _PREFERENCE if p in served)


def translate_request(body: dict[str, Any], source: str, target: str) -> Translated:
    """``body`` (a ``source`` request) as a ``target`` request."""
    try:
        request, dropped = PROTOCOLS[source].read_request(body)
        written = PROTOCOLS[target].write_request(request)
    except Untranslatable:
        raise
    except _MALFORMED as exc:
        raise Untranslatable(f"the request is malformed ({type(exc).__name__})") from None
    if request.stream:
        written["stream"] = False  # streamed callers get the whole answer re-streamed
    return Translated(written, source, target, request, tuple(dropped))


def translate_reply(body: Any, translated: Translated) -> dict[str, Any]:
    """A ``translated.target`` answer as the ``translated.source`` caller expects it."""
    if not isinstance(body, dict):
        raise Untranslatable("the answer is not a JSON object")
    try:
        reply = PROTOCOLS[translated.target].read_reply(body)
        return PROTOCOLS[translated.source].write_reply(reply, translated.request)
    except Untranslatable:
        raise
    except _MALFORMED as exc:
        raise Untranslatable(f"the answer is malformed ({type(exc).__name__})") from None


def translate_error(status: int, body: bytes, provider: str, target: str) -> ApiError:
    """A provider's error answer (in ``target``'s shape, or any text) as an error the caller's
    codec renders in its own shape: the status kept, the provider and protocol named."""
    error: Any = None
    try:
        parsed = orjson.loads(body)
        error = parsed.get("error") if isinstance(parsed, dict) else None
    except orjson.JSONDecodeError:
        pass
    if isinstance(error, dict):
        text = str(error.get("message") or "")
        code = error.get("code") or error.get("type")
        kind = error.get("type")
    else:
        text, code, kind = body[:200].decode("utf-8", "replace").strip(), None, None
    if len(text) > _MAX_PROVIDER_MESSAGE:
        text = text[:_MAX_PROVIDER_MESSAGE] + "… (cut)"
    message = f"provider {provider!r} ({PROTOCOL_TITLES[target]}) answered {status}"
    return ApiError(
        status if 400 <= status < 600 else 502,
        str(code) if isinstance(code, str | int) and code else f"upstream_http_{status}",
        f"{message}: {text}" if text else message,
        # A type both families know is kept; others (OpenAI's "requests", "tokens") become
        # the status's, which every SDK maps to its exception class.
        kind if kind in ERROR_TYPES else None,
    )


def untranslatable_error(exc: Untranslatable, provider: str, source: str, target: str) -> ApiError:
    """A request the target protocol cannot carry: refused before anything goes upstream."""
    return ApiError(
        400,
        "untranslatable_request",
        f"provider {provider!r} speaks {PROTOCOL_TITLES[target]}, which cannot carry this "
        f"{PROTOCOL_TITLES[source]} request: {exc}. Route this model to a provider that serves "
        f"{PROTOCOL_TITLES[source]}, or leave that out.",
        headers={"x-should-retry": "false"},
    )


def unusable_reply(exc: Untranslatable, provider: str, target: str) -> ApiError:
    """A provider answer that is not a valid answer of its protocol."""
    return ApiError(
        502,
        "upstream_protocol_error",
        f"provider {provider!r} sent a {PROTOCOL_TITLES[target]} answer that cannot be "
        f"translated: {exc}",
    )
