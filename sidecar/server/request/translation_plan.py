"""Which targets of one request speak another protocol than its caller, and the client's body
written in each of them (contract §18); filled by ``translated.plan``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...codecs.base import Codec
from ...translation import Translated, target_protocol

if TYPE_CHECKING:
    from ...manifest import Provider


@dataclass(slots=True)
class Translations:
    """A request some of whose targets speak another protocol than its caller."""

    caller: Codec
    by_protocol: dict[str, Translated]
    """The client's body in each target protocol it needs (pass-through sends these)."""
    include_usage: bool = False
    """A streaming Chat caller asked for the usage chunk."""
    by_provider: dict[str, str | None] = field(default_factory=dict)
    """The protocol each target provider needs, by name (None: the caller's), as ``plan``
    found it: asked again for every call, its answer and its stream."""

    def protocol_of(self, name: str, providers: Mapping[str, Provider]) -> str | None:
        """The protocol of provider ``name`` (of ``providers``, looked up only when ``plan``
        did not see it) when it needs a translation; None: it speaks the caller's."""
        if name in self.by_provider:
            return self.by_provider[name]
        protocol = target_protocol(self.caller.name, providers[name].served)
        return None if protocol == self.caller.name else protocol
