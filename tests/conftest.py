"""Suite-wide plugin: the credential sweep (see tests/support/secret_sweep.py).

Every credential value handed to a test sidecar is registered; at the end of the session every
log record, everything a test wrote to stderr, every response body a sidecar served in the test
process, every collected text and every file under the session's temporary directory (all build
and state dirs) is searched for each value in every encoding an echo takes, and the session
fails if any appears.
Fixtures several areas share come from tests/support/fixtures.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from aiohttp import web

from clawpod.sidecar.server.request.context import STATE_KEY
from tests.support import secret_sweep
from tests.support.redis_server import redis_server  # noqa: F401 (a fixture of the redis suite)

pytest_plugins = ["tests.support.fixtures"]

_collector = secret_sweep.LogCollector()
_MAX_SWEPT_RESPONSE = 1 << 20


@pytest.fixture(autouse=True, scope="session")
def _sweep_every_sidecar_response() -> Iterator[None]:
    """Every response body a sidecar served in this process (whole or streamed, on the agents'
    port or the operator's) goes into the sweep, not only those a test collected."""
    write, write_eof = web.StreamResponse.write, web.StreamResponse.write_eof
    bodies: dict[int, bytearray] = {}

    def served_by_a_sidecar(response: web.StreamResponse) -> bool:
        request = response._req  # set once the response is prepared
        try:
            return request is not None and STATE_KEY in request.app
        except Exception:  # refused before routing (no app yet): not a sidecar answer to sweep
            return False

    async def sweeping_write(
        self: web.StreamResponse, data: bytes | bytearray | memoryview
    ) -> None:
        if served_by_a_sidecar(self):
            body = bodies.setdefault(id(self), bytearray())
            if len(body) < _MAX_SWEPT_RESPONSE:
                body += data
        await write(self, data)

    async def sweeping_write_eof(self: web.StreamResponse, data: bytes = b"") -> None:
        if served_by_a_sidecar(self):
            body = bodies.pop(id(self), bytearray()) + data
            request = self._req
            assert request is not None
            secret_sweep.collect(f"response to {request.method} {request.path}", bytes(body))
        await write_eof(self, data)

    web.StreamResponse.write = sweeping_write  # type: ignore[method-assign]
    web.StreamResponse.write_eof = sweeping_write_eof  # type: ignore[method-assign]
    yield
    web.StreamResponse.write, web.StreamResponse.write_eof = write, write_eof  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    root = logging.getLogger()
    root.addHandler(_collector)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)  # the sidecar's request lines are INFO


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The sidecar's request lines go straight to stderr, past the log collector; the teardown
    # report carries what every phase of the test captured.
    if report.when == "teardown" and report.capstderr:
        secret_sweep.collect(f"stderr of {report.nodeid}", report.capstderr)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    logging.getLogger().removeHandler(_collector)
    sweep = secret_sweep.SWEEP
    if not sweep.secrets:
        return
    trees = set(sweep.trees)
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        trees.add(factory.getbasetemp())
    leaks = secret_sweep.find_leaks(sweep.secrets, sweep.texts, trees)
    session.config.stash[_RESULT] = (len(sweep.secrets), len(sweep.texts), leaks)
    if leaks and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_RESULT = pytest.StashKey[tuple[int, int, list[str]]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    result = terminalreporter.config.stash.get(_RESULT, None)
    if result is None:
        return
    secrets, texts, leaks = result
    if leaks:
        terminalreporter.section("credential sweep: FAILED", red=True)
        for line in leaks[:50]:
            terminalreporter.write_line(line)
    else:
        terminalreporter.write_line(
            f"credential sweep: {secrets} credential values, {texts} texts and logs, "
            "all build/state files: clean"
        )
