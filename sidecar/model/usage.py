"""What a client request's model calls used, and what that cost (SPEC §14): token usage
summed over the upstream calls of one request, and its price in USD per provider and model.

Prices are USD per million tokens. The built-in table holds the public list prices (standard
tier, no batch discount) from platform.openai.com/docs/pricing and
docs.anthropic.com/en/docs/about-claude/pricing as published in November 2025; a pod file
overrides or extends them per provider (``prices:``). A model the table does not know costs
nothing (``None``): the audit says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from ..manifest import Price, Provider


@dataclass(slots=True)
class Usage:
    """Token usage summed over every upstream call of one client request."""

    fields: dict[str, Any] = field(default_factory=dict)
    input_key: str = "input_tokens"
    output_key: str = "output_tokens"

    @property
    def input_tokens(self) -> int:
        return int(self.fields.get(self.input_key) or 0)

    @property
    def output_tokens(self) -> int:
        return int(self.fields.get(self.output_key) or 0)

    def add(self, other: dict[str, Any] | None) -> None:
        if other:
            self.fields = sum_usage(self.fields, other)


# A tuple, not ``int | float``: isinstance checks a tuple about twice as fast as a union, and
# every model call of a mediated request sums its usage.
_NUMBERS = (int, float)


def sum_usage(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Add numeric fields (recursively); keep the latest non-numeric ones (e.g. service_tier)."""
    merged = dict(left)
    for key, value in right.items():
        if value is None or isinstance(value, bool):
            merged.setdefault(key, value)
        elif isinstance(value, _NUMBERS):
            current = merged.get(key)
            merged[key] = (current if isinstance(current, _NUMBERS) else 0) + value
        elif isinstance(value, dict):
            current = merged.get(key)
            merged[key] = sum_usage(current if isinstance(current, dict) else {}, value)
        else:
            merged[key] = value
    return merged


# --- prices ------------------------------------------------------------------------------------

TOKENS_PER_PRICE_UNIT = 1_000_000
_CACHE_LIMIT = 4096


def _price(input: float, cached: float, output: float, cache_write: float | None = None) -> Price:
    return Price(input=input, cached_input=cached, output=output, cache_write=cache_write)


def _anthropic(input: float, output: float) -> Price:
    # Anthropic: cache reads at 0.1x input, 5-minute cache writes at 1.25x input.
    return _price(input, round(input * 0.1, 6), output, round(input * 1.25, 6))


# Most specific first: the first glob that matches a model id gives its price.
BUILT_IN_PRICES: dict[str, Price] = {
    "gpt-5-nano*": _price(0.05, 0.005, 0.40),
    "gpt-5-mini*": _price(0.25, 0.025, 2.00),
    "gpt-5*": _price(1.25, 0.125, 10.00),
    "gpt-4.1-nano*": _price(0.10, 0.025, 0.40),
    "gpt-4.1-mini*": _price(0.40, 0.10, 1.60),
    "gpt-4.1*": _price(2.00, 0.50, 8.00),
    "gpt-4o-mini*": _price(0.15, 0.075, 0.60),
    "gpt-4o*": _price(2.50, 1.25, 10.00),
    "o4-mini*": _price(1.10, 0.275, 4.40),
    "o3-mini*": _price(1.10, 0.55, 4.40),
    "o3*": _price(2.00, 0.50, 8.00),
    "o1-mini*": _price(1.10, 0.55, 4.40),
    "o1*": _price(15.00, 7.50, 60.00),
    "claude-opus-4-5*": _anthropic(5.00, 25.00),
    "claude-opus-4*": _anthropic(15.00, 75.00),
    "claude-sonnet-4*": _anthropic(3.00, 15.00),
    "claude-3-7-sonnet*": _anthropic(3.00, 15.00),
    "claude-3-5-sonnet*": _anthropic(3.00, 15.00),
    "claude-haiku-4-5*": _anthropic(1.00, 5.00),
    "claude-3-5-haiku*": _anthropic(0.80, 4.00),
    "claude-3-haiku*": _anthropic(0.25, 1.25),
}


def price_of(model: str | None, overrides: Mapping[str, Price] | None) -> Price | None:
    """The provider's own price for ``model`` (pod file), else the built-in one, else None."""
    if not model:
        return None
    for table in (overrides or {}, BUILT_IN_PRICES):
        for glob, price in table.items():
            if fnmatchcase(model, glob):
                return price
    return None


class PriceBook:
    """The pod's providers' prices, each (provider, model) looked up once: a request's cost
    must not cost a scan of the table."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self._overrides = {name: provider.prices for name, provider in providers.items()}
        self._cache: dict[tuple[str, str | None], Price | None] = {}

    def price(self, provider: str, model: str | None) -> Price | None:
        key = (provider, model)
        if key in self._cache:
            return self._cache[key]
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        found = self._cache[key] = price_of(model, self._overrides.get(provider))
        return found


def cost_usd(
    price: Price | None,
    usage: Mapping[str, int],
    *,
    input_includes_cached: bool,
) -> float | None:
    """USD for one model call's ``usage`` (an audit usage record). OpenAI counts cached input
    inside ``input_tokens``; Anthropic counts cache reads and writes beside it."""
    if price is None:
        return None
    cached = usage.get("cache_read_input_tokens", 0)
    written = usage.get("cache_creation_input_tokens", 0)
    fresh = usage.get("input_tokens", 0)
    if input_includes_cached:
        fresh = max(0, fresh - cached - written)
    write_price = price.input if price.cache_write is None else price.cache_write
    total = (
        fresh * price.input
        + cached * price.cached_input
        + written * write_price
        + usage.get("output_tokens", 0) * price.output
    )
    return total / TOKENS_PER_PRICE_UNIT
