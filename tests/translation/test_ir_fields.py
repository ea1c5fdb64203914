"""Each reader builds the neutral form positionally (cheaper on every request): every field a
request or an answer carries lands in the field of its name, so a field added to or moved
in ``model/neutral.py`` without the readers following fails here, not as a temperature sent
as top_p."""

from __future__ import annotations

from clawpod.sidecar.codecs import parts
from clawpod.sidecar.codecs.chat import neutral as chat
from clawpod.sidecar.codecs.messages import neutral as messages
from clawpod.sidecar.codecs.responses import neutral as responses
from clawpod.sidecar.model.neutral import Request, Usage

TURN = {"role": "user", "content": "Hi"}


SCALARS = (
    "model",
    "parallel_tool_calls",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "reasoning_effort",
    "legacy_functions",
    "system_role",
)
# What each request below asks alike; each test names what its protocol reads otherwise.
ASKED = {
    "model": "m",
    "parallel_tool_calls": False,
    "max_tokens": 7,
    "temperature": 0.3,
    "top_p": 0.9,
    "stop": ["END"],
    "stream": True,
    "reasoning_effort": "low",
    "legacy_functions": False,
    "system_role": "system",
}


def scalars(request: Request) -> dict[str, object]:
    return {name: getattr(request, name) for name in SCALARS}


def test_a_chat_request_fills_each_field_of_its_name() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "developer", "content": "Be brief."}, TURN],
        "parallel_tool_calls": False,
        "max_completion_tokens": 7,
        "temperature": 0.3,
        "top_p": 0.9,
        "stop": ["END"],
        "stream": True,
        "reasoning_effort": "low",
        "functions": [{"name": "f", "parameters": {"type": "object"}}],
    }
    request, _ = chat.read_request(body)
    assert scalars(request) == {**ASKED, "legacy_functions": True, "system_role": "developer"}
    assert [t.name for t in request.tools] == ["f"]


def test_a_messages_request_fills_each_field_of_its_name() -> None:
    body = {
        "model": "m",
        "system": "Be brief.",
        "messages": [TURN],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "max_tokens": 7,
        "temperature": 0.3,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "stream": True,
    }
    request, _ = messages.read_request(body)
    assert scalars(request) == {**ASKED, "reasoning_effort": None}


def test_a_responses_request_fills_each_field_of_its_name() -> None:
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": "Hi",
        "parallel_tool_calls": False,
        "max_output_tokens": 7,
        "temperature": 0.3,
        "top_p": 0.9,
        "stream": True,
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_object"}},
    }
    request, _ = responses.read_request(body)
    assert scalars(request) == {**ASKED, "stop": []}
    assert request.json_schema == {}


def test_answers_and_usage_fill_each_field_of_its_name() -> None:
    reply = messages.read_reply(
        {
            "id": "msg_1",
            "model": "m",
            "content": [{"type": "text", "text": "Hi"}],
            "stop_reason": "stop_sequence",
            "stop_sequence": "END",
            "usage": {
                "input_tokens": 10,
                "output_tokens": 3,
                "cache_read_input_tokens": 4,
                "cache_creation_input_tokens": 2,
            },
        }
    )
    assert (reply.id, reply.model, reply.created, reply.stop_sequence) == ("msg_1", "m", 0, "END")
    assert reply.usage == Usage(input=16, output=3, cache_read=4, cache_creation=2)
    openai = parts.read_openai_usage(
        {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
        "prompt_tokens",
        "completion_tokens",
    )
    assert openai == Usage(input=10, output=3, cache_read=4, reasoning=2)
