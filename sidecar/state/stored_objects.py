"""Objects a provider stores for an agent (Responses ids, conversations), bound to that agent.

Every agent reaches the provider through one key, so the provider cannot tell agents apart: any
agent holding another's ``resp_…`` id could read, continue (``previous_response_id``), cancel or
delete it. The sidecar records each id as it passes (from the provider's answers, whole and
streamed) under the agent it answered (and, for a request with an end user, under that agent
for that end user: SPEC §21), and refuses every reference to an id this owner does not hold,
whether another agent's, another end user's, or one it never got.

A conversation is bound to the agent that created it through the sidecar (``POST
/v1/conversations``), or that the provider named it to in an answer. Any other conversation id is
refused as unknown: one made outside the sidecar, or another agent's, is never claimed by its
first user (which let an agent that learnt the id first take it).

Records persist in ``STATE/objects/owners.jsonl`` (one line per change, rewritten when mostly
stale) and survive a restart. Each agent (its end users' ids included) keeps at most
``MAX_PER_AGENT`` ids, its oldest dropped first, so one agent's flood never evicts another's; a
dropped response id is refused like an unknown one.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

import orjson

from ..model.end_user import agent_of

if TYPE_CHECKING:
    from ..codecs.base import WireCodec

log = logging.getLogger(__name__)

Kind = Literal["response", "conversation"]
KINDS = ("response", "conversation")
# An event line longer than this is not the small lifecycle event the ids come in.
MAX_PENDING_LINE = 1 << 20
MAX_PER_AGENT = 10_000
# Provider ids are short; a longer value is not an id anyone will present back.
MAX_ID_CHARS = 512
# Rewrite the file once it holds this many lines more than there are live records.
STALE_LINES = 10_000
OWNERS_FILE = Path("objects") / "owners.jsonl"


@dataclass(frozen=True, slots=True)
class StoredRef:
    kind: Kind
    id: str


@dataclass(slots=True)
class _Agent:
    held: OrderedDict[StoredRef, None] = field(default_factory=OrderedDict)


class StoredObjects:
    def __init__(self, state_dir: Path, max_per_agent: int = MAX_PER_AGENT) -> None:
        self._path = Path(state_dir) / OWNERS_FILE
        self._max = max_per_agent
        self._owner: dict[StoredRef, str] = {}
        self._agents: dict[str, _Agent] = {}
        self._file: IO[bytes] | None = None
        self._lines = 0
        self._load()

    # --- queries ----------------------------------------------------------------------------

    def owner(self, ref: StoredRef) -> str | None:
        return self._owner.get(ref)

    def refusal(self, owner: str, ref: StoredRef) -> str | None:
        """None when ``owner`` (``owner_of``) holds ``ref``; else why not: ``"foreign"``
        (another agent's or end user's) or ``"unknown"``."""
        holder = self._owner.get(ref)
        if holder == owner:
            return None
        return "unknown" if holder is None else "foreign"

    # --- changes ----------------------------------------------------------------------------

    def record(self, owner: str, refs: list[StoredRef]) -> list[StoredRef]:
        """Bind ``refs`` to ``owner``; the ones that were new. An id already bound to another
        owner keeps it (a provider would not hand one id to two agents)."""
        added = []
        for ref in refs:
            if len(ref.id) > MAX_ID_CHARS or ref in self._owner:
                continue
            self._bind(owner, ref)
            self._append({"a": owner, "k": ref.kind, "i": ref.id})
            added.append(ref)
        self._maybe_compact()
        return added

    def forget(self, owner: str, ref: StoredRef) -> None:
        """The object is gone (deleted at the provider)."""
        if self._owner.get(ref) != owner:
            return
        self._unbind(ref)
        self._append({"a": owner, "k": ref.kind, "i": ref.id, "gone": True})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # --- memory -----------------------------------------------------------------------------

    def _bind(self, owner: str, ref: StoredRef) -> None:
        held = self._agents.setdefault(agent_of(owner), _Agent()).held
        held[ref] = None
        self._owner[ref] = owner
        while len(held) > self._max:
            oldest, _ = held.popitem(last=False)
            del self._owner[oldest]

    def _unbind(self, ref: StoredRef) -> None:
        owner = self._owner.pop(ref, None)
        if owner is not None:
            self._agents[agent_of(owner)].held.pop(ref, None)

    # --- the file ---------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:  # every stored id is then unknown: refused, never shared
            log.error("could not read %s: %s", self._path, exc)
            return
        for line in data.splitlines():
            try:
                entry = orjson.loads(line)
                ref = StoredRef(entry["k"], entry["i"])
                owner = entry["a"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut short by a crash
            if entry.get("gone"):
                if self._owner.get(ref) == owner:
                    self._unbind(ref)
            elif ref not in self._owner:
                self._bind(owner, ref)
            self._lines += 1

    def _append(self, entry: dict[str, object]) -> None:
        # The binding already holds in memory; a failed write loses it at the next restart
        # only, where the id is then refused (fails closed).
        try:
            if self._file is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self._path.open("ab")
            self._file.write(orjson.dumps(entry) + b"\n")
            self._file.flush()
            self._lines += 1
        except OSError as exc:
            log.error("could not record a stored object in %s: %s", self._path, exc)

    def _maybe_compact(self) -> None:
        if self._lines - len(self._owner) < STALE_LINES:
            return
        temporary = self._path.with_suffix(".tmp")
        try:
            with temporary.open("wb") as out:
                for state in self._agents.values():
                    for ref in state.held:
                        entry = {"a": self._owner[ref], "k": ref.kind, "i": ref.id}
                        out.write(orjson.dumps(entry) + b"\n")
                out.flush()
                os.fsync(out.fileno())
            self.close()
            os.replace(temporary, self._path)
        except OSError as exc:
            log.error("could not compact %s: %s", self._path, exc)
        self._lines = len(self._owner)  # after a failure too: retried once as many lines later


class StreamedIds:
    """The stored ids a relayed stream announces (its ``response.created`` event), read from
    the first complete event that carries a response object; later events are not parsed."""

    __slots__ = ("_codec", "_pending", "found")

    def __init__(self, codec: WireCodec) -> None:
        self._codec = codec
        self._pending = b""
        self.found: list[StoredRef] = []

    def feed(self, chunk: bytes) -> bool:
        """True once, when this chunk completed the event that names the ids."""
        if self.found:
            return False
        data = self._pending + chunk
        end = data.rfind(b"\n")
        self._pending = data[end + 1 :][-MAX_PENDING_LINE:]
        if end < 0 or b'"response"' not in data[:end]:
            return False
        for line in data[:end].split(b"\n"):
            if line.startswith(b"data:") and b'"response"' in line:
                try:
                    event = orjson.loads(line[5:])
                except orjson.JSONDecodeError:
                    continue
                response = event.get("response") if isinstance(event, dict) else None
                self.found = refs(self._codec.stored_ids(response))
                if self.found:
                    return True
        return False


def refs(pairs: list[tuple[str, str]]) -> list[StoredRef]:
    return [StoredRef(kind, value) for kind, value in pairs if kind in KINDS]
