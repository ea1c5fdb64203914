"""Evidence about a key (docs/providers.md "Keys under hostile agents"): whose fault a 429 is,
which retry hints are believed, and when a refused key is out."""

from __future__ import annotations

import math

import pytest

from clawpod.sidecar.server.providers.key_pool import (
    DEFAULT_REST_S,
    MAX_REST_S,
    KeyPool,
    blame_429,
    retry_after_s,
)


@pytest.mark.parametrize("value", ["NaN", "nan", "inf", "-1", "1e9", "Thu, 01 Jan 9999 00:00:00"])
def test_unbelievable_retry_hints_are_none(value: str) -> None:
    assert retry_after_s({"retry-after": value}) is None
    assert retry_after_s({"retry-after-ms": value}) is None
    assert retry_after_s({"retry-after": "30"}) == 30.0
    assert retry_after_s({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_s({"retry-after": str(MAX_REST_S + 1)}) is None


def test_a_key_is_out_only_once_refused_again_and_again() -> None:
    now = [1000.0]
    pool = KeyPool(["A", "B"], {"A": "a", "B": "b"}, clock=lambda: now[0])
    a = pool.keys[0]
    assert pool.refused(a) is False  # one 401 rests the key
    assert a.resting_until == now[0] + DEFAULT_REST_S
    now[0] += DEFAULT_REST_S
    pool.served(a)  # the provider took it again: the refusal was passing
    assert pool.refused(a) is False
    now[0] += DEFAULT_REST_S
    assert pool.refused(a) is True  # refused twice in a row: out until restart
    assert pool.seconds_until_ready() is not None  # B is still there
    assert math.isfinite(pool.seconds_until_ready() or 0.0)


@pytest.mark.parametrize(
    ("headers", "body", "blame"),
    [
        ({"x-ratelimit-remaining-requests": "0"}, b"", "key"),
        ({}, b'{"error": {"message": "Request too large for gpt-4o", "code": "x"}}', "request"),
        (
            {},
            b'{"error": {"message": "x: Limit 100, Requested 200.", "type": "tokens"}}',
            "request",
        ),
        (
            {},
            b'{"error": {"message": "x: Limit 100, Used 90, Requested 20.", "type": "tokens"}}',
            "key",
        ),
        ({}, b'{"error": {"type": "insufficient_quota", "message": "quota"}}', "key"),
        (
            {
                "anthropic-ratelimit-input-tokens-limit": "1000",
                "anthropic-ratelimit-input-tokens-remaining": "1000",
            },
            b'{"type": "error", "error": {"type": "rate_limit_error", "message": "over"}}',
            "request",
        ),
        (
            {
                "anthropic-ratelimit-input-tokens-limit": "1000",
                "anthropic-ratelimit-input-tokens-remaining": "200",
            },
            b'{"type": "error", "error": {"type": "rate_limit_error", "message": "over"}}',
            "key",
        ),
        ({}, b"slow down", "unknown"),
        ({"x-ratelimit-remaining-tokens": "NaN"}, b"<html>", "unknown"),
    ],
)
def test_whose_fault_a_429_is(headers: dict[str, str], body: bytes, blame: str) -> None:
    assert blame_429(headers, body) == blame
