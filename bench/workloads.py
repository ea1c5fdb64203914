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


def openai_chat(model: str, *, stream: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": _messages_openai(),
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
