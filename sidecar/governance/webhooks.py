"""Signed approval webhooks (SPEC §15): each new approval is POSTed to the pod's
``approvals.webhook`` signed per Standard Webhooks, retried with backoff, and audited.

The signature is the ``standardwebhooks`` library's (HMAC-SHA256 over ``id.timestamp.body``
with the ``whsec_`` secret from ``CLAW_WEBHOOK_SECRET``), so any Standard Webhooks verifier
accepts it. One ``webhook-id`` per approval, kept across retries so a receiver can drop a
repeat; each attempt is signed with its own timestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError

from ..model.env_names import WEBHOOK_SECRET_ENV
from ..transport.client import HttpClient
from ..transport.errors import TransportError

log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT_S = 10
MAX_ATTEMPTS = 5
FIRST_BACKOFF_S = 0.5  # doubled after each failed attempt: 0.5, 1, 2, 4 s
# Answers worth another attempt: the receiver is busy or failing, not refusing this message.
RETRIED_STATUSES = frozenset({408, 425, 429})
# The receiver's answer is read only to keep its connection for the next delivery: its status
# is the answer. Past this, the rest is not read and the connection is closed (a 400 MiB body
# cost 409 MB and stalled every agent 6.5 s when it was read whole).
MAX_ANSWER_BYTES = 64 * 1024
SECRET_PREFIX = "whsec_"
MIN_SECRET_BASE64 = 32  # 24 bytes, the least Standard Webhooks recommends


class WebhookSecretError(Exception):
    """The pod names a webhook but ``CLAW_WEBHOOK_SECRET`` is missing or not a secret."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What happened to one approval's webhook: the audit record's fields."""

    webhook_id: str
    delivered: bool
    attempts: int
    status: int | None
    error: str | None

    def record(self, approval_id: str) -> dict[str, Any]:
        return {
            "event": "approval_webhook",
            "approval": approval_id,
            "webhook_id": self.webhook_id,
            "delivered": self.delivered,
            "attempts": self.attempts,
            "status": self.status,
            "error": self.error,
        }


def webhook_signer(url: str | None, env: Mapping[str, str]) -> Webhook | None:
    """The signer for the pod's webhook (None without one); raises
    :class:`WebhookSecretError` when a webhook is set but its secret is not usable."""
    if url is None:
        return None
    secret = env.get(WEBHOOK_SECRET_ENV)
    if not secret:
        raise WebhookSecretError(
            f"the pod's approvals.webhook needs {WEBHOOK_SECRET_ENV} (whsec_ and base64 of a "
            "random key, e.g. whsec_$(openssl rand -base64 32)) to sign its messages"
        )
    if len(secret.removeprefix(SECRET_PREFIX)) < MIN_SECRET_BASE64:
        raise WebhookSecretError(
            f"{WEBHOOK_SECRET_ENV} is too short: use at least 24 random bytes, base64-encoded"
        )
    try:
        return Webhook(secret)
    except (ValueError, EmptyWebhookSecretError) as exc:  # binascii.Error is a ValueError
        raise WebhookSecretError(
            f"{WEBHOOK_SECRET_ENV} is not a Standard Webhooks secret (whsec_ then base64): "
            f"{type(exc).__name__}"
        ) from None


class ApprovalWebhook:
    """Delivers approvals to one URL; :meth:`stop` ends pending retries (shutdown)."""

    def __init__(
        self,
        url: str,
        signer: Webhook,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        first_backoff_s: float = FIRST_BACKOFF_S,
    ) -> None:
        self.url = url
        self._signer = signer
        self._max_attempts = max_attempts
        self._first_backoff_s = first_backoff_s
        self._stopping = asyncio.Event()

    def signed_headers(
        self, webhook_id: str, body: bytes, now: datetime | None = None
    ) -> dict[str, str]:
        now = now or datetime.now(UTC)
        return {
            "Content-Type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._signer.sign(webhook_id, now, body.decode()),
        }

    async def deliver(self, client: HttpClient, payload: dict[str, Any]) -> Delivery:
        """POST ``payload`` until a 2xx, a refusal that retrying cannot change, the last
        attempt, or shutdown."""
        webhook_id = "msg_" + secrets.token_hex(12)
        body = orjson.dumps(payload)
        status: int | None = None
        error: str | None = None
        backoff = self._first_backoff_s
        for attempt in range(1, self._max_attempts + 1):
            status, error = await self._attempt(client, webhook_id, body)
            if status is not None and 200 <= status < 300:
                return Delivery(webhook_id, True, attempt, status, None)
            if status is not None and status < 500 and status not in RETRIED_STATUSES:
                break
            if attempt == self._max_attempts or await self._stopped_within(backoff):
                break
            backoff *= 2
        return Delivery(webhook_id, False, attempt, status, error)

    async def _attempt(
        self, client: HttpClient, webhook_id: str, body: bytes
    ) -> tuple[int | None, str | None]:
        try:
            response = await client.request(
                "POST",
                self.url,
                headers=self.signed_headers(webhook_id, body),
                body=body,
                timeout_s=ATTEMPT_TIMEOUT_S,
                max_body_bytes=MAX_ANSWER_BYTES,
            )
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300]
        try:
            await response.read()
        except TransportError:
            pass  # a cut or oversized body: the status has answered already
        finally:
            response.release()
        error = None if response.status < 300 else f"answered {response.status}"
        return response.status, error

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()
