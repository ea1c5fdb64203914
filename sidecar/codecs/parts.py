"""What the three protocols' readers and writers share: data URLs, JSON arguments, checks."""

from __future__ import annotations

import base64
from typing import Any

import orjson

from ..model.neutral import Part, Untranslatable, Usage
from .base import as_int


def data_url(part: Part) -> str:
    """An image or document part as one URL (a ``data:`` URL for inline bytes)."""
    if "url" in part:
        return str(part["url"])
    return f"data:{part['media_type']};base64,{part['data']}"


def from_url(kind: str, url: Any, **extra: Any) -> Part:
    """An image or document part from a URL; a ``data:`` URL becomes inline base64 bytes."""
    if not isinstance(url, str) or not url:
        raise Untranslatable(f"an {kind} without a url")
    if url.startswith("data:"):
        head, _, data = url[5:].partition(",")
        media_type, _, encoding = head.partition(";")
        if encoding != "base64":
            raise Untranslatable(f"an {kind} data URL that is not base64")
        return {"type": kind, "media_type": media_type, "data": data, **extra}
    return {"type": kind, "url": url, **extra}


def arguments_text(arguments: Any) -> str:
    """Tool-call arguments as JSON text, as the OpenAI protocols carry them."""
    if isinstance(arguments, str):
        return arguments
    return orjson.dumps(arguments if arguments is not None else {}).decode()


def arguments_object(arguments: str, call: str) -> dict[str, Any]:
    """Tool-call arguments as the object Messages carries; text that is not a JSON object is
    the model's mistake, kept under ``_raw`` so the runner still sees what it wrote."""
    if not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return parsed if isinstance(parsed, dict) else {"_raw": arguments}


def as_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise Untranslatable(f"{what} is not an array")
    return value


def as_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Untranslatable(f"{what} is not an object")
    return value


def not_deferred(tool: dict[str, Any], *where: Any) -> dict[str, Any]:
    """``tool`` (a tool object or its function), refused when it asks for deferred loading
    (SPEC §23): deferral only works with its protocol's own search tool and the blocks a search
    answers with, which no other protocol carries."""
    if any(isinstance(w, dict) and w.get("defer_loading") for w in (tool, *where)):
        name = tool.get("name")
        raise Untranslatable(
            f"deferred loading (defer_loading on the tool {name!r}): it needs the caller's "
            "protocol's own tool search; offer the tool without it"
        )
    return tool


def string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise Untranslatable(f"{what} is not a string")
    return value


def result_text(content: list[Part]) -> str:
    """A tool result for protocols whose results are text only; images cannot ride along."""
    if any(p["type"] != "text" for p in content):
        kinds = sorted({p["type"] for p in content if p["type"] != "text"})
        raise Untranslatable(f"a tool result holding {', '.join(kinds)} (only text can be sent)")
    return "".join(p["text"] for p in content)


def stop_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return value
    raise Untranslatable("stop is neither a string nor an array of strings")


# Another protocol's reasoning rides in the one opaque field a client echoes back unchanged
# (a Messages thinking signature, a Responses item's encrypted_content), under this mark.
_CARRIED = "clawpod.carried."
# What may come back that way: reasoning only, never a block that makes the model act.
_REASONING = {"messages": ("thinking", "redacted_thinking"), "responses": ("reasoning",)}


def wrap_carried(carried: dict[str, Any]) -> str:
    return _CARRIED + base64.urlsafe_b64encode(orjson.dumps(carried)).decode()


def unwrap_carried(text: Any) -> dict[str, Any] | None:
    """The reasoning ``wrap_carried`` hid in ``text``, or None (not ours, or not reasoning)."""
    if not isinstance(text, str) or not text.startswith(_CARRIED):
        return None
    try:
        carried = orjson.loads(base64.urlsafe_b64decode(text[len(_CARRIED) :]))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(carried, dict) or not isinstance(carried.get("value"), dict):
        return None
    protocol = carried.get("protocol")
    if not isinstance(protocol, str) or carried["value"].get("type") not in _REASONING.get(
        protocol, ()
    ):
        return None
    return carried


def read_openai_usage(raw: Any, input_key: str, output_key: str) -> Usage | None:
    """Usage in either OpenAI shape: Chat's ``prompt_tokens``/``completion_tokens`` or
    Responses' ``input_tokens``/``output_tokens``, each with its ``_details``."""
    if not isinstance(raw, dict):
        return None
    details = raw.get(input_key + "_details")
    output = raw.get(output_key + "_details")
    # Positional: a keyword call of a dataclass costs twice as much, on every answer.
    return Usage(
        as_int(raw.get(input_key)),
        as_int(raw.get(output_key)),
        as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0,
        0,  # cache_creation: OpenAI reports none
        as_int(output.get("reasoning_tokens")) if isinstance(output, dict) else 0,
    )


def write_openai_usage(usage: Usage, input_key: str, output_key: str) -> dict[str, Any]:
    return {
        input_key: usage.input,
        input_key + "_details": {"cached_tokens": usage.cache_read},
        output_key: usage.output,
        output_key + "_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": usage.input + usage.output,
    }


def json_format(kind: Any, spec: Any, what: str) -> dict[str, Any] | None:
    """Structured output as the request's ``json_schema``: None for plain text, ``{}`` for
    JSON mode, ``{name, schema, strict}`` for a schema (``spec`` holds those)."""
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {}
    if kind == "json_schema":
        schema = as_dict(spec, f"{what}'s schema")
        return {
            "name": schema.get("name", "answer"),
            "schema": schema.get("schema") or {},
            "strict": schema.get("strict"),
        }
    raise Untranslatable(f"{what} {kind!r}")
