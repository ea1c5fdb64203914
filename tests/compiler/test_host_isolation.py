"""The compile-time warning where the Docker engine cannot keep agents off the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawpod.compiler.output.host_isolation import (
    FIREWALL_STEP,
    engine_warning,
    firewall_rules_in_place,
)


def test_engines_before_28_get_the_firewall_step() -> None:
    warning = engine_warning("20.10.24+dfsg1", rules_in_place=False)
    assert warning is not None and FIREWALL_STEP in warning and "20.10.24" in warning
    assert engine_warning("27.5.1", rules_in_place=False) is not None


def test_engines_from_28_and_no_engine_get_no_warning() -> None:
    assert engine_warning("28.0.0", rules_in_place=False) is None
    assert engine_warning("29.1.3", rules_in_place=False) is None
    assert engine_warning(None, rules_in_place=False) is None
    assert engine_warning("dev", rules_in_place=False) is None


def test_an_old_engine_whose_host_drops_the_bridges_traffic_gets_no_warning() -> None:
    """scripts/provision-docker.sh applies the firewall step on engines older than 28: the
    agents cannot reach the host, so there is nothing to warn about."""
    assert engine_warning("20.10.24+dfsg1", rules_in_place=True) is None


def _firewall(bin_dir: Path, tool: str, has_rule: bool) -> None:
    """A stand-in for iptables that answers ``-C`` as the real one does: 0 when the rule is
    there, 1 when it is not."""
    script = bin_dir / tool
    script.write_text(f'#!/bin/sh\n[ "$1" = -C ] && exit {0 if has_rule else 1}\nexit 2\n')
    script.chmod(0o755)


@pytest.mark.parametrize(
    ("ipv4", "ipv6", "expected"), [(True, True, True), (True, False, False), (False, True, False)]
)
def test_the_rules_are_in_place_only_when_both_families_have_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ipv4: bool, ipv6: bool, expected: bool
) -> None:
    _firewall(tmp_path, "iptables", ipv4)
    _firewall(tmp_path, "ip6tables", ipv6)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert firewall_rules_in_place({}) is expected


def test_a_remote_engines_host_is_not_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _firewall(tmp_path, "iptables", True)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert firewall_rules_in_place({"DOCKER_HOST": "unix:///var/run/docker.sock"}) is True
    assert firewall_rules_in_place({"DOCKER_HOST": "tcp://10.0.0.5:2376"}) is False
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert firewall_rules_in_place({}) is False  # nothing to check with
