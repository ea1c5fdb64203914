"""What a real runner sends the sidecar, recorded: a proxy in front of the sidecar keeps every
request and the status it got, so the runner matrix's fixtures
(tests/fixtures/runners/recorded/) are the runners' own traffic, named with runner and
version, never written from a description.

The runner matrix's cases that a fixture comes from re-record it when run with
``CLAW_RECORD_RUNNERS=1`` (``CLAW_RECORD_RUNNERS=1 scripts/test.sh -m runners -k NAME``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runners" / "recorded"
# Machine paths a runner puts in its prompts (its home, the repo, the cache) come out as this.
SCRUBBED = "/home/runner"


@dataclass
class Exchange:
    path: str
    request: dict[str, Any]
    status: int


@dataclass
class RecordingProxy:
    """Forwards every request to ``target`` as it is and records it with the status it got."""

    target: str
    exchanges: list[Exchange] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    async def start(self) -> RecordingProxy:
        app = web.Application(client_max_size=1 << 26)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._session = aiohttp.ClientSession(auto_decompress=False)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method, self.target + request.path_qs, data=body, headers=headers
        ) as upstream:
            exchange = Exchange(request.path, _json(body), upstream.status)
            self.exchanges.append(exchange)
            reply = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP},
            )
            await reply.prepare(request)
            async for chunk in upstream.content.iter_any():
                await reply.write(chunk)
            await reply.write_eof()
            return reply


_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        return {"raw": body.decode(errors="replace")}
    return value if isinstance(value, dict) else {"raw": value}


def scrub(value: Any, paths: list[str]) -> Any:
    """``value`` with each of ``paths`` (and any temporary directory) as ``SCRUBBED``."""
    text = orjson.dumps(value).decode()
    for path in sorted(paths, key=len, reverse=True):
        text = text.replace(path, SCRUBBED)
    text = re.sub(r"/tmp/[A-Za-z0-9_./-]+", SCRUBBED, text)
    return orjson.loads(text)


def recording() -> bool:
    return os.environ.get("CLAW_RECORD_RUNNERS") == "1"


def save(name: str, meta: dict[str, Any], exchanges: list[Exchange], paths: list[str]) -> Path:
    """Write the fixture ``name`` (runner and version in it) with ``paths`` scrubbed."""
    recorded = [{"path": e.path, "status": e.status, "request": e.request} for e in exchanges]
    fixture = {**meta, "exchanges": recorded}
    paths = [*paths, str(Path.home()), str(FIXTURES.parents[3])]
    target = FIXTURES / f"{name}.json"
    target.write_bytes(orjson.dumps(scrub(fixture, paths), option=orjson.OPT_INDENT_2) + b"\n")
    return target
