"""Live streaming of mediated answers (SPEC §8.1), sans-IO.

Two parts per protocol. A ``TurnAssembler`` reads one upstream turn as its SSE bytes arrive:
it hands back the text deltas the client may see at once and, at the end, the turn folded into
the equivalent non-streaming body. A ``ClientStream`` owns the client's one stream lifecycle
over all turns of a request: it opens it once, numbers text blocks across turns, closes each
turn's text when the turn ends, and at the end writes what the answer holds beyond its text
(runner calls, reasoning, stop reason, summed usage) and the closing events once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple

from ..model.errors import ApiError
from .sse import EventReader


class TextDelta(NamedTuple):
    """A piece of answer text of the turn being read. A tuple, not a frozen dataclass: one is
    made per text event, and a tuple is built in half the time (no ``object.__setattr__``)."""

    part: tuple[int, ...]
    """Where it goes in the upstream turn: a choice, a content block, an (item, part) pair."""
    text: str
    item_id: str | None = None
    """The upstream output item holding it, where the protocol names items."""
    before: tuple[dict[str, Any], ...] = ()
    """On a part's first delta: what the turn gave before it and is not shown yet (reasoning,
    provider-run tools; never a call the sidecar or the runner executes). It goes out first,
    so the client's turn keeps the provider's order (an API refuses an assistant turn whose
    thinking does not come first)."""


def shown_live(
    parts: list[dict[str, Any]],
    has_text: Callable[[dict[str, Any]], bool],
    goes_before_text: Callable[[dict[str, Any]], bool],
) -> list[int]:
    """Positions of a turn's parts a streaming client saw as they came: every part with text,
    and what goes before it (what the assemblers hand out, folded over a whole turn)."""
    shown: list[int] = []
    handed = 0
    for position, part in enumerate(parts):
        if has_text(part):
            shown += [p for p in range(handed, position) if goes_before_text(parts[p])]
            shown.append(position)
            handed = position + 1
    return shown


class EndMarkerWatch:
    """Whether a stream, read in pieces, carried one of its protocol's end markers (a marker
    may be split across pieces). Until it did, the stream counts as cut: its connection is not
    pooled again, and a relay tells its client the answer is incomplete."""

    __slots__ = ("_ends", "_keep", "_tail", "seen")

    def __init__(self, ends: tuple[bytes, ...]) -> None:
        self._ends = ends
        self._keep = max(map(len, ends))
        self._tail = b""
        self.seen = False

    def feed(self, chunk: bytes) -> bool:
        """Read the next piece; True once an end marker has been seen."""
        if not self.seen:
            window = self._tail + chunk
            self.seen = any(end in window for end in self._ends)
            self._tail = window[-self._keep :]
        return self.seen


class TurnAssembler(ABC):
    """One upstream turn, read as it streams."""

    def __init__(self) -> None:
        self._reader = EventReader()
        self.head: dict[str, Any] = {}
        """What the stream said about the turn before its content (ids, model)."""
        self.events = 0
        """Events read so far (comments are none): a stream with none said nothing at all."""

    def feed(self, data: bytes) -> list[TextDelta]:
        """Read the next bytes; the text deltas they complete, in order."""
        deltas: list[TextDelta] = []
        for event, payload in self._reader.feed(data):
            self.events += 1
            self._event(event, payload, deltas)
        return deltas

    def finish(self) -> dict[str, Any]:
        """The whole turn as a non-streaming body; ``CodecError`` if the stream was cut."""
        for event, payload in self._reader.finish():
            self.events += 1
            self._event(event, payload, [])
        return self._body()

    @abstractmethod
    def _event(self, event: str | None, payload: str, deltas: list[TextDelta]) -> None:
        """Fold one SSE event in; raise ``CodecError`` for an error event."""

    @abstractmethod
    def _body(self) -> dict[str, Any]: ...


class ClientStream(ABC):
    """The client's one lifecycle across every model turn of a mediated request."""

    opened = False

    def text(self, head: dict[str, Any], deltas: list[TextDelta]) -> bytes:
        """Frames forwarding these deltas now (the lifecycle opens with the first)."""
        frames = b""
        if not self.opened:
            self.opened = True
            frames = self._open(head)
        return frames + self._text(deltas)

    @abstractmethod
    def _open(self, head: dict[str, Any]) -> bytes: ...

    @abstractmethod
    def _text(self, deltas: list[TextDelta]) -> bytes: ...

    @abstractmethod
    def end_turn(self, body: dict[str, Any]) -> bytes:
        """The turn (assembled ``body``) ended: close the text it opened."""

    @abstractmethod
    def finish(self, answer: dict[str, Any]) -> bytes:
        """The rest of the lifecycle: what ``answer`` (the shown response, text of every turn
        first) holds beyond the text already sent, then the closing events."""

    @abstractmethod
    def fail(self, err: ApiError) -> bytes:
        """End the lifecycle with the protocol's in-band error."""
