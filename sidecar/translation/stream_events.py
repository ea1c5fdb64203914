"""What a streamed answer says, whatever protocol carries it (contract §18): the stream
counterpart of ``ir.Reply``, one event at a time.

Stream translation reads the target's SSE into these events and writes them out in the
caller's protocol: the answer's text and function-call argument pieces as they come, usage
(``ir.Usage``), why the model stopped (``ir.Stop``), failure. Provider-run tools have no event:
no other protocol has a place for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Part, Stop, Usage

# Not frozen: a frozen dataclass is built through object.__setattr__, twice the cost, and a
# stream makes one event per piece of its answer; nothing keeps or changes them once written.


@dataclass(slots=True)
class Started:
    """The answer's head: the provider's id for it and the model that answers."""

    id: str | None
    model: str | None
    created: int = 0


@dataclass(slots=True)
class Text:
    text: str
    refusal: bool = False
    """The model's refusal (a Chat ``refusal`` delta, a Responses refusal part)."""


@dataclass(slots=True)
class CallStarted:
    """A function call begins; ``index`` names it in the source stream."""

    index: int
    call_id: str
    name: str


@dataclass(slots=True)
class CallArguments:
    """The next piece of a call's JSON arguments, passed on as it came (never parsed)."""

    index: int
    json: str


@dataclass(slots=True)
class Reasoning:
    """A whole piece of the model's reasoning (an ``ir`` reasoning part, its original carried
    opaquely): it goes out only to a caller whose protocol has a place for it."""

    part: Part


@dataclass(slots=True)
class Told:
    """Usage as far as the stream has told it."""

    usage: Usage


@dataclass(slots=True)
class Stopped:
    reason: Stop


@dataclass(slots=True)
class Ended:
    """The source stream's end marker: the answer is complete."""


@dataclass(slots=True)
class Failed:
    """The provider reported a failure inside the stream."""

    code: str
    message: str
    type: str = "api_error"


StreamEvent = (
    Started | Text | CallStarted | CallArguments | Reasoning | Told | Stopped | Ended | Failed
)
