"""Search over an agent's granted tools (SPEC §23): ``claw_tool_search``, offered in place of
the deferred tools a provider cannot defer itself, in mediated mode and on ``/mcp``.

A small Okapi BM25 over each tool's name, description and argument names. Written here rather
than taken from a library: the maintained ones (bm25s, rank-bm25) bring numpy, and the
sidecar's search is a few hundred short documents, ranked in pure Python within a request's
CPU budget. Everything a caller controls is bounded: the query's length and terms, the number
of results, and how many words of a description count (a description that repeats a word a
thousand times does not buy more than its first words say).
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..manifest import ManagedTool

SEARCH_TOOL = "claw_tool_search"
MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32
DEFAULT_RESULTS = 5
MAX_RESULTS = 10
# The words of a description that are indexed: enough for any honest description.
MAX_DESCRIPTION_TERMS = 200
# Okapi BM25's usual constants.
K1 = 1.2
B = 0.75
# A tool's name says most about it: its words count this many times.
NAME_WEIGHT = 2

SEARCH_DESCRIPTION = (
    "Find tools by what they do. This agent has more tools than are listed: describe the task "
    "in a few words and the best-matching tools are returned, then offered to you as tools "
    "from your next step. Only tools found this way (or already listed) can be called."
)
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "maxLength": MAX_QUERY_CHARS,
            "description": "words describing the task, e.g. 'create a calendar event'",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
    },
    "required": ["query"],
    "additionalProperties": False,
}

_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[0-9]+|[a-z]+")
# Words that say nothing of what a tool does.
_STOPWORD_TEXT = (
    "a an and are as at be by can do for from how i in is it me my of on or please "
    "some that the this to use want what when which with you your"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def terms(text: str) -> list[str]:
    """The words of ``text`` as the index compares them: split at case changes and at every
    character that is not a letter or digit, lower-cased, a plural's final 's' dropped."""
    words = (w.lower() for w in _WORD.findall(text))
    return [_stem(w) for w in words if w not in _STOPWORDS and len(w) > 1]


def _stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def tool_terms(tool: ManagedTool) -> list[str]:
    """What a tool is found by: its names, its description's first words, its argument names."""
    properties = tool.input_schema.get("properties")
    arguments = " ".join(properties) if isinstance(properties, dict) else ""
    name_words = terms(f"{tool.presented} {tool.name}")
    description = terms(tool.description)[:MAX_DESCRIPTION_TERMS]
    return name_words * NAME_WEIGHT + description + terms(arguments)


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    limit: int


def read_request(arguments: str | dict[str, Any] | None) -> SearchRequest | str:
    """The model's search arguments (JSON text or parsed), bounded; a message saying what is
    wrong otherwise."""
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return 'arguments are not valid JSON: send {"query": "words"}'
    if not isinstance(arguments, dict):
        return "arguments must be an object {query, limit}"
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        return "query must be a non-empty string of words describing the task"
    limit = arguments.get("limit", DEFAULT_RESULTS)
    if isinstance(limit, bool) or not isinstance(limit, int):
        limit = DEFAULT_RESULTS
    return SearchRequest(query[:MAX_QUERY_CHARS], max(1, min(limit, MAX_RESULTS)))


class ToolIndex:
    """BM25 over a fixed list of tools."""

    def __init__(self, tools: Sequence[ManagedTool]) -> None:
        self.tools = list(tools)
        self._postings: dict[str, list[tuple[int, int]]] = {}
        lengths: list[int] = []
        for number, tool in enumerate(tools):
            counts = Counter(tool_terms(tool))
            lengths.append(sum(counts.values()))
            for term, count in counts.items():
                self._postings.setdefault(term, []).append((number, count))
        self._lengths = lengths
        average = sum(lengths) / len(lengths) if lengths else 1.0
        self._norms = [K1 * (1 - B + B * n / (average or 1.0)) for n in lengths]
        total = len(lengths)
        self._idf = {
            term: math.log(1 + (total - len(p) + 0.5) / (len(p) + 0.5))
            for term, p in self._postings.items()
        }

    def search(
        self, query: str, limit: int, *, excluded: frozenset[str] = frozenset()
    ) -> list[ManagedTool]:
        """At most ``limit`` tools that best match ``query``, best first; ties go to the tool
        granted first. Tools whose canonical name is in ``excluded`` are never returned."""
        wanted = list(dict.fromkeys(terms(query[:MAX_QUERY_CHARS])))[:MAX_QUERY_TERMS]
        scores: dict[int, float] = {}
        for term in wanted:
            idf = self._idf.get(term)
            if idf is None:
                continue
            for number, count in self._postings[term]:
                weight = idf * count * (K1 + 1) / (count + self._norms[number])
                scores[number] = scores.get(number, 0.0) + weight
        ranked = heapq.nsmallest(
            limit + len(excluded),
            ((-score, number) for number, score in scores.items()),
        )
        found = [self.tools[number] for _, number in ranked]
        return [tool for tool in found if tool.name not in excluded][:limit]


# Indexes of the tool collections lately searched: an agent's grant is indexed once, not per
# request. Keyed by the collection's identity (one build's list, or a request offer's dict of
# deferred tools, shared by its requests); each entry holds it, so an id is not reused while kept.
_INDEXES: dict[int, tuple[Collection[ManagedTool], ToolIndex]] = {}
KEPT_INDEXES = 64


def index_of(tools: Collection[ManagedTool] | Mapping[str, ManagedTool]) -> ToolIndex:
    """The index of ``tools`` (a mapping: its values), built once while it is the same object."""
    kept = _INDEXES.pop(id(tools), None)
    if kept is None or kept[0] is not tools:
        values = tools.values() if isinstance(tools, Mapping) else tools
        kept = (tools, ToolIndex(list(values)))
    _INDEXES[id(tools)] = kept  # the most recent last
    while len(_INDEXES) > KEPT_INDEXES:
        del _INDEXES[next(iter(_INDEXES))]
    return kept[1]


def found_envelope(matches: Sequence[tuple[str, ManagedTool]]) -> dict[str, Any]:
    """What the model reads of a search: each tool found, by the name it is called by here and
    its description."""
    found = [{"name": name, "description": tool.description} for name, tool in matches]
    note = "these tools are offered to you from your next step" if found else "no tool matched"
    return {"ok": True, "status": None, "data": {"tools": found, "note": note}}
