"""The operator's side of a client desk (``client_desk.py``): its approvals API."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.execution.client_desk import ClientDesk
from tests.execution.test_governance import OPERATOR_TOKEN


async def pending_for_operator(desk: ClientDesk) -> dict[str, Any]:
    while True:
        status, body = await operator(desk, "GET", "/operator/approvals")
        assert status == 200
        if body["approvals"]:
            return body["approvals"][0]
        await asyncio.sleep(0.02)


async def decide(desk: ClientDesk, approval_id: str, decision: str) -> None:
    path = f"/operator/approvals/{approval_id}"
    assert (await operator(desk, "POST", path, decision=decision))[0] == 200


async def operator(desk: ClientDesk, method: str, path: str, **body: Any) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            desk.sidecar.admin_url + path,
            json=body or None,
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        ) as response,
    ):
        return response.status, await response.json()
