"""A scripted Chat Completions model for a pod with a large tool catalog (SPEC §23), answering
on the stub provider (a real HTTP server on 127.0.0.1) and counting what it receives.

It chooses the way a model reading the tools would: the offered tool whose name and
description share the most words with the user's question. Offered a search tool instead, it
first searches with the question's words, then chooses among what the search brought. Every
request's tool definitions are counted in tokens (4 bytes of JSON a token, the usual estimate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.mediation.scripted import oa_calls, oa_text
from tests.support.upstream import Received, Reply

BYTES_PER_TOKEN = 4
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


@dataclass
class CatalogModel:
    search_tool: str = "claw_tool_search"
    tool_tokens: list[int] = field(default_factory=list)
    """The tool definitions' tokens of each model call received."""
    calls: int = 0

    def __call__(self, received: Received) -> Reply:
        body = received.json
        tools = body.get("tools") or []
        self.tool_tokens.append(len(orjson.dumps(tools)) // BYTES_PER_TOKEN)
        self.calls += 1
        messages = body["messages"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        offered = {t["function"]["name"]: t["function"] for t in tools}
        last = messages[-1]
        if last["role"] == "tool" and not _searched_last(messages, self.search_tool):
            return Reply.json(oa_text("done", tokens=self.tool_tokens[-1]))
        if last["role"] != "tool" and self.search_tool in offered:
            arguments = {"query": question}
            return Reply.json(oa_calls(self._call(self.search_tool, arguments)))
        choice = best_tool(question, [f for n, f in offered.items() if n != self.search_tool])
        if choice is None:
            return Reply.json(oa_text("no tool fits"))
        return Reply.json(oa_calls(self._call(choice, {"note": question})))

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[str, str, Any]:
        return (f"call_{self.calls}", name, arguments)


def best_tool(question: str, functions: list[dict[str, Any]]) -> str | None:
    """The function sharing the most words with the question; the first listed on a tie."""
    asked = words(question)
    best: tuple[int, str] | None = None
    for function in functions:
        shared = len(asked & words(f"{function['name']} {function.get('description', '')}"))
        if shared and (best is None or shared > best[0]):
            best = (shared, function["name"])
    return best[1] if best else None


def _searched_last(messages: list[dict[str, Any]], search_tool: str) -> bool:
    """Whether the last assistant turn called the search (its results came back)."""
    for message in reversed(messages):
        if message["role"] == "assistant":
            calls = message.get("tool_calls") or []
            return any(c["function"]["name"] == search_tool for c in calls)
    return False
