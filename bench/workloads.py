"""Request bodies the bench sends: a realistic short agent conversation (about 2 KB of JSON)."""

from __future__ import annotations

from typing import Any

import orjson

SYSTEM = (
    "You are the desk analyst agent. Answer from the positions and market context you are "
    "given; say plainly when data is missing. Keep answers under 120 words and cite the "
    "figures you use. Never place orders unless the operator asked for one in this turn."
)
TURNS = [
    ("user", "Summarise yesterday's activity on the ACME position and anything unusual."),
    (
        "assistant",
        "ACME closed at 182.35 (+1.2%). Desk-1 holds 120 shares, desk-2 holds 40. Volume was "
        "about 30% above its 20-day average, mostly in the last hour of trading.",
    ),
    ("user", "Compare that with the sector and tell me whether the late volume matters."),
]
TOOL_SCHEMA_NOTE = "Look up a symbol or account; returns price, currency and positions."


def _messages_openai() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}] + [
        {"role": role, "content": text} for role, text in TURNS
    ]


# bench/wrk/post.lua puts a number of its own in place of this in every request it sends.
REQUEST_NUMBER = "@@request@@"


def openai_chat(model: str, *, stream: bool = False, distinct: bool = False) -> bytes:
    """``distinct``: each request sent asks in its own words (its last user turn ends with a
    number of its own), so it is another request to the sidecar, not a retry of the others:
    identical requests run one at a time (SPEC §8.2), which no real load of many runners does."""
    messages = _messages_openai()
    if distinct:
        messages[-1]["content"] += f" (request {REQUEST_NUMBER})"
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": 0.2,
        "max_tokens": 512,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def anthropic_messages(model: str, *, stream: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 512,
        "system": SYSTEM,
        "messages": [{"role": role, "content": text} for role, text in TURNS],
    }
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def responses_request(model: str, *, stream: bool = False) -> bytes:
    """The same conversation as a Responses request (Codex's protocol)."""
    body: dict[str, Any] = {
        "model": model,
        "instructions": SYSTEM,
        "input": [{"role": role, "content": text} for role, text in TURNS],
        "max_output_tokens": 512,
    }
    if stream:
        body["stream"] = True
    return orjson.dumps(body)
