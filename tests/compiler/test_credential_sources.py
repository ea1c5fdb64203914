"""A credential variable the service that checks it never gets is a warning at compile time
(it showed up only as 401s at call time: a descriptor's variable renamed on one side only)."""

from __future__ import annotations

import io

import pytest

from clawpod.cli.clawc import main as clawc
from tests.compiler.conftest import PodDir, descriptor, tool

BEARER = {"type": "bearer", "env": "DESK_READ_TOKEN"}


def pod(environment: str, claw: str = "describe: desk.json") -> str:
    return f"""\
    services:
      desk:
        image: example/desk
        {environment}
        x-claw: {{{claw}}}
      bot:
        image: example/agent
        x-claw: {{agent: {{}}, tools: [desk]}}
    """


@pytest.fixture
def desk(pod_dir: PodDir) -> PodDir:
    pod_dir.descriptor("desk.json", descriptor(tool("quote"), auth=BEARER))
    return pod_dir


def test_a_renamed_credential_variable_is_a_located_warning(desk: PodDir) -> None:
    compiled = desk.compile(pod('environment: {DESK_RO_TOKEN: "${DESK_RO_TOKEN}"}'))
    [warning] = compiled.warnings
    assert "service 'desk'" in warning and "/services/desk/environment" in warning
    assert "credential variable DESK_READ_TOKEN is not in this service's environment" in warning
    assert f"pod.yml:{desk.line_of('DESK_RO_TOKEN')}" in warning


@pytest.mark.parametrize(
    "environment",
    [
        'environment: {DESK_READ_TOKEN: "${DESK_READ_TOKEN}"}',
        'environment: ["DESK_READ_TOKEN=${DESK_READ_TOKEN}"]',
        "environment: [DESK_READ_TOKEN]",
        "env_file: desk.env",  # may set anything
        "",  # no environment at all: configured some other way
    ],
)
def test_a_service_given_the_variable_compiles_quietly(desk: PodDir, environment: str) -> None:
    assert desk.compile(pod(environment)).warnings == []


def test_a_service_outside_the_pod_is_not_judged(desk: PodDir) -> None:
    environment = 'environment: {DESK_RO_TOKEN: "${DESK_RO_TOKEN}"}'
    compiled = desk.compile(
        pod(environment, claw="describe: desk.json, url: 'http://10.1.2.3:4000'")
    )
    assert compiled.warnings == []


def test_principals_variables_are_checked_too(desk: PodDir) -> None:
    text = pod('environment: {DESK_READ_TOKEN: "${DESK_READ_TOKEN}"}').replace(
        "services:",
        "x-claw:\n      principals: {desk-rw: {service: desk, env: DESK_RW_TOKEN}}\n    services:",
        1,
    )
    [warning] = desk.compile(text).warnings
    assert "credential variable DESK_RW_TOKEN" in warning


def test_clawc_compile_prints_the_warning_and_still_succeeds(desk: PodDir) -> None:
    path = desk.pod(pod('environment: {DESK_RO_TOKEN: "${DESK_RO_TOKEN}"}'))
    out, err = io.StringIO(), io.StringIO()
    assert clawc(["compile", str(path)], out, err) == 0
    assert "warning" in err.getvalue() and "DESK_READ_TOKEN" in err.getvalue()
