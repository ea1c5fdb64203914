"""Recall of hidden rounds (docs/contract.md §8.3): of the rounds found under an earlier
answer's continuity keys, the ones whose turns before it match this conversation best, put
back before the answer they led to. The engine names the keys (``MediationEngine``'s
continuity keys) and enters this module only when the store found some."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .commands import Remembered

# Content blocks (Messages) and items (Responses) that are tool calls.
CALL_PARTS = frozenset({"tool_use", "function_call"})

Message = dict[str, Any]
Lookups = dict[int, tuple[list[str], list[str]]]
"""Position of each earlier answer -> the turns before it and the keys its rounds may be under."""


@dataclass(slots=True)
class Restored:
    """The conversation with the recalled rounds put back."""

    history: list[Message]
    rounds: int = 0
    """Hidden rounds put back (for the audit)."""
    taint_sources: list[str] = field(default_factory=list)
    """Untrusted tools whose results the rounds put back bring in (§17)."""


def put_back(
    messages: list[Message],
    lookups: Lookups,
    found: dict[str, Remembered],
    resolve: Callable[[Message, list[Message]], Message],
) -> Restored:
    """Each earlier answer's best-matching rounds before it, once each. ``resolve``: the codec's
    ``resolve_references`` (an answer echoed by reference, as the stored one)."""
    restored = Restored([])
    history = restored.history
    used: set[str] = set()
    for index, message in enumerate(messages):
        if index in lookups:
            context, candidates = lookups[index]
            best = _best_match(context, [found[k] for k in candidates if k in found])
            if best is not None and best.origin not in used:  # an answer's rounds go once
                used.add(best.origin)
                restored.taint_sources += best.taint_sources
                answered = _ends_in_answer(best.messages)
                restored.rounds += _rounds_in(best.messages) - answered
                if answered and not _calls_tools(message):
                    history.extend(best.messages)
                    continue  # the stored answer stands for the runner's echo of it
                # An echo with tool calls stands: the runner's results answer its ids
                # (OpenClaw rewrites them), so only the hidden rounds go in before it.
                history.extend(best.messages[:-1] if answered else best.messages)
                message = resolve(message, best.messages)
        history.append(message)
    return restored


def _best_match(context: list[str], candidates: list[Remembered]) -> Remembered | None:
    """The stored rounds whose turns before the answer are most like this request's: the turn
    right before the answer must be among them (two conversations with equal answers differ
    there), and every stored turn missing here counts against (an equal answer later in the
    same conversation has more of them)."""
    nearest = context[-1]
    best: tuple[int, Remembered] | None = None
    here = set(context)
    for candidate in candidates:
        stored = set(candidate.context)
        if stored and nearest not in stored:
            continue
        score = len(stored & here) - len(stored - here)
        if best is None or score > best[0]:
            best = (score, candidate)
    return best[1] if best is not None else None


def _rounds_in(messages: list[Message]) -> int:
    """Hidden rounds in a stored transcript: its assistant turns (Responses items carry no role:
    each function call item counts)."""
    return sum(
        1
        for m in messages
        if m.get("role") == "assistant"
        or (m.get("role") is None and m.get("type") == "function_call")
    )


def _ends_in_answer(rounds: list[Message]) -> bool:
    """Stored rounds end in tool results; those stored for a streamed answer end in the answer
    as the provider gave it, which takes the place of the runner's echo of what it saw."""
    return bool(rounds) and rounds[-1].get("role") == "assistant"


def _calls_tools(message: Message) -> bool:
    """A runner's echo of an answer that called the runner's tools, in any protocol's shape."""
    if message.get("tool_calls") or message.get("function_call"):
        return True
    parts = message.get("content") if isinstance(message.get("content"), list) else []
    parts = [*parts, *(message.get("items") or [])]
    return any(isinstance(p, dict) and p.get("type") in CALL_PARTS for p in parts)
