"""Import the example pod's tool service apps as real apps: trading-api and market-news are
aiohttp apps, research-mcp an ASGI app (the official MCP SDK's server; see :func:`serving_asgi`).

trading = example_app("trading-api")
app = trading.create_app("read", "trade")  # its read-only and its trading bearer token
app[trading.RECEIVED]                       # what the service was sent, request by request
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import uvicorn
import yaml

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "compose" / "examples" / "trading-desk"


def example_app(service: str) -> ModuleType:
    """The ``app.py`` module of ``compose/examples/trading-desk/<service>``, imported once."""
    name = "clawpod_example_" + service.replace("-", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE_DIR / service / "app.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[name]


def example_pod_copy(tmp: Path) -> dict[str, Any]:
    """The example pod file's content, to be written into ``tmp``: its descriptors are copied
    there (a pod reads named files only from its own tree) and build contexts made absolute."""
    pod = yaml.safe_load((EXAMPLE_DIR / "pod.yml").read_text())
    pod["x-claw"].pop("root", None)
    for definition in pod["services"].values():
        if isinstance(definition.get("build"), str):
            definition["build"] = str(EXAMPLE_DIR / definition["build"])
        claw = definition.get("x-claw", {})
        if "describe" in claw:
            source = (EXAMPLE_DIR / claw["describe"]).resolve()
            shutil.copytree(source.parent, tmp / "descriptors", dirs_exist_ok=True)
            claw["describe"] = f"descriptors/{source.name}"
    return pod


@contextlib.asynccontextmanager
async def serving_asgi(app: Any) -> AsyncIterator[str]:
    """``app`` (an ASGI app, such as the research-mcp service) served by uvicorn on 127.0.0.1 at
    a free port; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()
