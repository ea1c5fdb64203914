"""The operator's side of approvals (SPEC §9.3) for tests: wait for a pending approval on the
sidecar's operator API and decide it, as `clawc approvals approve` does."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

POLL_S = 0.02


async def approve_next(sidecar_url: str, operator_token: str, reason: str = "checked") -> dict:
    """Wait until an approval is pending, approve it; the approval as it was listed."""
    headers = {"Authorization": f"Bearer {operator_token}"}
    async with aiohttp.ClientSession(sidecar_url, headers=headers) as session:
        while True:
            async with session.get("/operator/approvals") as response:
                assert response.status == 200, await response.text()
                listed: list[dict[str, Any]] = (await response.json())["approvals"]
            pending = [a for a in listed if a["status"] == "pending"]
            if pending:
                decision = {"decision": "approve", "reason": reason}
                async with session.post(
                    f"/operator/approvals/{pending[0]['id']}", json=decision
                ) as response:
                    assert response.status == 200, await response.text()
                return pending[0]
            await asyncio.sleep(POLL_S)
