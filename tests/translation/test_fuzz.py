"""Hostile bodies in any shape: translating a request or an answer either works or raises
``Untranslatable`` (a clear 400 or 502 in the caller's protocol), never anything else (which
would be a 500), in every direction."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawpod.sidecar.translation import Untranslatable, translate_reply, translate_request

PROTOCOLS = ("chat", "messages", "responses")
KEYS = [
    "type",
    "role",
    "content",
    "text",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "id",
    "call_id",
    "input",
    "output",
    "tool_use_id",
    "source",
    "image_url",
    "url",
    "data",
    "media_type",
    "file",
    "file_data",
    "summary",
    "encrypted_content",
    "thinking",
    "signature",
    "choices",
    "message",
    "usage",
    "status",
    "finish_reason",
    "stop_reason",
    "tools",
    "tool_choice",
    "messages",
    "system",
    "instructions",
    "parameters",
    "input_schema",
    "response_format",
    "text",
    "format",
    "json_schema",
    "schema",
    "stop",
    "stop_sequences",
    "max_tokens",
    "model",
    "is_error",
    "refusal",
    "reasoning",
    "item",
    "items",
]
VALUES = [
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "function",
    "text",
    "image",
    "image_url",
    "input_text",
    "output_text",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "reasoning",
    "tool_use",
    "tool_result",
    "thinking",
    "document",
    "message",
    "base64",
    "url",
    "json_schema",
    "json_object",
    "custom",
    "auto",
    "any",
    "none",
    "required",
    "data:image/png;base64,AAAA",
    "stop",
    "tool_calls",
    "length",
    "completed",
]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(VALUES), st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
    ),
    max_leaves=30,
)
items = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6)
turns = st.lists(items, max_size=5)
# Bodies shaped like each protocol's, with hostile values inside.
bodies = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8),
    st.fixed_dictionaries(
        {"model": st.just("m"), "messages": turns},
        optional={"tools": st.lists(items, max_size=2), "system": json_values},
    ),
    st.fixed_dictionaries({"model": st.just("m"), "input": turns}),
    st.fixed_dictionaries(
        {"choices": st.lists(st.fixed_dictionaries({"message": items}), max_size=2)}
    ),
    st.fixed_dictionaries({"content": turns, "usage": json_values}),
    st.fixed_dictionaries({"output": turns, "status": st.sampled_from(VALUES)}),
)


def _survives(call: Any) -> None:
    with contextlib.suppress(Untranslatable):
        call()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=bodies,
    source=st.sampled_from(PROTOCOLS),
    target=st.sampled_from(PROTOCOLS),
)
def test_any_request_translates_or_is_untranslatable(
    body: dict[str, Any], source: str, target: str
) -> None:
    if source != target:
        _survives(lambda: translate_request(body, source, target))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=bodies, caller=st.sampled_from(PROTOCOLS), target=st.sampled_from(PROTOCOLS))
def test_any_answer_translates_or_is_untranslatable(
    answer: dict[str, Any], caller: str, target: str
) -> None:
    if caller == target:
        return
    plain = {
        "chat": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        "messages": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        "responses": {"model": "m", "input": "x"},
    }[caller]
    translated = translate_request(plain, caller, target)
    _survives(lambda: translate_reply(answer, translated))
