"""Import the example pod's tool service apps (trading-api, market-news) as real aiohttp apps.

trading = example_app("trading-api")
app = trading.create_app("token")          # bearer token it accepts
app[trading.RECEIVED]                       # what the service was sent, request by request
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

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
