"""What a client request's model calls used, and what that cost (SPEC §14): token usage
summed over the upstream calls of one request, and its price in USD per provider and model.

Prices are USD per million tokens. The built-in table holds the public list prices (standard
tier, no batch discount) from platform.openai.com/docs/pricing and
docs.anthropic.com/en/docs/about-claude/pricing as published in November 2025 (the ``-pro``
variants and the older GPT-4 and GPT-3.5 models at their own list prices, read again in
December 2026); a pod file overrides or extends them per provider (``prices:``, with a
``default`` entry for every model neither prices). A model nobody prices has no cost
(``None``): the audit says so instead of guessing, and an agent with a USD budget is refused
it (``server/accounting/budget_gate.py``).

Beside the prices, each model's most output tokens (the same pages): what a request without
an output cap may spend, held against a budget while it runs.
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


# Most specific first: the first glob that matches a model id gives its price. A family's
# ``-pro`` variant comes before the family: it costs ten or more times as much.
BUILT_IN_PRICES: dict[str, Price] = {
    "gpt-5-pro*": _price(15.00, 15.00, 120.00),
    "gpt-5-nano*": _price(0.05, 0.005, 0.40),
    "gpt-5-mini*": _price(0.25, 0.025, 2.00),
    "gpt-5*": _price(1.25, 0.125, 10.00),
    "gpt-4.1-nano*": _price(0.10, 0.025, 0.40),
    "gpt-4.1-mini*": _price(0.40, 0.10, 1.60),
    "gpt-4.1*": _price(2.00, 0.50, 8.00),
    "gpt-4o-mini*": _price(0.15, 0.075, 0.60),
    "gpt-4o*": _price(2.50, 1.25, 10.00),
    "chatgpt-4o*": _price(5.00, 5.00, 15.00),
    "gpt-4.5*": _price(75.00, 37.50, 150.00),
    "gpt-4-turbo*": _price(10.00, 10.00, 30.00),
    "gpt-4-*-preview": _price(10.00, 10.00, 30.00),  # the GPT-4 Turbo previews
    "gpt-4-32k*": _price(60.00, 60.00, 120.00),
    "gpt-4-[0-9]*": _price(30.00, 30.00, 60.00),  # gpt-4-0613 (not gpt-4.1, gpt-4o)
    "gpt-4": _price(30.00, 30.00, 60.00),
    "gpt-3.5-turbo*": _price(0.50, 0.50, 1.50),
    "codex-mini*": _price(1.50, 0.375, 6.00),
    "o4-mini*": _price(1.10, 0.275, 4.40),
    "o3-pro*": _price(20.00, 20.00, 80.00),
    "o3-mini*": _price(1.10, 0.55, 4.40),
    "o3*": _price(2.00, 0.50, 8.00),
    "o1-pro*": _price(150.00, 150.00, 600.00),
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


# A provider's ``prices`` entry for every model that neither its globs nor the table price.
DEFAULT_PRICE = "default"


def price_of(model: str | None, overrides: Mapping[str, Price] | None) -> Price | None:
    """The provider's own price for ``model`` (pod file), else the built-in one, else the
    provider's ``default``, else None."""
    if not model:
        return None
    overrides = overrides or {}
    for table in (overrides, BUILT_IN_PRICES):
        for glob, price in table.items():
            if glob != DEFAULT_PRICE and fnmatchcase(model, glob):
                return price
    return overrides.get(DEFAULT_PRICE)


# Most output tokens a model writes to one request, most specific first (Anthropic requires
# ``max_tokens`` on every request, so only what the OpenAI models allow matters in practice).
BUILT_IN_MAX_OUTPUT: dict[str, int] = {
    "gpt-5-pro*": 272_000,
    "gpt-5*": 128_000,
    "gpt-4.1*": 32_768,
    "gpt-4o*": 16_384,
    "chatgpt-4o*": 16_384,
    "gpt-4.5*": 16_384,
    "gpt-4-turbo*": 4_096,
    "gpt-4-*-preview": 4_096,
    "gpt-4-32k*": 32_768,
    "gpt-4-[0-9]*": 8_192,
    "gpt-4": 8_192,
    "gpt-3.5-turbo*": 4_096,
    "codex-mini*": 100_000,
    "o1-mini*": 65_536,
    "o[134]*": 100_000,
    "claude-opus-4-5*": 64_000,
    "claude-opus-4*": 32_000,
    "claude-sonnet-4*": 64_000,
    "claude-3-7-sonnet*": 64_000,
    "claude-haiku-4-5*": 64_000,
    "claude-3*": 8_192,
}
# A model neither the table nor the pod knows (a local model): output is bounded by its
# context, which the sidecar cannot see; this much is held for it while it runs.
UNKNOWN_MAX_OUTPUT = 32_768


def max_output_of(model: str | None) -> int | None:
    """The most output tokens ``model`` writes to one request, if the table knows it."""
    if model:
        for glob, tokens in BUILT_IN_MAX_OUTPUT.items():
            if fnmatchcase(model, glob):
                return tokens
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
