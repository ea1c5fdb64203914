"""Stub providers that answer as OpenAI and Anthropic do, decided from each request: which
key it carries, its billing headers, its size. The bodies and headers are the providers'
documented and reported ones (the error messages as users quote them in public issues: see
each constant), so the sidecar reads the same evidence it would read from the real API."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from tests.support.upstream import Received, Reply, anthropic_message, openai_completion

# api.openai.com, quoted in public issue reports (openai-python, aider, shell_gpt).
OPENAI_MISMATCHED_ORGANIZATION = "OpenAI-Organization header should match organization for API key"
OPENAI_MISMATCHED_PROJECT = "OpenAI-Project header should match project for API key"
OPENAI_TOO_LARGE = (
    "Request too large for gpt-4o in organization {org} on tokens per min (TPM): Limit {limit}, "
    "Requested {requested}. The input or output tokens must be reduced in order to run "
    "successfully. Visit https://platform.openai.com/account/rate-limits to learn more."
)
OPENAI_RATE_LIMITED = (
    "Rate limit reached for gpt-4o in organization {org} on tokens per min (TPM): Limit "
    "{limit}, Used {used}, Requested {requested}. Please try again in 1.2s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)
# api.anthropic.com (docs.claude.com/en/api/errors; the message as quoted in public issues).
ANTHROPIC_OVER_LIMIT = (
    "This request would exceed the rate limit for your organization "
    "(a22cf6e6-a940-4fff-8c4c-1580816ac7be) of {limit:,} input tokens per minute. For details, "
    "refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for "
    "current usage. Please reduce the prompt length or the maximum tokens requested, or try "
    "again later."
)


def _estimated_tokens(received: Received) -> int:
    """What the provider counts against a tokens-per-minute limit: the prompt and the
    output cap (about four bytes a token)."""
    body = received.json
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return len(received.body) // 4 + int(cap)


@dataclass
class OpenAIRules:
    """api.openai.com for a pool of keys, each of one organization and project."""

    organizations: dict[str, str]  # key value -> its organization
    projects: dict[str, str] = field(default_factory=dict)  # key value -> its project
    tokens_per_minute: int = 30000
    busy: set[str] = field(default_factory=set)  # keys whose use reached their limit

    def __call__(self, received: Received) -> Reply:
        key = received.headers.get("Authorization", "").removeprefix("Bearer ")
        org = self.organizations.get(key)
        if org is None:
            return _openai_error(401, "Incorrect API key provided.", "invalid_api_key")
        sent_org = received.headers.get("OpenAI-Organization")
        if sent_org is not None and sent_org != org:
            return _openai_error(401, OPENAI_MISMATCHED_ORGANIZATION, "mismatched_organization")
        sent_project = received.headers.get("OpenAI-Project")
        if sent_project is not None and sent_project != self.projects.get(key):
            return _openai_error(401, OPENAI_MISMATCHED_PROJECT, "mismatched_project")
        limit = self.tokens_per_minute
        requested = _estimated_tokens(received)
        counters = {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-limit-tokens": str(limit),
        }
        if requested > limit:
            message = OPENAI_TOO_LARGE.format(org=org, limit=limit, requested=requested)
            reply = _openai_error(429, message, "rate_limit_exceeded", "tokens")
            reply.headers.update(counters, **{"x-ratelimit-remaining-tokens": str(limit)})
            return reply
        if key in self.busy:
            used = limit - requested // 2
            message = OPENAI_RATE_LIMITED.format(
                org=org, limit=limit, used=used, requested=requested
            )
            reply = _openai_error(429, message, "rate_limit_exceeded", "tokens")
            reply.headers.update(counters, **{"x-ratelimit-remaining-tokens": str(limit - used)})
            return reply
        return Reply.json(openai_completion(), headers=dict(counters))


def _openai_error(
    status: int, message: str, code: str, kind: str = "invalid_request_error"
) -> Reply:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Reply(status=status, body=orjson.dumps(body))


@dataclass
class AnthropicRules:
    """api.anthropic.com for a pool of keys with an input-tokens-per-minute limit."""

    keys: set[str]
    input_tokens_per_minute: int = 30000

    def __call__(self, received: Received) -> Reply:
        if received.headers.get("x-api-key") not in self.keys:
            return _anthropic_error(401, "authentication_error", "invalid x-api-key")
        limit = self.input_tokens_per_minute
        full = {
            "anthropic-ratelimit-input-tokens-limit": str(limit),
            "anthropic-ratelimit-input-tokens-remaining": str(limit),
            "anthropic-ratelimit-output-tokens-limit": "8000",
            "anthropic-ratelimit-output-tokens-remaining": "8000",
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
        }
        if len(received.body) // 4 > limit:
            reply = _anthropic_error(
                429, "rate_limit_error", ANTHROPIC_OVER_LIMIT.format(limit=limit)
            )
            reply.headers.update(full, **{"retry-after": "2"})
            return reply
        return Reply.json(anthropic_message(), headers=full)


def _anthropic_error(status: int, kind: str, message: str) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_stub"}
    return Reply(status=status, body=orjson.dumps(body))
