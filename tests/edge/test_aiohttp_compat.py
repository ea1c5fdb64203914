"""The edge's reliance on aiohttp internals is named in one module and checked at start-up: an
aiohttp without one of those names refuses to start, saying which name and which version."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from clawpod.sidecar.server.front import aiohttp_compat
from clawpod.sidecar.server.front.aiohttp_compat import AiohttpIncompatible, check, missing_names
from clawpod.sidecar.server.front.edge import EdgeLimits, EdgeRunner

SIDECAR = Path(__file__).resolve().parents[2] / "sidecar"


def test_the_installed_aiohttp_has_every_name() -> None:
    assert missing_names() == []
    check()


def test_a_handler_name_missing_is_named_with_the_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(RequestHandler, "_messages")
    with pytest.raises(AiohttpIncompatible) as refused:
        check()
    assert f"aiohttp {aiohttp.__version__} lacks RequestHandler._messages" in str(refused.value)


def test_a_server_attribute_missing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    plain_init = web.Server.__init__

    def init_without_kwargs(self: web.Server, *args: object, **kwargs: object) -> None:
        plain_init(self, *args, **kwargs)  # type: ignore[arg-type]
        del self._kwargs  # a release that keeps the handler options elsewhere

    monkeypatch.setattr(web.Server, "__init__", init_without_kwargs)
    assert missing_names() == ["Server._kwargs"]


def test_the_edge_refuses_to_start_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(RequestHandler, "_request_count")
    with pytest.raises(AiohttpIncompatible, match=r"RequestHandler\._request_count"):
        EdgeRunner(web.Application(), limits=EdgeLimits(), shutdown_timeout=1)


def test_no_other_module_reaches_into_aiohttp() -> None:
    """The compat module is the one place: its names appear in no other sidecar module."""
    names = {*aiohttp_compat.HANDLER_NAMES, *aiohttp_compat.SERVER_NAMES}
    names |= set(aiohttp_compat.RUNNER_NAMES)
    private = re.compile(
        r"\b(?:aiohttp\.(?:web_protocol|web_server|base_protocol)|(?:super\(\)|self)\.("
        + "|".join(sorted(names))
        + r"))\b"
    )
    offenders = [
        f"{path.relative_to(SIDECAR)}: {match.group(0)}"
        for path in SIDECAR.rglob("*.py")
        if path.name != "aiohttp_compat.py" and "aiohttp" in (text := path.read_text())
        for match in private.finditer(text)
    ]
    assert offenders == []
