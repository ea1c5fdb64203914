"""The environment variables a pod hands its sidecar that ``clawc`` also names: the compiler
writes them into the pod's files (compose, swarm, Kubernetes), ``clawc``'s operator and audit
commands read them, and the sidecar reads their values (SPEC §13). Names only, never values."""

from __future__ import annotations

AUDIT_KEY_ENV = "CLAW_AUDIT_KEY"
"""The key of the audit chain's HMAC."""
OPERATOR_TOKEN_ENV = "CLAW_OPERATOR_TOKEN"
"""The operator token: the compose file references it, clawc's operator commands send it, the
operator API and console require it."""
WEBHOOK_SECRET_ENV = "CLAW_WEBHOOK_SECRET"
"""The ``whsec_`` secret approval webhooks are signed with."""
