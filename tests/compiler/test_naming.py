"""Presented names: valid for OpenAI, unique per agent, deterministic and reversible."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from clawpod.compiler.services.tool_names import base_name, present
from clawpod.sidecar.manifest import PRESENTED_NAME_PATTERN

VALID = re.compile(PRESENTED_NAME_PATTERN)


def check(canonicals: list[str]) -> dict[str, str]:
    names = present(canonicals)
    assert set(names) == set(canonicals)
    assert all(VALID.match(name) for name in names.values())
    assert len(set(names.values())) == len(names)  # unique, hence reversible
    return names


def test_plain_names_are_service_underscore_tool() -> None:
    names = check(["trading-api.get_quote", "market.news.search"])
    assert names == {
        "trading-api.get_quote": "trading-api_get_quote",
        "market.news.search": "market_news_search",
    }


def test_very_long_names_are_shortened_with_a_hash() -> None:
    long_service, long_tool = "s" * 70, "t" * 90
    names = check([f"{long_service}.{long_tool}", f"{long_service}.{long_tool}x", "svc.ok"])
    shortened = [n for c, n in names.items() if c != "svc.ok"]
    assert all(len(n) == 64 for n in shortened)
    assert shortened[0] != shortened[1]
    assert names["svc.ok"] == "svc_ok"


def test_colliding_names_all_get_distinct_hashed_forms() -> None:
    names = check(["a.b_c", "a_b.c", "a.b.c", "other.tool"])
    assert len({names["a.b_c"], names["a_b.c"], names["a.b.c"]}) == 3
    assert all(names[c].startswith("a_b_c_") for c in ("a.b_c", "a_b.c", "a.b.c"))
    assert names["other.tool"] == "other_tool"


def test_names_do_not_depend_on_grant_order() -> None:
    canonicals = ["a.b_c", "a_b.c", "x" * 80 + ".y", "svc.get"]
    assert present(canonicals) == present(list(reversed(canonicals)))


def test_a_tool_keeps_its_plain_name_unless_it_collides() -> None:
    assert present(["a.b_c"])["a.b_c"] == base_name("a.b_c") == "a_b_c"


names_strategy = st.lists(
    st.tuples(
        st.text(alphabet="abcXYZ019._-", min_size=1, max_size=80),
        st.text(alphabet="abc_.-Q9", min_size=1, max_size=80),
    ).map(lambda pair: f"{pair[0]}.{pair[1]}"),
    max_size=30,
)


@given(names_strategy)
def test_any_set_of_canonical_names_gets_valid_unique_names(canonicals: list[str]) -> None:
    check(canonicals)
