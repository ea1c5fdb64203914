"""Token usage summed over the upstream calls of one client request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
