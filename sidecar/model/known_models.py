"""Concrete model ids the providers publish, for listing a pod whose providers name only globs.

``GET /v1/models`` lists concrete ids (a glob names no model a client could pick). A pod that
routes ``gpt-*`` and ``claude-*`` would list nothing; instead it lists these ids where a
provider's globs match them. This is a snapshot of the providers' public model pages
(platform.openai.com/docs/models, docs.anthropic.com/en/docs/about-claude/models), not a
promise that an account may use each one; to list exactly what a pod offers, put the exact
ids in the provider's ``models``. No API lists its models in a form this table could be
generated from offline, hence a table.
"""

from __future__ import annotations

KNOWN_MODELS: tuple[str, ...] = (
    # OpenAI
    "gpt-5",
    "gpt-5-mini",
    "gpt-5-nano",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-4.1-nano",
    "gpt-4o",
    "gpt-4o-mini",
    "o3",
    "o3-mini",
    "o4-mini",
    "o1",
    "codex-mini-latest",
    "chatgpt-4o-latest",
    # Anthropic
    "claude-opus-4-5",
    "claude-opus-4-1",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
)
