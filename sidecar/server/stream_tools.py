"""Whether each provider answers a streamed request that offers tools (contract §7.4).

Some local servers cannot: llama-cpp-python ends such a stream with no event at all when the
model picks a tool under ``tool_choice: auto``, others refuse it with an error status. A
provider's ``stream-tools`` setting says so up front (``false``), promises it can (``true``),
or leaves it to be learned (``auto``): the first stream that comes back empty, or refused where
the same call answered whole, switches that provider to whole calls for tool rounds while this
sidecar runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..manifest import Provider, StreamTools

log = logging.getLogger(__name__)

# Statuses a server may use to refuse streaming with tools. A server error (500), rate limits
# and overload (429, 503, 529) say nothing about the feature: they stay the provider's failure
# (a retry and a failover route see them as such) and are never taken for a refusal.
REFUSAL_STATUSES = frozenset({400, 422, 501})


def offers_tools(body: dict[str, Any]) -> bool:
    """The upstream request offers tools (the field every protocol names ``tools``; the legacy
    Chat Completions ``functions``)."""
    return bool(body.get("tools") or body.get("functions"))


class StreamToolsSupport:
    """Per provider: stream requests that offer tools, or call whole and re-stream the text."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self._settings: dict[str, StreamTools] = {
            name: provider.stream_tools for name, provider in providers.items()
        }

    def streams(self, provider: str, body: dict[str, Any]) -> bool:
        """Ask ``provider`` for a streamed answer to ``body``."""
        return self._settings.get(provider, "auto") is not False or not offers_tools(body)

    def may_fall_back(self, provider: str) -> bool:
        """An empty or refused stream of ``provider`` is retried whole (setting ``auto``)."""
        return self._settings.get(provider, "auto") == "auto"

    def learn_cannot(self, provider: str, why: str) -> None:
        """``provider`` answered a streamed tool request with ``why``: whole calls from now."""
        if self._settings.get(provider) == "auto":
            self._settings[provider] = False
            log.warning(
                "provider %s %s to a streamed request offering tools: its tool rounds are "
                "called whole from now on (set stream-tools: false on it to skip the probe)",
                provider,
                why,
            )
