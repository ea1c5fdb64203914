"""The compile-time warning where the Docker engine cannot keep agents off the host."""

from __future__ import annotations

from clawpod.compiler.output.host_isolation import FIREWALL_STEP, engine_warning


def test_engines_before_28_get_the_firewall_step() -> None:
    warning = engine_warning("20.10.24+dfsg1")
    assert warning is not None and FIREWALL_STEP in warning and "20.10.24" in warning
    assert engine_warning("27.5.1") is not None


def test_engines_from_28_and_no_engine_get_no_warning() -> None:
    assert engine_warning("28.0.0") is None
    assert engine_warning("29.1.3") is None
    assert engine_warning(None) is None
    assert engine_warning("dev") is None
