"""Approvals are decided on the operator listener only, and every example says so (issue #26:
the docs sent operators to the agents' port 8080, which answers 404 for /operator/*)."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from tests.execution.test_governance import OPERATOR_TOKEN, Desk

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = [
    "README.md",
    "docs/running-a-pod.md",
    "docs/governance.md",
    "docs/operators.md",
    "compose/examples/trading-desk/pod.yml",
]
SIDECAR_URL = re.compile(r"--sidecar\s+(\S+)")  # clawc approvals / clawc audit show
OPERATOR_URL = re.compile(r"https?://\S+/(?:operator|console)\S*")


def test_every_approval_example_uses_the_operator_listener() -> None:
    for name in EXAMPLES:
        for number, line in enumerate((REPO / name).read_text().splitlines(), start=1):
            for url in SIDECAR_URL.findall(line) + OPERATOR_URL.findall(line):
                where = f"{name}:{number}: {url}"
                assert url.startswith("URL") or ":9090" in url, where


def test_the_example_pod_says_which_port_is_which() -> None:
    text = (REPO / "compose/examples/trading-desk/pod.yml").read_text()
    assert re.search(r"8080 +the agents' port", text)
    assert re.search(r"9090 +the operator listener", text)


async def test_the_agents_port_serves_no_operator_route(desk: Desk) -> None:
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for path in ("/operator/approvals", "/operator/audit", "/console/sign-in"):
            async with session.get(desk.sidecar.url + path) as response:
                assert response.status == 404, path
            async with session.get(desk.sidecar.admin_url + path) as response:
                assert response.status == 200, path
