"""Whether each provider answers a streamed request that offers tools (contract §7.4), per kind
of round.

Some local servers cannot: llama-cpp-python ends such a stream with no event at all when the
model picks a tool under ``tool_choice: auto``, yet streams the same request without
``tool_choice`` (it drops the tools) or with a named tool; others refuse it with an error
status. A provider's ``stream-tools`` setting says so up front (``false``), promises it can
(``true``), or leaves it to be learned (``auto``). What is learned is one kind of round
(``round_kind``: how the request's ``tool_choice`` lets the model call a tool): the first
stream of that kind that comes back empty, or refused where the same call answered whole,
switches that provider to whole calls for rounds of that kind alone, for ``RETEST_S``; the
next such round after that streams again, and teaches it again if it must. Answer rounds
(``tool_choice: none``) always stream live. Each lesson is audited in the record of the request
that taught it (``stream_tools``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...manifest import Provider, StreamTools

log = logging.getLogger(__name__)

# Statuses a server may use to refuse streaming with tools. A server error (500), rate limits
# and overload (429, 503, 529) say nothing about the feature: they stay the provider's failure
# (a retry and a failover route see them as such) and are never taken for a refusal.
REFUSAL_STATUSES = frozenset({400, 422, 501})
# How long a lesson holds: a server upgraded (or restarted with another chat format) in the
# meantime streams again.
RETEST_S = 600.0


def offers_tools(body: dict[str, Any]) -> bool:
    """The upstream request offers tools (the field every protocol names ``tools``; the legacy
    Chat Completions ``functions``)."""
    return bool(body.get("tools") or body.get("functions"))


def round_kind(body: dict[str, Any]) -> str | None:
    """How the request lets the model call a tool, in every protocol's ``tool_choice``:
    ``unset``, ``auto``, ``required`` (any tool) or ``named`` (one tool); None for a round
    that offers none or forbids them (``none``): an answer round, which always streams."""
    if not offers_tools(body):
        return None
    choice = body.get("tool_choice", body.get("function_call"))
    if choice is None:
        return "unset"
    kind = choice.get("type") if isinstance(choice, dict) else choice
    if kind == "none":
        return None
    if kind == "auto":
        return "auto"
    return "required" if kind in ("required", "any") else "named"


class StreamToolsSupport:
    """Per provider and kind of round: stream requests that offer tools, or call whole and
    re-stream the text."""

    def __init__(
        self, providers: Mapping[str, Provider], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings: dict[str, StreamTools] = {
            name: provider.stream_tools for name, provider in providers.items()
        }
        self._whole_until: dict[tuple[str, str], float] = {}
        self._clock = clock

    def streams(self, provider: str, body: dict[str, Any]) -> bool:
        """Ask ``provider`` for a streamed answer to ``body``."""
        setting = self._settings.get(provider, "auto")
        if setting is False:
            return not offers_tools(body)
        kind = round_kind(body)
        if setting is True or kind is None or not self._whole_until:
            return True
        until = self._whole_until.get((provider, kind))
        if until is None:
            return True
        if until <= self._clock():  # the lesson is old: this round tests it again
            del self._whole_until[provider, kind]
            return True
        return False

    def may_fall_back(self, provider: str, body: dict[str, Any]) -> bool:
        """An empty or refused stream of ``body`` is retried whole (setting ``auto``, a round
        that lets the model call a tool)."""
        return self._settings.get(provider, "auto") == "auto" and round_kind(body) is not None

    def learn_cannot(self, provider: str, body: dict[str, Any], why: str) -> dict[str, Any]:
        """``provider`` answered a streamed ``body`` with ``why``: rounds of its kind are called
        whole for ``RETEST_S``. The lesson, for the audit record."""
        kind = round_kind(body) or "unset"
        self._whole_until[provider, kind] = self._clock() + RETEST_S
        log.warning(
            "provider %s %s to a streamed request offering tools (tool_choice: %s): such "
            "rounds are called whole for %d s (set stream-tools: false on it to skip the probe)",
            provider,
            why,
            kind,
            RETEST_S,
        )
        return {"provider": provider, "round": kind, "why": why, "whole_for_s": RETEST_S}
