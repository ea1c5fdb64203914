"""The ranking behind ``claw_tool_search`` (SPEC §23): what a tool is found by, and the bounds
on everything a model controls."""

from __future__ import annotations

from clawpod.sidecar.model.tool_search import (
    DEFAULT_RESULTS,
    MAX_QUERY_TERMS,
    MAX_RESULTS,
    SearchRequest,
    ToolIndex,
    index_of,
    read_request,
    terms,
)
from tests.support.builds import http_tool


def tool(name: str, description: str, *arguments: str):
    service, _, operation = name.partition(".")
    schema = {"type": "object", "properties": {a: {"type": "string"} for a in arguments}}
    return http_tool(
        service, operation, "http://127.0.0.1:9", schema=schema, description=description
    )


CATALOG = [
    tool("calendar.create_event", "Create an event in the user's calendar", "title", "start"),
    tool("billing.send_invoice", "Email an invoice to a customer", "customer_id"),
    tool("weather.forecast", "Temperature, rain and wind for a city", "city"),
    tool("crm.find_contact", "Look a person up by name", "email_address"),
]


def found(index: ToolIndex, query: str, limit: int = 3) -> list[str]:
    return [t.name for t in index.search(query, limit)]


def test_terms_split_names_and_drop_what_says_nothing() -> None:
    assert terms("getUserProfile by_ID, the invoices") == [
        "get",
        "user",
        "profile",
        "id",
        "invoice",
    ]


def test_a_tool_is_found_by_its_name_description_or_argument_names() -> None:
    index = ToolIndex(CATALOG)
    assert found(index, "send an invoice")[0] == "billing.send_invoice"
    assert found(index, "will it rain tomorrow")[0] == "weather.forecast"
    assert found(index, "email address of Ann")[0] == "crm.find_contact"
    assert found(index, "createEvent")[0] == "calendar.create_event"


def test_nothing_matching_finds_nothing_and_excluded_tools_are_never_found() -> None:
    index = ToolIndex(CATALOG)
    assert found(index, "zebra quantum") == []
    excluded = frozenset({"weather.forecast"})
    assert [t.name for t in index.search("rain", 3, excluded=excluded)] == []


def test_the_query_counts_only_its_first_terms() -> None:
    """A query of thousands of words costs what its first MAX_QUERY_TERMS do."""
    index = ToolIndex(CATALOG)
    filler = " ".join(f"q{chr(97 + n % 26)}{chr(97 + n // 26)}q" for n in range(MAX_QUERY_TERMS))
    assert found(index, filler + " invoice") == []
    assert found(index, "invoice " + filler) == ["billing.send_invoice"]


def test_a_description_stuffed_with_one_word_does_not_outrank_a_tool_named_for_it() -> None:
    stuffed = tool("notes.write", "forecast " * 10_000)
    index = ToolIndex([*CATALOG, stuffed])
    assert found(index, "weather forecast")[0] == "weather.forecast"


def test_the_request_is_bounded() -> None:
    assert read_request({"query": "x" * 10_000, "limit": 500}) == SearchRequest(
        "x" * 1000, MAX_RESULTS
    )
    assert read_request('{"query": "rain"}') == SearchRequest("rain", DEFAULT_RESULTS)
    assert read_request({"query": "rain", "limit": True}) == SearchRequest("rain", DEFAULT_RESULTS)
    assert isinstance(read_request({"query": ""}), str)
    assert isinstance(read_request("[1]"), str)
    assert isinstance(read_request("{"), str)


def test_a_grant_is_indexed_once_while_its_tools_are_the_same() -> None:
    assert index_of(CATALOG) is index_of(CATALOG)
    assert index_of(CATALOG) is not index_of(list(CATALOG))  # another list: indexed anew
    by_name = {t.presented: t for t in CATALOG}
    assert index_of(by_name) is index_of(by_name)
    assert [t.name for t in index_of(by_name).search("rain", 1)] == ["weather.forecast"]
