"""The trading desk of tests/execution/test_governance.py, compiled with the operator's extras
(an approval webhook, a webhook secret): a real sidecar, a real tool service, real SDKs."""

from __future__ import annotations

from pathlib import Path

from tests.execution.test_governance import ENV, POD, Desk, compile_desk
from tests.support.services import ToolService
from tests.support.sidecar import start_sidecar
from tests.support.upstream import StubUpstream

WEBHOOK_SECRET = "whsec_" + "c2lnbmluZy1rZXktZm9yLXRlc3RzLW9ubHktMzI="  # base64 of a test key


async def start_desk(
    tmp_path: Path,
    service: ToolService,
    upstream: StubUpstream,
    *,
    pod_name: str = "desk",
    webhook: str | None = None,
    timeout_ms: int = 60000,
    env: dict[str, str] | None = None,
    budgets: str | None = None,
) -> Desk:
    """Compile the desk (named ``pod_name``) under ``tmp_path`` and start its sidecar."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    approvals = "approvals: {{require: [desk.execute_trade], timeout-ms: {timeout_ms}"
    extra = f', webhook: "{webhook}"' if webhook else ""
    text = POD.replace(approvals + "}}", approvals + extra + "}}")
    text = text.replace("x-claw:\n", f"x-claw:\n  pod: {pod_name}\n", 1)
    if budgets is not None:  # in the pod file's own (format-escaped) braces
        text = text.replace("budgets: {{analyst: {{tokens-per-day: 20}}}}", f"budgets: {budgets}")
    out, tokens = compile_desk(tmp_path, service, upstream, pod_text=text, timeout_ms=timeout_ms)
    sidecar_env = {**ENV, "CLAW_WEBHOOK_SECRET": WEBHOOK_SECRET, **(env or {})}
    sidecar = await start_sidecar(out, tmp_path / "state", env=sidecar_env)
    return Desk(sidecar, service, upstream, tokens, out, tmp_path / "state")
